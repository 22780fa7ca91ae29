"""A session's message logs as bytes: one JSON message a line, appended durably, read back with a
torn or malformed line (a crash mid-append) skipped. The session directory's layout is
`store/sessions.py`; this is only what its `messages.jsonl` files hold."""

from __future__ import annotations

from pathlib import Path

import msgspec

from skald.messages.sessions import Message
from skald.store import groupsync
from skald.store.treeport import Tree

_msg_dec = msgspec.json.Decoder(Message)
_enc = msgspec.json.Encoder()


def read_messages(path: Path) -> list[Message]:
    """Messages of a jsonl file; a torn or malformed line (a crash mid-append) is skipped."""
    try:
        data = path.read_bytes()
    except (FileNotFoundError, NotADirectoryError):
        return []
    return decode_lines(data)


def read_messages_at(tree: Tree, key: str) -> list[Message]:
    """`read_messages` through the Tree port."""
    try:
        return decode_lines(tree.read(key))
    except (FileNotFoundError, NotADirectoryError):
        return []


def decode_lines(data: bytes) -> list[Message]:
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
    """Durable append of one session's lines."""
    out = groupsync.Appended()
    out.write(path, encode_lines(messages))
    failed = out.flush()
    if failed:
        raise failed[path]
