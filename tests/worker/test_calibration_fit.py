"""An OpenAI-compatible embedder has no shipped calibration: the worker fits one on the model's
noise, so recall says nothing for a query unrelated to everything stored while a related one keeps
its hit, and the fit is kept for the next start. The model here crowds its vectors into one cone
(the hashed embedder plus a shared direction), as some models do: raw cosines of unrelated text
sit near 0.7, far above recall's floor."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from skald.runtime.models.embedders import HashEmbedder
from support.stubs import ModelStub

DOCS = {
    "proxy.md": "# Proxy\n\ncaddy listens on port 8443 behind the firewall and terminates TLS for the api hosts",
    "backup.md": "# Backups\n\nrestic snapshots the postgres volume every night to the object store bucket",
    "oncall.md": "# On call\n\npage the database owner when replication lag passes thirty seconds",
}


def crowded_server() -> ModelStub:
    hashed = HashEmbedder()
    shared = np.random.default_rng(0).standard_normal(384).astype(np.float32)
    shared *= 1.5 / np.linalg.norm(shared)

    def respond(path: str, body: dict[str, Any]) -> tuple[int, Any, float]:
        texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
        vecs = [hashed.embed_sync(t) + shared for t in texts]
        return 200, {"data": [{"index": i, "embedding": (v / np.linalg.norm(v)).tolist()} for i, v in enumerate(vecs)],
                     "model": body.get("model", "crowded")}, 0

    return ModelStub(respond)


UNRELATED = ("banana smoothie recipe with oat milk", "who won the battle of hastings",
             "how do I prune apple trees in winter")


async def test_a_remote_model_is_fitted_so_recall_is_silent_on_unrelated_queries(
        deploy: Callable[..., Any], tmp_path: Path) -> None:
    server = crowded_server()
    data = tmp_path / "data"
    try:
        for name, calibration in (("raw", "off"), ("fitted", "auto")):
            w, c = await deploy(embedder="openai", embed_base_url=server.url, embed_model="crowded",
                                score_calibration=calibration, data_dir=data if name == "fitted" else tmp_path / name)
            for file, text in DOCS.items():
                await c.call("resources.add", {"content": text, "name": file, "target_uri": "viking://resources/ops",
                                               "wait": True})
            unrelated = [len((await c.recall(q)).entries) for q in UNRELATED]
            hit = (await c.recall("which port does caddy listen on behind the firewall")).entries
            cal = (await c.find("caddy port", include_provenance=True)).provenance["calibration"]
            if name == "raw":
                assert all(unrelated), unrelated  # uncalibrated: every unrelated query injects something
                assert cal["name"] == "identity"
            else:
                assert unrelated == [0, 0, 0]
                assert cal["name"].startswith("fitted:openai:crowded") and 0.5 < cal["lo"] < cal["hi"] < 1.0
            assert hit and hit[0].uri.startswith("viking://resources/ops/proxy.md")
            await w.stop()

        kept = json.loads((data / ".skald" / "calibrations.json").read_text())
        (entry,) = kept.values()
        assert entry["lo"] == cal["lo"] and entry["hi"] == cal["hi"]
        calls = len(server.calls)
        w, c = await deploy(embedder="openai", embed_base_url=server.url, embed_model="crowded", data_dir=data,
                            prefix=w.cfg.prefix)
        again = (await c.find("caddy port", include_provenance=True)).provenance["calibration"]
        assert again == cal == (await c.health()).actors["retriever"]["calibration"]
        assert len(server.calls) - calls < 10  # the probe and a query: not the 64 noise queries again
    finally:
        server.close()


async def test_a_model_that_does_not_answer_leaves_scores_raw_and_nothing_kept(
        tmp_path: Path, monkeypatch: Any, caplog: Any) -> None:
    from skald.runtime.models import calibrate
    from skald.runtime.models.embedders import OpenAIEmbedder

    down = ModelStub(lambda path, body: (503, {"error": "loading"}, 0))
    monkeypatch.setattr(calibrate, "FIT_TIMEOUT_S", 1.0)
    try:
        cal = await calibrate.serve(OpenAIEmbedder(down.url, "m", timeout_s=0.5, dim=384), "auto", True, tmp_path)
    finally:
        down.close()
    assert cal.identity and not (tmp_path / calibrate.FILE).exists()
    assert any("scores stay raw" in r.getMessage() for r in caplog.records)
