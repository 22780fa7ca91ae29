"""Documents end to end on a real deployment: a folder of real files added, types detected,
long documents split into addressable sections, skipped files reported, passages served,
originals intact, re-ingest re-embeds only what changed, removal leaves no section behind."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from skald.messages.errors import NotFound
from skald.runtime.client import SkaldClient
from tests.support import documents as D

BASE = "viking://resources/docs"


@pytest.fixture
async def docs(client: SkaldClient, tmp_path: Path) -> dict[str, bytes]:
    files = D.write_folder(tmp_path / "docs")
    r = await client.add_resource(path=str(tmp_path / "docs"), wait=True)
    assert r.status == "done"
    assert {(s.uri.rsplit("/", 1)[-1], s.reason) for s in r.skipped} == {("logo.png", "unsupported_type"),
                                                                         ("blob.bin", "unsupported_type")}
    assert r.files == len(files) and r.sections >= 3 * 30  # three 40-section handbooks
    return files


async def test_originals_are_kept_byte_for_byte_and_reads_serve_text(client: SkaldClient,
                                                                     docs: dict[str, bytes]) -> None:
    for name, data in docs.items():
        raw = await client.read(f"{BASE}/{name}", raw=True)
        got = base64.b64decode(raw.content) if raw.encoding == "base64" else raw.content.encode()
        assert got == data, name
    pdf = await client.read(f"{BASE}/handbook.pdf")
    assert pdf.format == "pdf" and "recovery point objective" in " ".join(pdf.content.split())
    assert "\ufffd" not in pdf.content
    docx = await client.read(f"{BASE}/report.docx", offset=4, limit=1)
    assert docx.content == "## Costs\n" and docx.start_line == 5 and docx.truncated
    with pytest.raises(Exception, match="unsupported_type"):
        await client.read(f"{BASE}/logo.png")


async def test_the_passage_that_answers_is_found_and_served(client: SkaldClient, docs: dict[str, bytes]) -> None:
    for name in ("handbook.md", "handbook.html", "handbook.pdf"):
        found = await client.find("recovery point objective tier-one service", target_uri=f"{BASE}/{name}",
                                  limit=3)
        top = found.resources[0]
        assert top.uri.startswith(f"{BASE}/{name}#") and top.level == 2, (name, top.uri)
        assert top.location.startswith("page " if name.endswith(".pdf") else "lines ")
        section = await client.read(top.uri)
        assert "recovery point objective is fifteen minutes" in " ".join(section.content.split())
        assert section.lines < 60  # the section, not the whole handbook
    ctx = await client.context("What is the recovery point objective?", max_tokens=1600)
    assert "recovery point objective is fifteen minutes" in ctx.rendered
    entry = next(e for e in ctx.entries if "fifteen minutes" in e.text)
    assert entry.detail == "full" and entry.location.startswith("lines ") and "#" in entry.uri
    assert 'location="lines ' in ctx.rendered


async def test_a_document_node_lists_its_sections_and_thinking_descends_into_them(
        client: SkaldClient, docs: dict[str, bytes]) -> None:
    ov = await client.call("fs.overview", {"uri": f"{BASE}/handbook.md"})
    assert "handbook" in ov["content"].lower()
    found = await client.search("which day does the on-call rotation hand over", target_uri=BASE,
                                limit=5)
    uris = [m.uri for m in found.resources]
    assert any(u.startswith(f"{BASE}/handbook.") and "#on-call-rotation" in u for u in uris), uris


async def test_code_files_are_found_by_their_symbols(client: SkaldClient, docs: dict[str, bytes]) -> None:
    found = await client.find("bucket that refills at a fixed rate", target_uri=f"{BASE}/ratelimit.py", limit=3)
    assert found.resources and found.resources[0].uri == f"{BASE}/ratelimit.py"


async def test_reingest_embeds_only_changed_sections_and_removal_drops_every_section(
        client: SkaldClient, docs: dict[str, bytes]) -> None:
    text = D.handbook_md().replace("thirty-five days", "forty days")
    r = await client.write(f"{BASE}/handbook.md", text, wait=True)
    assert r.indexed
    job = await client.add_resource(content=text, name="handbook.md", target_uri=BASE, wait=True)
    assert job.sections >= 30 and job.embedded <= 4  # unchanged: nothing but the directory rows
    found = await client.find("how long are backups kept", target_uri=f"{BASE}/handbook.md", limit=3)
    section = next(m.uri for m in found.resources if "#" in m.uri)
    assert section.endswith("#backups")
    assert "forty days" in (await client.read(section)).content
    await client.rm(f"{BASE}/handbook.md", wait=True)
    found = await client.find("recovery point objective", target_uri=BASE, limit=50)
    assert not [m.uri for m in found.resources if m.uri.startswith(f"{BASE}/handbook.md")]
    with pytest.raises(NotFound):
        await client.read(f"{BASE}/handbook.md#backups")
