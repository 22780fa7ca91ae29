"""Another embedder, the same tree: rows the old one wrote are skipped (said and counted), and
`content.reindex` makes them findable again with the new one."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from skald.messages import errors
from skald.runtime.models.embedders import HashEmbedder
from support.stubs import ModelStub


def embeddings_server() -> ModelStub:
    """An OpenAI-compatible embeddings endpoint (the hashed embedder behind it)."""
    hashed = HashEmbedder()

    def respond(path: str, body: dict[str, Any]) -> tuple[int, Any, float]:
        texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
        vecs = [hashed.embed_sync(t) for t in texts]
        return 200, {"data": [{"index": i, "embedding": v.tolist()} for i, v in enumerate(vecs)],
                     "model": body.get("model", "hash")}, 0

    return ModelStub(respond)


async def test_reindex_brings_back_what_another_embedder_wrote(deploy: Callable[..., Any], tmp_path: Path) -> None:
    old, new = embeddings_server(), embeddings_server()  # two addresses: two models, by name
    settings = {"embedder": "openai", "embed_model": "hash", "embed_dim": 384, "data_dir": tmp_path / "data"}
    try:
        w1, c1 = await deploy(embed_base_url=old.url, **settings)
        await c1.call("resources.add", {"content": "# Proxy\n\ncaddy listens on port 8443 behind the firewall",
                                        "name": "proxy.md", "target_uri": "viking://resources/ops", "wait": True})
        mem = await c1.call("memories.write", {"category": "preferences",
                                               "content": "The user drinks oolong tea every morning"})
        assert (await c1.find("caddy port 8443")).resources
        await w1.stop()

        w2, c2 = await deploy(embed_base_url=new.url, prefix=w1.cfg.prefix, **settings)
        assert not (await c2.find("caddy port 8443")).resources  # the old model's rows are not comparable
        health = (await c2.health()).actors["retriever"]
        assert health["rows_other_model"] >= 2 and health["index"]["rows"] == 0

        top = await c2.reindex("viking://resources/ops", recursive=False)  # its own rows, not its entries'
        assert top.indexed and not (await c2.find("caddy port 8443", level=2)).resources
        got = await c2.reindex("viking://resources")
        assert got.indexed and got.rows >= 1 and got.uri == "viking://resources"
        memories = mem["root_uri"].rsplit("/", 1)[0]
        assert (await c2.reindex(memories)).indexed
        assert (await c2.reindex("viking://")).indexed  # the whole account (here the two above covered it)
        assert (await c2.health()).actors["retriever"]["rows_other_model"] == 0
        hits = (await c2.find("caddy port 8443")).resources
        assert hits and hits[0].uri.startswith("viking://resources/ops/proxy.md")
        assert any("oolong" in (h.abstract or "") for h in (await c2.find("oolong tea")).memories)
        assert any(path == "/v1/embeddings" for path, _ in new.calls)
    finally:
        old.close()
        new.close()


@pytest.mark.parametrize(("body", "code"), [
    ({"uri": "viking://resources/nothing-here"}, "NOT_FOUND"),
    ({"uri": "viking://resources", "mode": "semantic_and_vectors"}, "INVALID_ARGUMENT"),
    ({"uri": "viking://resources/.docs"}, "INVALID_ARGUMENT"),
    ({"uri": 7}, "INVALID_ARGUMENT"),
])
async def test_reindex_refuses_what_it_cannot_do(client, body: dict[str, Any], code: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(errors.SkaldError) as err:
        await client.call("content.reindex", body)
    assert err.value.code == code


async def test_a_rewritten_document_reuses_its_unchanged_sections_vectors_from_the_index_stream(
        deploy: Callable[..., Any]) -> None:
    """On a real JetStream index stream: the document record keeps no vectors, and a rewrite
    embeds only the section that changed; the others' vectors come back from their rows."""
    import msgspec

    from skald.store import document_records
    from support import documents as sample_docs

    w, c = await deploy()
    base = "viking://resources/reuse"
    text = sample_docs.handbook_md()
    first = await c.add_resource(content=text, name="handbook.md", target_uri=base, wait=True)
    assert first.sections >= 30 and first.embedded >= first.sections
    record = next((w.cfg.data_dir / "accounts").rglob(".docs/handbook.md.msgpack"))
    rec = msgspec.msgpack.decode(record.read_bytes(), type=document_records.DocRecord)
    assert len(rec.sections) == first.sections and not any(s.vector for s in rec.sections)
    again = await c.add_resource(content=text.replace("thirty-five days", "forty days"), name="handbook.md",
                                 target_uri=base, wait=True)
    assert again.sections == first.sections
    assert again.embedded <= 1 + 2 + 3  # the changed section, the document's two rows, the directories
    found = await c.find("how long are backups kept", target_uri=f"{base}/handbook.md", limit=3)
    assert any(m.uri.endswith("#backups") for m in found.resources)
