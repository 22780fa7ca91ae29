"""Documents end to end on the in-memory bus (real files, the real index, the real client API): a
folder of real files added, types detected, long documents split into addressable sections, skipped
files reported, passages served, originals intact, re-ingest re-embeds only what changed, removal
leaves no section behind."""

from __future__ import annotations

import base64
import os
import subprocess
from pathlib import Path

import pytest
from aiohttp import web

from skald.messages import catalog
from skald.messages.errors import Conflict, InvalidArgument, NotFound
from support import documents as sample_docs
from support.memory_deploy import MemoryClient

BASE = "viking://resources/docs"


@pytest.fixture
async def docs(client: MemoryClient, tmp_path: Path) -> dict[str, bytes]:
    files = sample_docs.write_folder(tmp_path / "docs")
    r = await client.add_resource(path=str(tmp_path / "docs"), wait=True)
    assert r.status == "done"
    assert {(s.uri.rsplit("/", 1)[-1], s.reason) for s in r.skipped} == {("logo.png", "unsupported_type"),
                                                                         ("blob.bin", "unsupported_type")}
    assert r.files == len(files) - 2 and r.sections >= 3 * 30  # three 40-section handbooks
    return {n: b for n, b in files.items() if n not in ("logo.png", "blob.bin")}


async def test_originals_are_kept_byte_for_byte_and_reads_serve_text(client: MemoryClient,
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
    with pytest.raises(NotFound):  # a folder's binaries are reported, not copied
        await client.read(f"{BASE}/logo.png")


async def test_the_passage_that_answers_is_found_and_served(client: MemoryClient, docs: dict[str, bytes]) -> None:
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


async def test_read_content_gives_each_hit_what_reading_it_gives(client: MemoryClient, docs: dict[str, bytes]) -> None:
    """A find with `read_content`: each hit's content is what `fs.read` of its URI serves, a
    section's own lines for a section hit (several sections of one document read from it once)."""
    found = await client.find("recovery point objective tier-one service backups", target_uri=BASE, limit=10,
                              read_content=True)
    hits = found.resources
    sections = [h for h in hits if "#" in h.uri]
    assert len(sections) >= 2 and len({h.uri.partition("#")[0] for h in sections}) < len(sections)
    for h in hits:
        assert h.content is not None, h.uri
        assert h.content.rstrip("\n") == (await client.read(h.uri)).content.rstrip("\n"), h.uri


async def test_a_document_node_lists_its_sections_and_thinking_descends_into_them(
        client: MemoryClient, docs: dict[str, bytes]) -> None:
    ov = await client.call("fs.overview", {"uri": f"{BASE}/handbook.md"})
    assert ov["content"].startswith("# Operations handbook") and "(#recovery-objectives) (lines " in ov["content"]
    pdf = await client.call("fs.overview", {"uri": f"{BASE}/report.docx"})
    assert "Quarterly report" in pdf["content"] and "\ufffd" not in pdf["content"]
    found = await client.search("which day does the on-call rotation hand over", target_uri=BASE,
                                limit=5)
    uris = [m.uri for m in found.resources]
    assert any(u.startswith(f"{BASE}/handbook.") and "#on-call-rotation" in u for u in uris), uris


async def test_code_files_are_found_by_their_symbols(client: MemoryClient, docs: dict[str, bytes]) -> None:
    found = await client.find("bucket that refills at a fixed rate", target_uri=f"{BASE}/ratelimit.py", limit=3)
    assert found.resources and found.resources[0].uri == f"{BASE}/ratelimit.py"


async def test_reingest_embeds_only_changed_sections_and_removal_drops_every_section(
        client: MemoryClient, docs: dict[str, bytes]) -> None:
    text = sample_docs.handbook_md().replace("thirty-five days", "forty days")
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


def git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True,
                   env={**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
                        "GIT_COMMITTER_EMAIL": "t@t"})


def project(root: Path) -> None:
    """A small repository: code, docs, a .gitignore'd build, node_modules, a virtualenv, a binary."""
    (root / "src").mkdir(parents=True)
    (root / "src" / "ratelimit.py").write_text(sample_docs.PY_MODULE)
    (root / "src" / "session.ts").write_text(sample_docs.TS_MODULE)
    (root / "docs").mkdir()
    (root / "docs" / "handbook.md").write_text(sample_docs.handbook_md())
    (root / "docs" / "notes.log").write_text("debug output\n")
    (root / ".gitignore").write_text("*.log\ngenerated/\n")
    for junk in ("node_modules/left-pad", ".venv/lib", "generated"):
        (root / junk).mkdir(parents=True)
        (root / junk / "index.js").write_text("module.exports = 1;\n")
    (root / "logo.png").write_bytes(sample_docs.PNG)


async def test_an_upload_imports_a_folder_as_git_sees_it_and_readding_drops_vanished_files(
        client: MemoryClient, tmp_path: Path) -> None:
    project(tmp_path / "proj")
    r = await client.add_resource(upload=tmp_path / "proj", wait=True)
    assert r.status == "done" and r.root_uri == "viking://resources/proj"
    names = sorted(u.removeprefix("viking://resources/proj/") for u in
                   (await client.glob("**", uri="viking://resources/proj")).matches if "." in u.rsplit("/", 1)[-1])
    assert names == ["docs/handbook.md", "src/ratelimit.py", "src/session.ts"], names
    assert [(s.uri, s.reason) for s in r.skipped] == [("viking://resources/proj/logo.png", "unsupported_type")]
    assert (await client.read("viking://resources/proj/src/ratelimit.py")).content == sample_docs.PY_MODULE
    (tmp_path / "proj" / "src" / "session.ts").unlink()
    again = await client.add_resource(upload=tmp_path / "proj", wait=True, exclude=["docs/"])
    assert again.removed == 2  # session.ts vanished; docs/ is excluded this time
    found = await client.find("bearer token session store", target_uri="viking://resources/proj", limit=5)
    assert not [m.uri for m in found.resources if "session.ts" in m.uri]
    with pytest.raises(NotFound):
        await client.stat("viking://resources/proj/src/session.ts")
    (tmp_path / "proj" / "src" / "session.ts").write_text(sample_docs.TS_MODULE)
    (tmp_path / "proj" / "src" / "ratelimit.py").unlink()
    kept = await client.add_resource(upload=tmp_path / "proj", wait=True, keep_missing=True)
    assert kept.removed == 0
    assert (await client.stat("viking://resources/proj/src/ratelimit.py")).size == len(sample_docs.PY_MODULE)


async def test_uploads_are_pieced_and_owned(client: MemoryClient, tmp_path: Path) -> None:
    big = tmp_path / "big.md"
    big.write_text(sample_docs.handbook_md(640))  # several upload pieces
    assert big.stat().st_size > 2 * 256 * 1024
    r = await client.add_resource(upload=big, wait=True)
    assert r.root_uri == "viking://resources/big.md" and r.sections > 100
    assert (await client.read("viking://resources/big.md", raw=True)).content == big.read_text()
    first = await client.call("resources.upload", {"path": "a.md", "data": "aGVsbG8="})
    with pytest.raises(Conflict):
        await client.call("resources.upload", {"path": "a.md", "data": "aGVsbG8=", "upload_id": first["upload_id"],
                                               "offset": 2})
    with pytest.raises(InvalidArgument):
        await client.call("resources.upload", {"path": "../escape.md", "data": "aGVsbG8="})
    with pytest.raises(NotFound):
        await client.add_resource(upload_id="0" * 32, wait=True)


async def test_a_git_repository_is_cloned_and_taken_as_git_sees_it(client: MemoryClient, tmp_path: Path) -> None:
    project(tmp_path / "work")
    git(tmp_path / "work", "init", "-q")
    git(tmp_path / "work", "add", "-A")
    git(tmp_path / "work", "commit", "-qm", "first")
    r = await client.add_resource(url=f"file://{tmp_path / 'work'}", wait=True)
    assert r.status == "done" and r.root_uri == "viking://resources/work"
    names = sorted(u.removeprefix("viking://resources/work/") for u in
                   (await client.glob("**", uri="viking://resources/work")).matches if "." in u.rsplit("/", 1)[-1])
    assert names == ["docs/handbook.md", "src/ratelimit.py", "src/session.ts"], names
    with pytest.raises(NotFound):
        await client.add_resource(url=f"file://{tmp_path / 'nothing-here'}", wait=True)


async def test_a_url_is_fetched_and_parsed_by_its_content_type(client: MemoryClient) -> None:
    pages = {"/handbook": ("text/html; charset=utf-8", sample_docs.handbook_html().encode()),
             "/files/handbook": ("application/pdf", sample_docs.handbook_pdf())}

    async def serve(request: web.Request) -> web.Response:
        if request.path not in pages:
            return web.Response(status=404)
        ctype, body = pages[request.path]
        return web.Response(body=body, headers={"Content-Type": ctype})

    app = web.Application()
    app.router.add_get("/{tail:.*}", serve)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        html = await client.add_resource(url=f"http://127.0.0.1:{port}/handbook", wait=True)
        assert html.root_uri == "viking://resources/handbook.html" and html.sections >= 30
        pdf = await client.add_resource(url=f"http://127.0.0.1:{port}/files/handbook", wait=True)
        assert pdf.root_uri == "viking://resources/handbook.pdf" and pdf.sections >= 30
        read = await client.read("viking://resources/handbook.pdf")
        assert read.format == "pdf" and "recovery point objective" in " ".join(read.content.split())
        with pytest.raises(NotFound):
            await client.add_resource(url=f"http://127.0.0.1:{port}/missing", wait=True)
    finally:
        await runner.cleanup()


async def test_tags_on_add_and_set_tags_reach_every_row_of_a_file(client: MemoryClient, tmp_path: Path) -> None:
    r = await client.add_resource(content=sample_docs.handbook_md(), name="handbook.md", target_uri=BASE,
                                  tags=["Team=platform"], wait=True)
    assert r.sections >= 30
    found = await client.find("recovery point objective", tags=["team=platform"], limit=3)
    assert found.resources and all(m.uri.startswith(f"{BASE}/handbook.md") for m in found.resources)
    assert "team=platform" in (found.resources[0].tags or [])
    done = await client.set_tags(f"{BASE}/handbook.md", ["TEAM=sre", "tier=1"])
    assert done.tags == ["team=sre", "tier=1"] and done.indexed
    assert not (await client.find("recovery point objective", tags=["team=platform"], limit=3)).resources
    assert (await client.find("recovery point objective", tags=["Team=sre", "tier=1"], limit=3)).resources
    removed = await client.set_tags(f"{BASE}/handbook.md", ["tier=1"], mode="remove")
    assert removed.tags == ["team=sre"]
    with pytest.raises(InvalidArgument):
        await client.set_tags(BASE, ["a=b"])
    with pytest.raises(InvalidArgument):
        await client.set_tags(f"{BASE}/handbook.md", ["not a tag"])


async def test_a_document_served_as_a_whole_carries_its_table_of_contents(client: MemoryClient,
                                                                          docs: dict[str, bytes]) -> None:
    """A long document's node among a context request's candidates is served with its table of
    contents (a line per section), which the index keeps out of the row the search returns."""
    got = await client.call(catalog.SEARCH_CANDIDATES, {"queries": ["Operations handbook sections"],
                                                        "buckets": [{"name": "resources", "limit": 30}]})
    docs_served = {c["uri"]: c for c in got["buckets"]["resources"] if c.get("is_dir") and "#" not in c["uri"]}
    for name in ("handbook.md", "handbook.pdf"):
        text = docs_served[f"{BASE}/{name}"]["text"]
        assert text.startswith("# Operations handbook") and "(#recovery-objectives) (" in text, name
        ov = await client.call("fs.overview", {"uri": f"{BASE}/{name}"})
        assert text == ov["content"]


async def test_restructuredtext_notebooks_and_books_are_sectioned_and_found(client: MemoryClient,
                                                                            tmp_path: Path) -> None:
    folder = tmp_path / "more"
    folder.mkdir()
    prose = "<p>" + "A consumer acknowledges a message once it has processed and stored it. " * 6 + "</p>"
    (folder / "handbook.rst").write_text(sample_docs.handbook_rst())
    (folder / "churn.ipynb").write_text(sample_docs.notebook_ipynb())
    (folder / "queues.epub").write_bytes(sample_docs.book_epub(
        {"intro": f"<h1>Introduction</h1>{prose}",
         "acks": f"<h1>Acknowledgements</h1>{prose}<h2>Redelivery</h2><p>An unacknowledged message is "
                 f"redelivered after the ack wait of thirty seconds.</p>{prose}"}, ["intro", "acks"]))
    r = await client.add_resource(path=str(folder), wait=True)
    more = "viking://resources/more"  # the folder's own name
    assert r.status == "done" and not r.skipped and r.files == 3
    found = await client.find("recovery point objective tier-one service", target_uri=f"{more}/handbook.rst",
                              limit=1)
    section = await client.read(found.resources[0].uri)
    assert "#" in found.resources[0].uri and "recovery point objective is fifteen minutes" in section.content
    whole = await client.read(f"{more}/handbook.rst")
    assert whole.format == "rst" and "## Recovery objectives" in whole.content  # its titles, as headings
    nb = await client.read(f"{more}/churn.ipynb")
    assert nb.format == "notebook" and "def churn_by_plan(frame):" in nb.content and '"cell_type"' not in nb.content
    book = await client.find("how long is the ack wait before redelivery", target_uri=f"{more}/queues.epub",
                             limit=3)
    texts = [(await client.read(h.uri)).content for h in book.resources]
    assert book.resources and any("thirty seconds" in t for t in texts)
