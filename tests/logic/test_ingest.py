"""resources.add, skills.add and memories.write: files land in the tree and rows in the index."""

from __future__ import annotations

import asyncio
from pathlib import Path

import msgspec
import pytest

from skald.actors.indexer import wide
from skald.messages import errors
from skald.store.index import Query
from support.memory_deploy import MemoryDeployment


async def test_add_directory_resource(client: MemoryDeployment, tmp_path: Path) -> None:
    """A local folder is copied under viking://resources, summarised bottom-up and indexed."""
    src = tmp_path / "handbook"
    (src / "ops").mkdir(parents=True)
    (src / "README.md").write_text("# Handbook\n\nHow the team runs production.\n")
    (src / "ops" / "oncall.md").write_text("# On-call\n\nPage the primary first. Escalate after 15 minutes.\n")
    (src / "ops" / "deploy.py").write_text("def deploy(env):\n    pass\n\nclass Rollout:\n    def step(self):\n"
                                           "        pass\n")
    (src / ".secret").write_text("hidden files are not imported")
    r = await client.call("resources.add", {"path": str(src), "wait": True})
    assert r["status"] == "done" and r["root_uri"] == "viking://resources/handbook"
    assert r["files"] == 3 and r["directories"] >= 2 and r["generator"] == "extractive"
    ls = await client.call("fs.ls", {"uri": "viking://resources/handbook", "show_hidden": True})
    names = {e["name"] for e in ls["entries"]}
    assert ".secret" not in names and {"README.md", "ops", ".abstract.md", ".overview.md"} <= names
    ov = await client.call("fs.overview", {"uri": "viking://resources/handbook"})
    assert "How the team runs production" in ov["content"]
    code = await client.call("fs.overview", {"uri": "viking://resources/handbook/ops/deploy.py"})
    assert "def deploy(env)" in code["content"] and "class Rollout" in code["content"]
    hits = await client.call("search.find", {"query": "escalate page primary on-call"})
    assert hits["resources"][0]["uri"] == "viking://resources/handbook/ops/oncall.md"
    assert len(hits["resources"][0]["abstract"]) <= 256


async def test_add_text_resource_and_queue_without_wait(client: MemoryDeployment) -> None:
    r = await client.call("resources.add", {"content": "# Tea\n\nGreen tea brews at 80 degrees.", "name": "tea.md"})
    assert r["status"] == "queued" and r["root_uri"] == "viking://resources/tea.md"
    r2 = await client.call("resources.add", {"content": "# Tea\n\nGreen tea brews at 80 degrees.",
                                             "name": "tea2.md", "wait": True})
    assert r2["status"] == "done" and r2["index_seq"] > 0
    with pytest.raises(errors.InvalidArgument):
        await client.call("resources.add", {"content": "x", "path": "/tmp"})
    with pytest.raises(errors.NotFound):
        await client.call("resources.add", {"path": "/no/such/dir"})
    with pytest.raises(errors.InvalidArgument):
        await client.call("resources.add", {"content": "x", "target_uri": "viking://~/memories"})


async def test_skill_package_needs_name_and_description(client: MemoryDeployment, tmp_path: Path) -> None:
    pkg = tmp_path / "pdf-tools"
    pkg.mkdir()
    (pkg / "SKILL.md").write_text("---\nname: pdf-tools\ndescription: Extract tables and text from PDF files.\n"
                                  "---\n\n# PDF tools\n\nUse pdfplumber.\n")
    (pkg / "helper.py").write_text("def extract(path):\n    pass\n")
    r = await client.call("skills.add", {"path": str(pkg), "wait": True})
    assert r["status"] == "done" and r["root_uri"] == "viking://agent/skills/pdf-tools"
    hits = await client.call("search.find", {"query": "extract tables from pdf", "context_type": "skill"})
    assert hits["skills"] and all(h["context_type"] == "skill" for h in hits["skills"])
    top = {h["uri"]: h for h in hits["skills"]}
    assert top["viking://agent/skills/pdf-tools/SKILL.md"]["abstract"] == "Extract tables and text from PDF files."
    ab = await client.call("fs.abstract", {"uri": "viking://agent/skills/pdf-tools"})
    assert "Extract tables" in ab["content"]
    for bad in ("no frontmatter", "---\nname: x\n---\n", "---\ndescription: d\n---\n", "---\nname: ../x\n"
                "description: d\n---\n", "---\n: [\n---\n"):
        with pytest.raises(errors.InvalidArgument):
            await client.call("skills.add", {"content": bad})
    mine = await client.call("skills.add", {"content": "---\nname: mine\ndescription: Personal helper.\n---\n",
                                            "scope": "user", "wait": True})
    assert mine["root_uri"] == "viking://user/default/skills/mine"


async def test_memory_is_indexed_with_category_and_whole_body(client: MemoryDeployment) -> None:
    body = "# Summary\n\nAlice moved to Lisbon in March.\n\n# Details\n\nShe works remotely for a bakery chain."
    r = await client.call("memories.write", {"category": "events", "content": body, "tags": ["project=move"]})
    assert r["status"] == "done" and r["root_uri"].startswith("viking://user/default/memories/events/mem_")
    again = await client.call("memories.write", {"category": "events", "content": body})
    assert again["root_uri"] == r["root_uri"]
    hits = await client.call("search.find", {"query": "where did Alice move", "context_type": "memory", "level": 2})
    m = hits["memories"][0]
    assert m["uri"] == r["root_uri"] and m["category"] == "events" and m["abstract"] == body
    assert "memory_type=events" in m["tags"] and "project=move" in m["tags"]
    tagged = await client.call("search.find", {"query": "Alice", "tags": ["memory_type=events", "project=move"]})
    assert [x["uri"] for x in tagged["memories"]] == [r["root_uri"]]
    with pytest.raises(errors.InvalidArgument):
        await client.call("memories.write", {"category": "Bad Category", "content": "x"})
    with pytest.raises(errors.InvalidArgument):
        await client.call("memories.write", {"category": "events", "content": "x", "tags": ["nokey"]})


async def test_a_wide_directory_is_refreshed_once_per_interval_and_catches_up(
        client: MemoryDeployment, monkeypatch: pytest.MonkeyPatch) -> None:
    """Past WIDE_ENTRIES entries, jobs leave a directory's summary to one refresh per interval;
    that refresh takes in every entry added meanwhile, and so do the rows in the index."""
    monkeypatch.setattr(wide, "WIDE_ENTRIES", 3)
    monkeypatch.setattr(wide, "REFRESH_S", 0.5)
    pipeline = client.indexer.pipeline
    for i in range(8):
        r = await client.call("resources.add", {"content": f"# Runbook {i}\n\nHost {i} restarts nightly.",
                                                "name": f"runbook{i}.md", "target_uri": f"viking://resources/pile/r{i}",
                                                "wait": True})
        assert r["status"] == "done"
    assert "viking://resources/pile" in pipeline.wide.entries  # wide: refreshed on its own schedule
    assert pipeline.wide.deferred > 0
    index = client.retriever.index
    for _ in range(100):
        ov = (await client.call("fs.overview", {"uri": "viking://resources/pile"}))["content"]
        row = index.get("default", "viking://resources/pile", 1)
        if all(f"r{i}/" in ov for i in range(8)) and row is not None and "r7/" in row.text:
            break
        await asyncio.sleep(0.1)
    else:
        raise AssertionError(f"the wide directory's summary never caught up: {ov!r}")
    assert not pipeline._waiting


async def test_a_long_documents_progress_moves_as_its_passages_are_embedded(client: MemoryDeployment) -> None:
    """One file of many sections is one batch: its notes follow the embedding chunk by chunk, so the
    bar moves through the document instead of sitting at 0 and jumping near the end."""
    from skald.messages.ingest import IngestProgress

    text = "\n\n".join(f"## Step {i}\n\n" + " ".join(f"word{i}x{j}" for j in range(60)) for i in range(700))
    res = await client.call("resources.add", {"content": f"# Runbook\n\n{text}\n", "name": "runbook.md",
                                              "wait": True})
    notes = [msgspec.json.decode(raw, type=IngestProgress) for name, raw in client.bus.notes
             if name.endswith(f"ingest.progress.{res['job_id']}")]
    embedding = [n for n in notes if n.stage == "embedding"]
    assert len(embedding) >= 3 and embedding[0].passages_done < embedding[0].passages_total
    fractions = [n.fraction() for n in notes]
    assert fractions == sorted(fractions) and len({round(f, 3) for f in fractions if f < 1}) >= 3


GERMAN = ("Die Wartung des Servers beginnt jeden Montag um acht Uhr, und die Mitarbeiter prüfen zuerst die "
          "Protokolle der vergangenen Woche, bevor sie die neuen Versionen einspielen.")


async def test_a_documents_sections_take_its_language_from_one_identification(
        client: MemoryDeployment, monkeypatch: pytest.MonkeyPatch) -> None:
    """The language model is asked once per document, not once per section: German sections are
    German, an English one is told by its function words, as when each was identified alone."""
    from skald.store import language

    asked: list[str] = []
    identify = language._identify
    monkeypatch.setattr(language, "_identify", lambda text: asked.append(text) or identify(text))
    english = "The team checks the logs of the past week before it rolls out the new builds. "
    steps = [f"## Schritt {i}\n\n" + f"{GERMAN} Schritt {i} endet mit einer Prüfung der Dienste. " * 4
             for i in range(6)]
    steps.insert(3, "## Notes\n\n" + english * 8)  # sections of about 200 tokens: a long document
    await client.call("resources.add", {"content": "# Wartung\n\n" + "\n\n".join(steps) + "\n",
                                        "name": "wartung.md", "wait": True})
    await client.call("search.find", {"query": "Wartung"})  # the replica has taken the rows in
    index = client.retriever.index
    rows = index.scan(Query(account="default", prefixes=["viking://resources/wartung.md"],
                            levels=frozenset({2})), 50)
    langs = {r.uri.partition("#")[2]: r.lang for r in rows}
    assert len(langs) == 7, langs
    assert langs.pop(next(a for a in langs if "notes" in a)) == "en"
    assert set(langs.values()) == {"de"}
    assert len(asked) == 1
