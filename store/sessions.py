"""The session directory on disk (seed 001 layout). Every write is atomic or an fsync'd append.

    {session}/messages.jsonl              live (root) messages, one JSON object per line
    {session}/.meta.json                  created_at, total_message_count (monotonic), commit_count
    {session}/tool-results/               externalised tool outputs
    {session}/history/archive_NNN/        messages.jsonl, .meta.json, .overview.md, .abstract.md,
                                          .done (written last), .failed.json
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import uuid
from pathlib import Path
from typing import Any

import msgspec

from skald.messages.sessions import Message
from skald.store.archive_state import ArchiveListing
from skald.store.tree import write_atomic_sync

ARCHIVE_RE = re.compile(r"^archive_(\d+)$")
_msg_dec = msgspec.json.Decoder(Message)
_enc = msgspec.json.Encoder()


def lease_key(account: str, user: str, session_id: str) -> str:
    """The session's name in the lease bucket and in event subjects (NATS-safe)."""
    return "s" + hashlib.sha1(f"{account}\x00{user}\x00{session_id}".encode()).hexdigest()


def archive_name(index: int) -> str:
    return f"archive_{index:03d}"


def read_messages(path: Path) -> list[Message]:
    """Messages of a jsonl file; a torn or malformed line (a crash mid-append) is skipped."""
    try:
        data = path.read_bytes()
    except (FileNotFoundError, NotADirectoryError):
        return []
    out = []
    for line in data.split(b"\n"):
        if not line.strip():
            continue
        try:
            out.append(_msg_dec.decode(line))
        except (msgspec.DecodeError, msgspec.ValidationError):
            continue
    return out


def encode_lines(messages: list[Message]) -> bytes:
    return b"".join(_enc.encode(m) + b"\n" for m in messages)


def append_messages(path: Path, messages: list[Message]) -> None:
    """Durable append. A torn last line from an earlier crash is closed off first so it cannot
    swallow the new line."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        size = os.fstat(fd).st_size
        prefix = b""
        if size:
            last = os.pread(fd, 1, size - 1)
            if last != b"\n":
                prefix = b"\n"
        os.write(fd, prefix + encode_lines(messages))
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic_lines(path: Path, messages: list[Message]) -> None:
    write_atomic_sync(path, encode_lines(messages))


def write_bytes(path: Path, data: bytes) -> None:
    write_atomic_sync(path, data)


def read_text(path: Path) -> str:
    try:
        return path.read_text("utf-8", errors="replace")
    except (FileNotFoundError, NotADirectoryError):
        return ""


def read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_bytes() or b"{}")
    except (FileNotFoundError, NotADirectoryError):
        return None
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def write_json(path: Path, data: dict[str, Any]) -> None:
    write_atomic_sync(path, json.dumps(data, ensure_ascii=False, sort_keys=True).encode())


def archive_indexes(session: Path) -> list[int]:
    try:
        names = os.listdir(session / "history")
    except (FileNotFoundError, NotADirectoryError):
        return []
    return sorted(int(m.group(1)) for n in names if (m := ARCHIVE_RE.match(n)))


def read_archive(session: Path, index: int) -> ArchiveListing:
    d = session / "history" / archive_name(index)
    done_path = d / ".done"
    done = None
    unreadable = False
    if done_path.exists():
        done = read_json(done_path)
        if done is None:
            unreadable = True
    overview = None
    try:
        text = (d / ".overview.md").read_text("utf-8")
        overview = text if text.strip() else None
    except (FileNotFoundError, UnicodeDecodeError):
        overview = None
    meta = read_json(d / ".meta.json") or {}
    return ArchiveListing(archive_id=archive_name(index), index=index, done=done, done_unreadable=unreadable,
                          overview=overview, failed=read_json(d / ".failed.json"),
                          messages=read_messages(d / "messages.jsonl"),
                          checkpoints=list(meta.get("checkpoints") or []))


def marker_state(session: Path, index: int) -> str:
    """An archive's state from its markers alone, without reading its messages:
    completed | invalid | failed | pending | missing."""
    d = session / "history" / archive_name(index)
    if (d / ".done").exists():
        done = read_json(d / ".done")
        try:
            ok = done is not None and bool((d / ".overview.md").read_text("utf-8").strip())
        except (FileNotFoundError, UnicodeDecodeError):
            ok = False
        return "completed" if ok else "invalid"
    if (d / ".failed.json").exists():
        return "failed"
    return "pending" if d.is_dir() else "missing"


def create_archive(session: Path, index: int, messages: list[Message], meta: dict[str, Any]) -> Path:
    """All or nothing: the archive is built in a temp directory and renamed into place."""
    hist = session / "history"
    hist.mkdir(parents=True, exist_ok=True)
    tmp = hist / f".tmp-{uuid.uuid4().hex}"
    tmp.mkdir()
    try:
        write_atomic_sync(tmp / "messages.jsonl", encode_lines(messages))
        write_json(tmp / ".meta.json", meta)
        final = hist / archive_name(index)
        os.rename(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    fd = os.open(hist, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    return final


def merge_meta(path: Path, updates: dict[str, Any]) -> dict[str, Any]:
    """Read-modify-write of a .meta.json: Phase 2 adds fields, never drops Phase 1's."""
    meta = read_json(path) or {}
    meta.update(updates)
    write_json(path, meta)
    return meta


def latest_overview(session: Path) -> str:
    """The overview of the newest completed archive (state from markers only), or ''."""
    for i in reversed(archive_indexes(session)):
        if marker_state(session, i) == "completed":
            return read_text(session / "history" / archive_name(i) / ".overview.md")
    return ""


def message_text(m: Message) -> str:
    return "\n".join(getattr(p, "text", "") for p in m.parts if getattr(p, "text", None))


def recent_messages(session: Path, n: int) -> list[tuple[str, str]]:
    """The last `n` live messages that carry text, as (role, text)."""
    out = [(m.role, t) for m in read_messages(session / "messages.jsonl") if (t := message_text(m)).strip()]
    return out[-n:]
