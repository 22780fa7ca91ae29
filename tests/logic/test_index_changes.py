"""A write, import, move or removal whose request died between the tree change and its index job: the note
it left is finished by an indexer's pass, so the index does not keep the source's rows for ever,
nor miss a file the tree serves. (The same with a real worker SIGKILLed at each step:
tests/processes/test_crash_matrix.py.)"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec
import pytest

from skald.actors.indexer import changes, imports
from skald.actors.kit import clock
from skald.messages import errors, subjects
from skald.messages import ingest as ingest_msgs
from skald.store import index_changes
from skald.store.local_tree import LocalTree
from support.memory_deploy import MemoryDeployment

A, B = "viking://resources/a/x.md", "viking://resources/b/x.md"


async def uris(d: MemoryDeployment, query: str) -> list[str]:
    r = await d.call("search.find", {"query": query})
    return [m["uri"] for m in r["resources"]]


def dead_request(d: MemoryDeployment, job_id: str, destination: str, at: float) -> index_changes.PendingChange:
    """What fs.mv (or, without a destination, fs.rm) of A notes before it changes the tree."""
    ns = d.indexer.ns
    src = ns.resolve(A, d.identity)
    roots = (destination,) if destination else ()
    job = ingest_msgs.IngestJob(job_id=job_id, account=src.account, remove_rows=((A, 2),), index_roots=roots,
                                refresh_dirs=(src.parent_uri,))
    dst = ns.resolve(destination, d.identity).key if destination else ""
    change = index_changes.PendingChange(source=src.key, destination=dst, at=at, job=job)
    index_changes.note(ns.tree, change)
    return change


async def finish(d: MemoryDeployment, job_id: str, older_than_s: float = 0.0, now: float | None = None) -> int:
    """One pass, waiting for the job it queues (if any) to be indexed."""
    async with d.bus.waiter(subjects.ingest_done("default", job_id)) as w:
        queued = (await changes.finish_pending(d.indexer.ns, d.indexer.bus, older_than_s, now)).queued
        if queued:
            done = msgspec.json.decode(await w.wait(10.0), type=ingest_msgs.IngestResult)
            d.index_seq = max(d.index_seq, done.index_seq)
    return queued


async def test_a_move_its_request_left_is_indexed_at_the_destination(client: MemoryDeployment) -> None:
    await client.call("fs.write", {"uri": A, "content": "zebra migration across the plains"})
    assert A in await uris(client, "zebra migration")
    change = dead_request(client, "j-moved", B, time.time())
    client.indexer.ns.tree.move(change.source, change.destination)  # the tree moved; the worker died here
    assert await finish(client, "j-moved", older_than_s=3600.0) == 0  # young: maybe a request still running
    assert [c.job.job_id for c in index_changes.pending(client.indexer.ns.tree)] == ["j-moved"]
    assert await finish(client, "j-moved") == 1
    found = await uris(client, "zebra migration")
    assert B in found and A not in found
    assert index_changes.pending(client.indexer.ns.tree) == []


async def test_a_removal_its_request_left_drops_the_rows(client: MemoryDeployment) -> None:
    await client.call("fs.write", {"uri": A, "content": "zebra migration across the plains"})
    change = dead_request(client, "j-removed", "", time.time() - 600)
    client.indexer.ns.tree.remove(change.source)
    assert A in await uris(client, "zebra migration")  # what the dead request left
    assert await finish(client, "j-removed") == 1
    assert A not in await uris(client, "zebra migration")


async def test_a_change_that_never_happened_is_dropped_and_its_rows_stay(client: MemoryDeployment) -> None:
    await client.call("fs.write", {"uri": A, "content": "zebra migration across the plains"})
    dead_request(client, "j-never", B, time.time() - 600)  # died after its note, before the tree changed
    assert await finish(client, "j-never") == 0
    assert index_changes.pending(client.indexer.ns.tree) == []
    assert A in await uris(client, "zebra migration")


async def indexed_text(d: MemoryDeployment, uri: str) -> str:
    """The abstract of the file's row in the index."""
    r = await d.call("search.find", {"query": "", "target_uri": uri, "level": 2, "limit": 10})
    return " ".join(h["abstract"] for h in r["resources"] if h["uri"] == uri)


def dead_write(d: MemoryDeployment, job_id: str, uri: str, at: float) -> index_changes.PendingChange:
    """What fs.write of `uri` notes before it writes."""
    vp = d.indexer.ns.resolve(uri, d.identity)
    job = ingest_msgs.IngestJob(job_id=job_id, account=vp.account, index_roots=(uri,))
    change = index_changes.PendingChange(source="", destination=vp.key, at=at, job=job)
    index_changes.note_write(d.indexer.ns.tree, change)
    return change


async def test_a_write_its_request_left_is_indexed(client: MemoryDeployment) -> None:
    await client.call("fs.write", {"uri": A, "content": "zebra migration across the plains"})
    change = dead_write(client, "j-written", A, time.time() - 600)
    client.indexer.ns.tree.write(change.destination, b"walrus colonies on the ice")  # the worker died here
    assert "zebra" in await indexed_text(client, A)  # the tree serves what no search finds
    assert await finish(client, "j-written") == 1
    assert "walrus" in await indexed_text(client, A)
    groups = [g for _, g in index_changes.write_groups(client.indexer.ns.tree)]
    assert index_changes.write_group(change.at) not in groups  # its minute long past: the group dropped


async def test_a_files_rows_take_the_time_of_the_request_that_wrote_it(client: MemoryDeployment) -> None:
    """A replayed or restored request writes its file now, at the clock of the original: its rows,
    and those of the folder it changed, carry the original's time, so `since` / `until` find them
    where they found them before."""
    past = datetime(2022, 1, 10, tzinfo=UTC).timestamp()
    at = clock.NOW.set(past)  # as the host sets it from a replayed request's `Skald-Clock`
    try:
        await client.call("fs.write", {"uri": A, "content": "zebra migration across the plains"})
    finally:
        clock.NOW.reset(at)
    before = await client.call("search.find", {"query": "zebra migration", "until": "2022-01-31"})
    after = await client.call("search.find", {"query": "zebra migration", "since": "2022-01-31"})
    assert A in [m["uri"] for m in before["resources"]] and A not in [m["uri"] for m in after["resources"]]
    # The directory the write changed was summarised now, by that request's job: its rows too.
    folder = {"query": "zebra migration", "level": [0, 1], "score_threshold": 0.0}
    before = await client.call("search.find", {**folder, "until": "2022-01-31"})
    after = await client.call("search.find", {**folder, "since": "2022-01-31"})
    parent = A.rsplit("/", 1)[0]

    def summaries(r: dict[str, Any]) -> list[str]:  # the folder's own rows (its abstract, its overview)
        return [m["uri"] for m in r["resources"] if m["uri"] != A and m["uri"].startswith(parent)]
    assert summaries(before) and not summaries(after), (summaries(before), summaries(after))
    await client.call("fs.write", {"uri": B, "content": "walrus colonies on the ice"})  # now: the file's own time
    assert B in await uris(client, "walrus colonies")
    r = await client.call("search.find", {"query": "walrus colonies", "since": "1h"})
    assert B in [m["uri"] for m in r["resources"]]


async def test_a_write_that_never_happened_is_dropped(client: MemoryDeployment) -> None:
    dead_write(client, "j-unwritten", B, time.time() - 600)  # died after its note, before the write
    assert await finish(client, "j-unwritten") == 0
    assert index_changes.write_groups(client.indexer.ns.tree) == []


async def test_finished_writes_leave_notes_a_pass_queues_nothing_for(client: MemoryDeployment) -> None:
    await client.call("fs.write", {"uri": A, "content": "zebra migration across the plains"})
    await client.call("fs.write", {"uri": B, "content": "walrus colonies on the ice"})
    t = client.indexer.ns.tree
    [(_, group)] = index_changes.write_groups(t)
    assert len(index_changes.writes_in(t, group)) == 2  # kept: a pass drops them a minute at a time
    assert await finish(client, "-", older_than_s=0.0) == 0  # each job done: nothing queued again
    assert await finish(client, "-", older_than_s=0.0, now=time.time() + 600) == 0
    assert index_changes.write_groups(t) == []  # the minute past the age: the group gone at once


class CountedEvents:
    """The deployment's bus, counting the events reads a pass makes (one a note it asks about)."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.reads = inner, 0

    async def last_event(self, name: str) -> bytes | None:
        self.reads += 1
        return await self.inner.last_event(name)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


async def test_a_pass_asks_about_each_write_once(client: MemoryDeployment) -> None:
    """An indexer's passes keep what they settled: a write whose job was found done is not asked
    about again while its group lives (a pass woken early for an import runs every few seconds)."""
    for uri in (A, B):
        await client.call("fs.write", {"uri": uri, "content": f"zebra migration {uri}"})
    counted, settled = CountedEvents(client.indexer.bus), {}
    t = client.indexer.ns.tree
    [(_, group)] = index_changes.write_groups(t)
    assert (await changes.finish_pending(client.indexer.ns, counted, 0.0, settled=settled)).queued == 0
    assert counted.reads == 2 and len(settled[group]) == 2
    assert (await changes.finish_pending(client.indexer.ns, counted, 0.0, settled=settled)).queued == 0
    assert counted.reads == 2  # nothing asked again
    await changes.finish_pending(client.indexer.ns, counted, 0.0, time.time() + 600, settled=settled)
    assert index_changes.write_groups(t) == [] and settled == {}  # the group dropped, and forgotten


async def test_moves_and_removals_leave_no_note(client: MemoryDeployment) -> None:
    await client.call("fs.write", {"uri": A, "content": "zebra migration across the plains"})
    await client.call("fs.mv", {"from_uri": A, "to_uri": B})
    await client.call("fs.rm", {"uri": B})
    await client.call("fs.write", {"uri": A, "content": "again"})
    with pytest.raises(errors.Conflict):  # noted, then refused by the tree: the note goes with the refusal
        await client.call("fs.mv", {"from_uri": A, "to_uri": "viking://resources/a"})
    with pytest.raises(errors.Conflict):  # a refused write changed nothing: no note either
        await client.call("fs.write", {"uri": A, "content": "once more", "mode": "create"})
    m = await client.call("memories.write", {"category": "preferences", "content": "Prefers oolong tea."})
    await client.call("memories.update", {"uri": m["root_uri"], "content": "Prefers green tea."})
    assert index_changes.pending(client.indexer.ns.tree) == []
    t = client.indexer.ns.tree
    await client.call("resources.add", {"content": "# Tides\n\nSpring tides follow the new moon.\n", "wait": True})
    await client.call("skills.add", {"content": "---\nname: tide-tables\ndescription: Reads tide tables.\n---\n",
                                     "wait": True})
    written = [c.destination for _, g in index_changes.write_groups(t) for c in index_changes.writes_in(t, g)]
    assert len(written) == 6  # four writes, a resource's content and a skill; the refused create none
    assert await finish(client, "-") == 0  # every job done: nothing queued again


def dead_import(d: MemoryDeployment, job_id: str, folder: str, vanished: list[str], at: float,
                until: float, lease: str = "") -> index_changes.PendingChange:
    """What resources.add of a re-added folder notes before it changes the tree: its job, with the
    rows of the files that vanished from the source."""
    ns = d.indexer.ns
    vp = ns.resolve(folder, d.identity)
    gone = tuple((f"{folder}/{name}", 2) for name in vanished)
    job = ingest_msgs.IngestJob(job_id=job_id, account=vp.account, index_roots=(folder,), remove_rows=gone)
    change = index_changes.PendingChange(source="", destination=vp.key, at=at, job=job, until=until, lease=lease)
    index_changes.note(ns.tree, change)
    return change


async def test_an_import_its_request_left_drops_vanished_rows_and_indexes_the_copy(
        client: MemoryDeployment, tmp_path: Path) -> None:
    src = tmp_path / "guide"
    src.mkdir()
    (src / "tides.md").write_text("# Tides\n\nSpring tides follow the new moon.\n")
    (src / "reefs.md").write_text("# Reefs\n\nCoral reefs bleach in warm water.\n")
    await client.call("resources.add", {"path": str(src), "wait": True})
    folder = "viking://resources/guide"
    assert f"{folder}/reefs.md" in await uris(client, "coral reefs bleach")
    # Re-added with reefs.md gone from the source and kelp.md new; the worker died after the copy.
    now = time.time()
    change = dead_import(client, "j-imported", folder, ["reefs.md"], at=now - 900, until=now - 100)
    t = client.indexer.ns.tree
    t.remove(f"{change.destination}/reefs.md")
    t.write(f"{change.destination}/kelp.md", b"# Kelp\n\nKelp forests shelter sea otters.\n")
    assert await finish(client, "j-imported", older_than_s=180.0) == 0  # its deadline is too near
    assert f"{folder}/reefs.md" in await uris(client, "coral reefs bleach")  # the rows no retry would see
    assert await finish(client, "j-imported", older_than_s=60.0) == 1
    assert f"{folder}/reefs.md" not in await uris(client, "coral reefs bleach")
    assert f"{folder}/kelp.md" in await uris(client, "kelp forests sea otters")
    assert index_changes.pending(t) == []


async def imported_reefs(client: MemoryDeployment, tmp_path: Path) -> str:
    """A folder of one page imported and indexed: its URI."""
    src = tmp_path / "guide"
    src.mkdir()
    (src / "reefs.md").write_text("# Reefs\n\nCoral reefs bleach in warm water.\n")
    await client.call("resources.add", {"path": str(src), "wait": True})
    return "viking://resources/guide"


async def test_a_pass_wakes_when_a_skipped_note_ripens_not_an_interval_later(client: MemoryDeployment,
                                                                              tmp_path: Path) -> None:
    folder = await imported_reefs(client, tmp_path)
    now = time.time()
    change = dead_import(client, "j-early", folder, ["reefs.md"], at=now, until=now + 1.5)  # killed early
    client.indexer.ns.tree.remove(f"{change.destination}/reefs.md")
    ns, bus = client.indexer.ns, client.indexer.bus
    skipped = await changes.finish_pending(ns, bus, 0.0, now)
    assert skipped.queued == 0 and skipped.next_ripe == change.ripe_at(0.0) == now + 1.5
    async with client.bus.waiter(subjects.ingest_done("default", "j-early")) as w:
        passes = asyncio.create_task(changes.keep_finishing(ns, bus, 0.0, interval_s=3600.0))
        try:
            done = msgspec.json.decode(await w.wait(30.0), type=ingest_msgs.IngestResult)  # not in an hour
        finally:
            passes.cancel()
    client.index_seq = max(client.index_seq, done.index_seq)
    assert f"{folder}/reefs.md" not in await uris(client, "coral reefs bleach")
    assert index_changes.pending(client.indexer.ns.tree) == []


async def test_an_import_whose_lease_lapsed_is_finished_before_its_deadline(client: MemoryDeployment,
                                                                             tmp_path: Path) -> None:
    """An import holds a lease while it runs: a pass does not wait for the deadline of one whose
    lease has lapsed (its worker died), and leaves alone one whose lease is held."""
    folder, bus = await imported_reefs(client, tmp_path), client.indexer.bus
    assert not [k for k in client.bus.leases if k.startswith("import.")]  # released when the import ended
    now = time.time()
    key = imports.import_lease("j-leased")
    assert await client.bus.lease_create(key, "j-leased") is not None  # the import, still running
    change = dead_import(client, "j-leased", folder, ["reefs.md"], at=now, until=now + 600, lease=key)
    client.indexer.ns.tree.remove(f"{change.destination}/reefs.md")
    held = await changes.finish_pending(client.indexer.ns, bus, 180.0, now)
    assert held.queued == 0 and held.next_ripe == now + changes.LEASE_CHECK_S  # asked again soon
    _, rev = await client.bus.lease_get(key) or ("", 0)
    await client.bus.lease_release(key, rev)  # lapsed: its worker died
    assert await finish(client, "j-leased", older_than_s=180.0, now=now) == 1
    assert f"{folder}/reefs.md" not in await uris(client, "coral reefs bleach")
    assert index_changes.pending(client.indexer.ns.tree) == []


async def test_an_import_whose_folder_is_gone_since_only_drops_its_rows(client: MemoryDeployment,
                                                                           tmp_path: Path) -> None:
    folder = await imported_reefs(client, tmp_path)
    change = dead_import(client, "j-gone", folder, ["reefs.md"], at=time.time() - 600, until=0.0)
    client.indexer.ns.tree.remove(change.destination, recursive=True)  # the import died; the folder went later
    job = index_changes.to_finish(change, watched_exists=False)
    assert job is not None and job.index_roots == () and job.remove_rows == ((f"{folder}/reefs.md", 2),)
    assert await finish(client, "j-gone") == 1
    assert f"{folder}/reefs.md" not in await uris(client, "coral reefs bleach")


async def test_imports_leave_no_note_and_a_done_jobs_note_queues_nothing(client: MemoryDeployment,
                                                                           tmp_path: Path) -> None:
    src = tmp_path / "guide"
    src.mkdir()
    (src / "tides.md").write_text("# Tides\n\nSpring tides follow the new moon.\n")
    r = await client.call("resources.add", {"path": str(src), "wait": True})
    await client.call("resources.add", {"path": str(src), "wait": False})
    t = client.indexer.ns.tree
    assert index_changes.pending(t) == []
    # Killed after its job was done and before its note went: the note goes and nothing is queued.
    dead_import(client, r["job_id"], "viking://resources/guide", [], at=time.time() - 600, until=0.0)
    assert await finish(client, "-") == 0
    assert index_changes.pending(t) == []


class HeldEmbedder:
    """The deployment's embedder, holding the first batch of passages until released: a job
    stopped between reading its files and publishing their rows."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.name, self.dim = inner, inner.name, inner.dim
        self.reading_done, self.release = asyncio.Event(), asyncio.Event()

    async def embed_query(self, text: str) -> Any:
        return await self.inner.embed_query(text)

    async def embed_queries(self, texts: list[str]) -> Any:
        return await self.inner.embed_queries(texts)

    async def embed_passages(self, texts: list[str]) -> Any:
        if not self.reading_done.is_set():
            self.reading_done.set()
            await self.release.wait()
        return await self.inner.embed_passages(texts)


async def test_a_file_removed_while_a_job_had_it_read_leaves_no_row(client: MemoryDeployment) -> None:
    """Two jobs side by side: one has read a file and not yet published its rows when a removal's
    job deletes them; its publish comes last and must not bring them back."""
    await client.call("fs.write", {"uri": A, "content": "zebra migration across the plains"})
    pipeline = client.indexer.pipeline
    vp = client.indexer.ns.resolve(A, client.identity)
    client.indexer.ns.tree.write(vp.key, b"walrus colonies on the ice")  # new text: the job must embed it
    held = pipeline.embedder = HeldEmbedder(pipeline.embedder)
    job = ingest_msgs.IngestJob(job_id="j-slow", account=vp.account, index_roots=(A,))
    slow = asyncio.create_task(pipeline.process(job))
    await asyncio.wait_for(held.reading_done.wait(), 10.0)
    await client.call("fs.rm", {"uri": A})  # its job deletes the file's rows now
    held.release.set()
    client.index_seq = max(client.index_seq, (await slow).index_seq)
    assert await indexed_text(client, A) == ""
    assert A not in await uris(client, "walrus colonies") + await uris(client, "zebra migration")


async def test_a_file_whose_name_holds_a_hash_keeps_its_rows(client: MemoryDeployment) -> None:
    """A section's URI is `<file>#<anchor>`, but a file's own name may hold a "#": the check of
    what a job published finds its node by the row, not by cutting the URI."""
    odd = "viking://resources/a/issue#42.md"
    await client.call("fs.write", {"uri": odd, "content": "zebra migration across the plains"})
    assert "zebra" in await indexed_text(client, odd)


def test_torn_or_foreign_notes_are_left_out_and_the_others_read(tmp_path: Path) -> None:
    """A note a crash tore, a file that is not a note, or a directory among the notes is skipped;
    every readable note is read (the notes of a directory are read at once, `Tree.read_many`)."""
    tree = LocalTree(tmp_path)
    job = ingest_msgs.IngestJob(job_id="j1", account="default", index_roots=("viking://resources/a.md",))
    kept = [index_changes.PendingChange(source="", destination=f"k/{i}", at=100.0 + i,
                                        job=msgspec.structs.replace(job, job_id=f"j{i}")) for i in range(3)]
    for c in reversed(kept):
        index_changes.note(tree, c)
        index_changes.note_write(tree, c)
    tree.write(index_changes.note_key("torn"), b'{"source": "", "destin')
    tree.write(index_changes.note_key("foreign"), b"not a note")
    tree.mkdir(index_changes.note_key("a-directory"))
    group = index_changes.write_group(100.0)
    tree.write(f"{group}/torn", b"{")
    assert index_changes.pending(tree) == kept  # oldest first
    assert sorted(index_changes.writes_in(tree, group), key=lambda c: c.at) == kept
