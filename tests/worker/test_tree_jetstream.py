"""The Tree port's contract (`tests/unit/test_tree_port.py`) held against the JetStream tree, on a
real nats-server; plus what only it has to get right: key escaping, and a directory whose
`write_dir` never finished staying invisible."""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from nats.js.errors import NotFoundError

from skald.messages.ingest import IngestJob
from skald.runtime.bus import leader_reads
from skald.runtime.bus.jetstream_tree import JetStreamTree
from skald.runtime.bus.natsserver import EmbeddedNats
from skald.runtime.bus.tree_buckets import KV_OP, MTIME
from skald.runtime.bus.tree_keys import DIR_MARK, kv_key, mark, segment, token
from skald.store import index_changes
from skald.store.treeport import Entry, StoreUnavailable
from support import processes
from tests.unit.test_tree_port import (  # noqa: F401 - the contract's tests, run here on this tree
    test_a_file_larger_than_one_bus_message_round_trips,
    test_append_creates_then_extends,
    test_create_is_won_once,
    test_create_raced_by_threads_has_one_winner,
    test_list_is_sorted_with_kinds_and_refuses_what_is_not_a_directory,
    test_many_files_read_at_once_in_the_order_asked,
    test_many_keys_stat_at_once_as_each_alone,
    test_mkdir_makes_an_empty_directory_once_and_never_over_a_file,
    test_move_files_and_directories_never_over_something,
    test_notes_are_files_found_by_listing,
    test_remove_files_and_trees,
    test_write_dir_is_all_or_nothing_and_never_over_an_existing_one,
    test_write_read_replace_and_stat,
)

_buckets = itertools.count()


@pytest.fixture
def t(nats_server: EmbeddedNats) -> Iterator[JetStreamTree]:
    tree = JetStreamTree([nats_server.url], f"tree_test_{next(_buckets)}")
    yield tree
    tree.close()


@pytest.mark.parametrize("name", [".done", "a.b.c", "über café", "=", "x=2E", "日本語.md", "sp ace", "-_"])
def test_segments_escape_to_kv_tokens_and_back(name: str) -> None:
    tok = token(name)
    assert set(tok) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-=")
    assert segment(tok) == name and tok != DIR_MARK
    assert kv_key(f"a/{name}").split(".")[2] == tok


def test_odd_names_round_trip_through_the_bucket(t: JetStreamTree) -> None:
    names = ["über café.md", ".overview.md", "a.b", "日本語"]
    for n in names:
        t.write(f"docs/{n}", n.encode())
    assert [e.name for e in t.list("docs")] == sorted(names)
    assert all(t.read(f"docs/{n}") == n.encode() for n in names)


def test_an_unfinished_write_dir_is_invisible_and_can_be_written_again(t: JetStreamTree) -> None:
    t.write("h/keep.txt", b"k")
    system = t._run(t._bucket("_"))  # a writer died here: a file of the archive, not its marker
    t._run(system.put(kv_key("h/archive_002/messages.jsonl"), b"Fhalf"))
    t._run(system.put(kv_key("h/archive_002/stale.json"), b"Fold"))
    assert [e.name for e in t.list("h")] == ["keep.txt"] and t.stat("h/archive_002") is None
    t.write_dir("h/archive_002", {"messages.jsonl": b"whole\n"})
    assert [e.name for e in t.list("h")] == ["archive_002", "keep.txt"]
    assert t.read("h/archive_002/messages.jsonl") == b"whole\n"
    assert [e.name for e in t.list("h/archive_002")] == ["messages.jsonl"]  # the leftover purged


def test_a_file_past_one_message_lives_in_the_object_store_and_goes_with_its_key(t: JetStreamTree) -> None:
    big = b"x" * (9 * 1024 * 1024)
    t.write("b/big.bin", big)
    b = t._run(t._bucket("_"))
    stored = t._run(b.get(kv_key("b/big.bin")))
    assert stored is not None and stored.value[:1] == b"O" and len(stored.value) < 1024  # a pointer
    assert t.stat("b/big.bin") == Entry("big.bin", False, len(big), stored.mtime)  # its size from a header
    name = stored.value[1:].decode()
    assert t._run(b.objects.get(name)).data == big
    t.write("b/big.bin", b"small")  # replaced: the object goes
    again = t._run(b.get(kv_key("b/big.bin")))
    assert again is not None and again.value == b"Fsmall"
    with pytest.raises(Exception):  # noqa: B017 - the object store's own not-found error
        t._run(b.objects.get(name))


def _objects(t: JetStreamTree) -> list[str]:
    """The names of the live objects in the tree's SYSTEM bucket's store."""
    b = t._run(t._bucket("_"))
    try:
        return sorted(o.name for o in t._run(b.objects.list(ignore_deletes=True)))
    except NotFoundError:  # nats-py's answer for a store with none
        return []


def test_a_moved_directorys_big_file_keeps_its_object_until_it_is_removed(t: JetStreamTree) -> None:
    """An object is named for where its file was written; a moved directory's files keep theirs.
    Removing a new directory at the old path once deleted the moved file's object (its name
    matched), and removing the moved directory left it behind (its name did not)."""
    big = b"y" * (9 * 1024 * 1024)
    t.write("a/big.bin", big)
    t.write("a/small.md", b"s")
    t.move("a", "b")
    t.write("a/big.bin", big[:-1])  # a new directory at the old path, a big file of its own
    t.remove("a", recursive=True)
    assert t.read("b/big.bin") == big and len(_objects(t)) == 1
    t.remove("b", recursive=True)
    assert _objects(t) == []


_MOVER = """
import sys
from skald.messages.ingest import IngestJob
from skald.runtime.bus.jetstream_tree import JetStreamTree
JetStreamTree([sys.argv[1]], sys.argv[2]).move(sys.argv[3], sys.argv[4])
"""


def _killed(script: str, fault: str, *args: str) -> None:
    """`script` (a tree's call, `args` its argv) in a process of its own, SIGKILLed at `fault`
    (`store/faults.py`)."""
    done = subprocess.run([sys.executable, "-c", script, *args], timeout=60,
                          env={**os.environ, "SKALD_FAULT": fault}, capture_output=True, text=True)
    assert done.returncode == -signal.SIGKILL, done.stderr


def _tree_of(t: JetStreamTree, key: str) -> dict[str, bytes]:
    """Every file under a directory (or the one file at `key`), by its path below `key`."""
    entry = t.stat(key)
    if entry is None:
        return {}
    if not entry.is_dir:
        return {"": t.read(key)}
    out: dict[str, bytes] = {}
    for e in t.list(key):
        out.update({f"{e.name}/{k}".rstrip("/"): v for k, v in _tree_of(t, f"{key}/{e.name}").items()})
    return out


@pytest.mark.parametrize("kind", ["file", "directory"])
@pytest.mark.parametrize("fault", ["tree.move_intent", "tree.move_copied", "tree.move_purged"])
def test_a_move_killed_between_its_steps_ends_whole_in_one_place(nats_server: EmbeddedNats, kind: str,
                                                                  fault: str) -> None:
    """A worker SIGKILLed inside a move: before its copy stood, the source is untouched and the move
    can be asked again; after it, the source (still visible to a process that had the bucket open)
    goes once the same move is asked again or another process opens the bucket. Nothing is lost,
    nothing stays in two places, no intent is left."""
    bucket = f"tree_test_{next(_buckets)}"
    t = JetStreamTree([nats_server.url], bucket)
    try:
        src, dst = ("m/a.md", "m/b.md") if kind == "file" else ("m/a", "m/b")
        files = {"": b"one"} if kind == "file" else {"x.md": b"x", "sub/y.md": b"y", "big.bin": b"z" * (2 << 20)}
        for rel, data in files.items():
            t.write(f"{src}/{rel}".rstrip("/"), data)
        _killed(_MOVER, fault, nats_server.url, bucket, src, dst)
        copied = fault != "tree.move_intent"
        assert _tree_of(t, dst) == (files if copied else {})
        if fault == "tree.move_copied":  # both stand until someone finishes the move
            assert _tree_of(t, src) == files
            if kind == "file":
                t.move(src, dst)  # the request retried: finished, not refused (a directory: by `after`)
        elif fault == "tree.move_purged":  # the source made again before anyone finished the move
            t.write(f"{src}/{next(iter(files))}".rstrip("/"), b"new")
        after = JetStreamTree([nats_server.url], bucket)  # opening the bucket finishes what is left
        try:
            if fault == "tree.move_intent":
                assert _tree_of(after, src) == files
                after.move(src, dst)
            assert _tree_of(after, dst) == files
            assert _tree_of(after, src) == ({next(iter(files)): b"new"} if fault == "tree.move_purged" else {})
            system = after._run(after._bucket("_"))
            assert after._run(system.keys("m.>")) == []
        finally:
            after.close()
    finally:
        t.close()


_WRITER = """
import sys
from skald.messages.ingest import IngestJob
from skald.runtime.bus.jetstream_tree import JetStreamTree
JetStreamTree([sys.argv[1]], sys.argv[2]).write(sys.argv[3], b"w" * (9 << 20))
"""


def test_a_sweep_deletes_only_the_objects_no_file_points_at(nats_server: EmbeddedNats) -> None:
    """A writer SIGKILLed after storing a big file's object, before its key, leaves an object no
    file points at. The sweep deletes it once it is older than the age given, and keeps a file's own
    object and a moved file's (named for where it was written)."""
    bucket = f"tree_test_{next(_buckets)}"
    t = JetStreamTree([nats_server.url], bucket)
    try:
        big = b"k" * (9 << 20)
        t.write("s/keep.bin", big)
        t.write("s/a/moved.bin", big)
        t.move("s/a", "s/b")
        t.write("accounts/acme/resources/r.bin", big)
        _killed(_WRITER, "tree.object_written", nats_server.url, bucket, "s/lost.bin")
        assert t.stat("s/lost.bin") is None and len(_objects(t)) == 3
        young = t.sweep(older_than_s=3600)
        assert young.swept == [] and young.objects == 4 and young.young == 4 and young.accounts == 1
        swept = t.sweep(older_than_s=0)
        assert [n.split("/", 1)[1].split("@")[0] for n in swept.swept] == [kv_key("s/lost.bin")]
        assert swept.bytes == 9 << 20 and len(_objects(t)) == 2
        assert t.read("s/keep.bin") == t.read("s/b/moved.bin") == t.read("accounts/acme/resources/r.bin") == big
        assert t.sweep(older_than_s=0).swept == []
    finally:
        t.close()


def test_each_account_has_its_own_bucket_and_the_top_lists_them(t: JetStreamTree) -> None:
    t.write("accounts/acme/resources/a.md", b"a")
    t.write("accounts/x.y@z/resources/b.md", b"b")
    t.write("uploads/acme/u1/.owner", b"alice")
    assert [e.name for e in t.list("accounts")] == ["acme", "x.y@z"]
    assert [e.name for e in t.list("uploads")] == ["acme"]
    assert t.read("accounts/x.y@z/resources/b.md") == b"b"
    acme = t._run(t._bucket("acme"))
    assert t._run(acme.get(kv_key("accounts/acme/resources/a.md"))) is not None
    with pytest.raises(IsADirectoryError):
        t.read("accounts")


def test_index_change_notes_live_in_the_bucket_outside_every_account(t: JetStreamTree) -> None:
    """A move's note (store/index_changes.py) is found by one listing of the system bucket."""
    job = IngestJob(job_id="j1", account="acme", remove_rows=(("viking://resources/a.md", 2),))
    index_changes.note(t, index_changes.PendingChange(source="accounts/acme/resources/a.md", at=1.0, job=job))
    assert [c.job for c in index_changes.pending(t)] == [job]
    assert [e.name for e in t.list("accounts")] == []  # no account's bucket made for it
    index_changes.drop(t, "j1")
    index_changes.drop(t, "j1")  # gone already: fine
    assert index_changes.pending(t) == []
    written = IngestJob(job_id="j2", account="acme", index_roots=("viking://resources/b.md",))
    index_changes.note_write(t, index_changes.PendingChange(source="", destination="accounts/acme/resources/b.md",
                                                            at=2.0, job=written))
    [(began, group)] = index_changes.write_groups(t)  # a write's note, put without a write's checks
    assert began == 0.0 and [c.job for c in index_changes.writes_in(t, group)] == [written]
    index_changes.drop_group(t, group)
    assert index_changes.write_groups(t) == []
    with pytest.raises(ValueError):  # a note is small: one past half a message is a file's to write
        t.put_note("index-changes/big", b"x" * (64 << 20))


def test_a_directory_deep_below_costs_its_listing_nothing(t: JetStreamTree) -> None:
    for i in range(30):
        t.write(f"d/sub/deep/{i}/f.md", b"x")
    t.write("d/top.md", b"t")
    assert [(e.name, e.is_dir) for e in t.list("d")] == [("sub", True), ("top.md", False)]
    assert t.stat("d/sub/deep") == Entry("deep", True, 0, t.stat("d/sub/deep").mtime)


def test_appends_from_two_workers_interleave_whole(nats_server: EmbeddedNats) -> None:
    """Each tree remembers what it appended (one publish per append, no read); another writer in
    between moves the revision, the remembered value is refused and read again: nothing is lost."""
    bucket = f"tree_test_{next(_buckets)}"
    a, b = JetStreamTree([nats_server.url], bucket), JetStreamTree([nats_server.url], bucket)
    try:
        for i in range(6):
            (a if i % 3 else b).append("s/log.jsonl", f"{i}\n".encode())
        assert b.read("s/log.jsonl") == b"".join(f"{i}\n".encode() for i in range(6))
        a.write("s/other.txt", b"x")
        a.append("s/log.jsonl", b"6\n")
        b.write("s/log.jsonl", b"rewritten\n")  # a commit on another worker
        a.append("s/log.jsonl", b"7\n")
        assert a.read("s/log.jsonl") == b.read("s/log.jsonl") == b"rewritten\n7\n"
        a.remove("s", recursive=True)
        a.append("s/log.jsonl", b"fresh\n")
        assert b.read("s/log.jsonl") == b"fresh\n"
    finally:
        a.close()
        b.close()


def test_a_listing_past_the_servers_page_of_subjects_is_read_page_by_page(t: JetStreamTree) -> None:
    """The server names at most 100,000 subjects per stream-info answer: a directory holding more
    lists whole (published without acks for speed; the listing is what is under test)."""
    t.mkdir("big")
    system = t._run(t._bucket("_"))

    async def fill() -> None:
        nc = system.js._nc
        for i in range(100_050):
            await nc.publish(system.pre + kv_key(f"big/f{i:06d}"), b"F")
        await system.put(kv_key("big/last"), b"F")  # acknowledged once everything before it is stored

    t._run(fill())
    names = [e.name for e in t.list("big")]
    assert len(names) == 100_051 and names[0] == "f000000" and names[-2:] == ["f100049", "last"]


def test_a_server_that_stops_answering_is_the_ports_store_unavailable(tmp_path: Path) -> None:
    """While its server is away the tree raises the port's `StoreUnavailable` (worth a retry), never
    a NATS error its callers would have to know, nor a file-system answer they would believe; once
    the server is back the same call succeeds."""
    srv = EmbeddedNats(tmp_path / "nats", port=-1)
    srv.start()
    tree = JetStreamTree([srv.url], "tree_away", timeout_s=1.0,
                         connect={"max_reconnect_attempts": -1, "reconnect_time_wait": 0.2})
    try:
        tree.write("a/x.md", b"before")
        processes.silence(srv.proc.pid)  # alive, not answering: as a server mid-election
        try:
            with pytest.raises(StoreUnavailable):
                tree.write("a/y.md", b"during")
            with pytest.raises(StoreUnavailable):
                tree.read("a/x.md")
        finally:
            os.kill(srv.proc.pid, signal.SIGCONT)
        tree.write("a/y.md", b"after")
        assert tree.read("a/x.md") == b"before" and tree.read("a/y.md") == b"after"
    finally:
        tree.close()
        srv.stop()


def test_many_keys_read_at_once_are_what_each_read_alone_gives(t: JetStreamTree) -> None:
    """Plain files, a file in the object store (its size in a header), a moved file (its time in a
    header), a directory's marker, a deleted key and a key never written: each key's value,
    revision, time and headers as `get` reads them, across more than one window of requests."""
    t.write("d/small.md", b"hello")
    t.write("d/big.bin", b"x" * (t._nc.max_payload + 10))
    t.write("d/old.md", b"moved")
    t.move("d/old.md", "d/moved.md")
    t.mkdir("d/sub")
    b = t._run(t._bucket("_"))

    async def more() -> None:
        for i in range(leader_reads.WINDOW + 20):
            await b.put(kv_key(f"d/f{i:04d}"), b"F" + str(i).encode())
        await b.put(kv_key("d/gone"), b"F")
        await b.put(kv_key("d/gone"), b"", headers={KV_OP: "DEL"})

    t._run(more())
    keys = [kv_key("d/small.md"), kv_key("d/big.bin"), kv_key("d/moved.md"), mark("d/sub"), kv_key("d/gone"),
            kv_key("d/never"), *(kv_key(f"d/f{i:04d}") for i in range(leader_reads.WINDOW + 20))]
    many = t._run(b.get_many(keys))
    alone = [t._run(b.get(k)) for k in keys]
    assert many == alone
    assert many[4] is None and many[5] is None and all(f is not None for i, f in enumerate(many) if i not in (4, 5))
    assert MTIME in many[2].headers and many[-1].value == f"F{leader_reads.WINDOW + 19}".encode()  # type: ignore[union-attr]
    assert t._run(b.get_many([])) == []


def test_a_closed_tree_answers_unavailable_at_once(nats_server: EmbeddedNats) -> None:
    """A call after the tree closed (a recovery scan's read as its worker shuts down) is the port's
    StoreUnavailable, not a wait on a stopped loop; closing twice is harmless."""
    tree = JetStreamTree([nats_server.url], f"tree_test_{next(_buckets)}")
    tree.write("a/x.md", b"x")
    tree.close()
    with pytest.raises(StoreUnavailable):
        tree.read("a/x.md")
    tree.close()
