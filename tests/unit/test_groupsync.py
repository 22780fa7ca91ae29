"""Group commit's flush on real files: many session files made durable by one flush, a file that
cannot be written refused alone, torn lines closed off."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from skald.messages.sessions import Message, TextPart
from skald.store import groupsync, message_lines


def msg(i: str) -> Message:
    return Message(id=i, role="user", parts=[TextPart(text=f"text {i}")])


def ids(path: Path) -> list[str]:
    return [m.id for m in message_lines.read_messages(path)]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="syncfs is Linux's")
def test_many_files_share_one_flush(tmp_path: Path) -> None:
    before = dict(groupsync.COUNTS)
    out = groupsync.Appended()
    paths = [tmp_path / f"s{i}" / "messages.jsonl" for i in range(8)]
    for i, p in enumerate(paths):
        out.write(p, message_lines.encode_lines([msg(f"m{i}a"), msg(f"m{i}b")]))
    assert out.flush() == {}
    assert [ids(p) for p in paths] == [[f"m{i}a", f"m{i}b"] for i in range(8)]
    assert groupsync.COUNTS["syncfs"] == before["syncfs"] + 1 and groupsync.COUNTS["fsync"] == before["fsync"]


def test_a_few_files_are_fsynced_one_by_one(tmp_path: Path) -> None:
    before = dict(groupsync.COUNTS)
    message_lines.append_messages(tmp_path / "messages.jsonl", [msg("m1")])
    assert ids(tmp_path / "messages.jsonl") == ["m1"]
    assert groupsync.COUNTS["fsync"] == before["fsync"] + 1 and groupsync.COUNTS["syncfs"] == before["syncfs"]


def test_a_file_that_cannot_be_written_is_refused_alone(tmp_path: Path) -> None:
    blocked = tmp_path / "blocked" / "messages.jsonl"
    blocked.mkdir(parents=True)  # a directory where the file should be
    good = [tmp_path / f"s{i}" / "messages.jsonl" for i in range(5)]
    out = groupsync.Appended()
    out.write(blocked, message_lines.encode_lines([msg("x")]))
    for i, p in enumerate(good):
        out.write(p, message_lines.encode_lines([msg(f"m{i}")]))
    failed = out.flush()
    assert set(failed) == {blocked} and isinstance(failed[blocked], OSError)
    assert [ids(p) for p in good] == [[f"m{i}"] for i in range(5)]


def test_a_torn_last_line_is_closed_off_before_the_next(tmp_path: Path) -> None:
    path = tmp_path / "messages.jsonl"
    message_lines.append_messages(path, [msg("m1")])
    with open(path, "ab") as f:
        f.write(b'{"id": "torn", "ro')  # a crash in the middle of a line
    message_lines.append_messages(path, [msg("m2")])
    assert ids(path) == ["m1", "m2"]
