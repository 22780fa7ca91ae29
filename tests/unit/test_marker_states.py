"""An archive's state from its markers, and its whole listing (`store/sessions.py`): every state
and every file read right when many archives are read at once, on each tree."""

from __future__ import annotations

from pathlib import Path
from typing import cast

import msgspec
import pytest

from skald.actors.archive import recovery
from skald.messages.sessions import Message, TextPart
from skald.store import message_lines, sessions
from skald.store.session_meta import ArchiveMeta, Checkpoint, DoneMarker, FailedMarker, QuarantineMarker
from skald.store.treeport import Tree
from skald.store.uri import Identity, Namespace, VikingPath
from tests.unit.test_tree_port import IMPLEMENTATIONS


@pytest.mark.parametrize("kind", sorted(IMPLEMENTATIONS))
def test_each_archive_state_from_markers_read_at_once(kind: str, tmp_path: Path) -> None:
    t: Tree = IMPLEMENTATIONS[kind](tmp_path)
    s = sessions.SessionDir(vp=cast(VikingPath, None), tree=t, key="sess")

    def archive(i: int, **files: bytes) -> None:
        t.write_dir(s.akey(sessions.archive_name(i)), {"messages.jsonl": b"", **files})

    done = msgspec.json.encode(DoneMarker())
    archive(1, **{sessions.DONE: done, sessions.OVERVIEW: b"# Overview\n\nWhat was said."})
    archive(2, **{sessions.DONE: done, sessions.OVERVIEW: b"  \n"})  # an empty overview
    archive(3, **{sessions.DONE: b"{not json", sessions.OVERVIEW: b"# O"})  # a torn marker
    archive(4, **{sessions.DONE: b"", sessions.OVERVIEW: b"# O"})  # an old empty marker
    archive(5, **{sessions.QUARANTINED: msgspec.json.encode(QuarantineMarker()),
                  sessions.FAILED: msgspec.json.encode(FailedMarker())})
    archive(6, **{sessions.FAILED: msgspec.json.encode(FailedMarker())})
    archive(7)
    archive(8, **{sessions.OVERVIEW: b"# written before its .done"})
    want = ["completed", "invalid", "invalid", "completed", "quarantined", "failed", "pending", "pending", "missing"]
    indexes = list(range(1, 10))
    assert sessions.marker_states(s, indexes) == want
    assert [sessions.marker_state(s, i) for i in indexes] == want
    assert sessions.archive_indexes(s) == list(range(1, 9))
    assert sessions.marker_states(s, []) == []


def _said(i: int, n: int) -> list[Message]:
    return [Message(id=f"m{i}-{k}", role="user", parts=[TextPart(text=f"turn {k} of archive {i}")],
                    request_id=f"r{i}-{k}" if k % 2 else None) for k in range(n)]


@pytest.mark.parametrize("kind", sorted(IMPLEMENTATIONS))
def test_archive_listings_read_at_once_hold_every_file(kind: str, tmp_path: Path) -> None:
    t: Tree = IMPLEMENTATIONS[kind](tmp_path)
    s = sessions.SessionDir(vp=cast(VikingPath, None), tree=t, key="sess")
    done = DoneMarker(ending_message_id="m1-2", covered_failed_archives=["archive_000"])
    meta = ArchiveMeta(archive_id="archive_001", checkpoints=[Checkpoint(abstract="what came before")])
    t.write_dir(s.akey("archive_001"), {
        sessions.MESSAGES: message_lines.encode_lines(_said(1, 3)) + b'{"torn',
        sessions.META: msgspec.json.encode(meta),
        sessions.DONE: msgspec.json.encode(done), sessions.OVERVIEW: b"# Overview\n\nWhat was said."})
    t.write_dir(s.akey("archive_002"), {  # every marker unreadable, the overview not text
        sessions.MESSAGES: message_lines.encode_lines(_said(2, 1)), sessions.META: b"{not json", sessions.DONE: b"[",
        sessions.OVERVIEW: b"\xff\xfe", sessions.FAILED: b"{", sessions.QUARANTINED: b"{"})
    t.write_dir(s.akey("archive_003"), {sessions.FAILED: msgspec.json.encode(FailedMarker(stage="llm", error="x")),
                                        sessions.OVERVIEW: b"  \n"})  # no messages file, a blank overview
    one, two, three, four = sessions.read_archives(s, [1, 2, 3, 4])  # 4: no such archive
    assert [m.id for m in one.messages] == ["m1-0", "m1-1", "m1-2"]  # the torn last line skipped
    assert one.done == done and not one.done_unreadable and one.overview == "# Overview\n\nWhat was said."
    assert one.checkpoints == meta.checkpoints and one.failed is None and one.quarantined is None
    assert two.done is None and two.done_unreadable and two.overview is None and two.checkpoints == []
    assert two.failed is not None and two.failed.error == "unreadable .failed.json"
    assert two.quarantined is not None and two.quarantined.reason == "unreadable .quarantined.json"
    assert [m.id for m in two.messages] == ["m2-0"]
    assert three.messages == [] and three.overview is None and three.failed == FailedMarker(stage="llm", error="x")
    assert (four.archive_id, four.index, four.done, four.messages, four.failed) == ("archive_004", 4, None, [], None)
    # Each file as its own reader takes it, archive by archive: the same listings.
    for a in (one, two, three, four):
        aid = a.archive_id
        assert a.done == sessions.load(t, s.akey(aid, sessions.DONE), DoneMarker)[0]
        assert a.failed == sessions.read_failed(s, aid)
        assert a.checkpoints == sessions.read_archive_meta(s, aid).checkpoints
        assert a.messages == message_lines.read_messages_at(t, s.akey(aid, sessions.MESSAGES))
        assert a == sessions.read_archive(s, a.index)


@pytest.mark.parametrize("kind", sorted(IMPLEMENTATIONS))
def test_archive_listings_past_one_read(kind: str, tmp_path: Path) -> None:
    """More archives than one `read_many` is asked for: every one read, in the order asked."""
    t: Tree = IMPLEMENTATIONS[kind](tmp_path)
    s = sessions.SessionDir(vp=cast(VikingPath, None), tree=t, key="sess")
    n = sessions.ARCHIVES_READ_AT_ONCE + 6
    for i in range(1, n + 1):
        said = message_lines.encode_lines(_said(i, i % 3 + 1))
        t.write_dir(s.akey(sessions.archive_name(i)), {sessions.MESSAGES: said})
    order = list(range(n, 0, -1))
    got = sessions.read_archives(s, order)
    assert [a.index for a in got] == order
    assert [[m.id for m in a.messages] for a in got] == [[f"m{i}-{k}" for k in range(i % 3 + 1)] for i in order]
    assert sessions.read_archives(s, []) == []


async def test_the_recovery_scan_finds_every_pending_archive_of_every_session(tmp_path: Path) -> None:
    """Sessions of two accounts and users, more than the scan reads side by side: exactly the
    archives whose markers say pending, in the tree's order."""
    ns = Namespace(tmp_path)
    done = {sessions.DONE: msgspec.json.encode(DoneMarker()), sessions.OVERVIEW: b"# O"}
    want = []
    for account, user in (("acme", "ann"), ("acme", "bob"), ("zeta", "cy")):
        for n in range(recovery.SCAN_AT_ONCE + 1):
            s = sessions.session_dir(ns, Identity(account=account, user=user), f"s{n}")
            for i in range(1, n + 2):  # s0: one archive, completed; later ones: the last pending
                pending = i == n + 1 and n > 0
                files = {sessions.MESSAGES: b"", **({} if pending else done)}
                ns.tree.write_dir(s.akey(sessions.archive_name(i)), files)
                if pending:
                    want.append((account, user, f"s{n}", sessions.archive_name(i)))
    assert await recovery.pending_archives(ns) == want
    assert await recovery.pending_archives(Namespace(tmp_path / "empty")) == []


@pytest.mark.parametrize("kind", sorted(IMPLEMENTATIONS))
def test_the_newest_completed_archive_is_found_past_a_window_of_unfinished_ones(kind: str, tmp_path: Path) -> None:
    t: Tree = IMPLEMENTATIONS[kind](tmp_path)
    s = sessions.SessionDir(vp=cast(VikingPath, None), tree=t, key="sess")
    done = msgspec.json.encode(DoneMarker())
    assert sessions.latest_completed(s) is None
    t.write_dir(s.akey("archive_001"), {sessions.DONE: done, sessions.OVERVIEW: b"# First"})
    t.write_dir(s.akey("archive_002"), {sessions.DONE: done, sessions.OVERVIEW: b"# Second"})
    t.write_dir(s.akey("archive_003"), {sessions.DONE: b"{torn", sessions.OVERVIEW: b"# Third"})  # invalid
    t.write_dir(s.akey("archive_004"), {sessions.DONE: done, sessions.OVERVIEW: b" \n"})  # invalid: no overview
    for i in range(5, 5 + sessions.LATEST_WINDOW):  # pending and failed ones, more than one window
        t.write_dir(s.akey(sessions.archive_name(i)), {sessions.MESSAGES: b"", **(
            {sessions.FAILED: msgspec.json.encode(FailedMarker())} if i % 2 else {})})
    assert sessions.latest_completed(s) == ("archive_002", "# Second")
    assert sessions.latest_overview(s) == "# Second"
    assert sessions.marker_states(s, [2, 3, 4]) == ["completed", "invalid", "invalid"]
