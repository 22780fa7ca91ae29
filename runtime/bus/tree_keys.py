"""How a tree key is spelled in a JetStream key-value bucket: each path segment escaped to the
characters KV keys allow (`[A-Za-z0-9_-]` kept, every other byte of its UTF-8 as `=XX`), the tokens
joined with `.` under `n.`, so a directory's subtree is one subject wildcard; a directory's marker is
its tokens and `=`."""

from __future__ import annotations

import re

from skald.store.treeport import check_key, parent

_PLAIN = re.compile(r"[A-Za-z0-9_-]")
ROOT = "n"
DIR_MARK = "="  # the token of a directory's marker key
ACCOUNTS = "=accounts"  # SYSTEM-bucket keys naming the accounts that have a bucket
VIRTUAL = ("accounts", "uploads")  # directories spanning every account's bucket
MOVES = "m"  # keys of moves under way, one per destination (`moving`), beside the tree's `n.`


def token(segment: str) -> str:
    """One path segment as a KV key token."""
    return "".join(c if _PLAIN.fullmatch(c) else "".join(f"={b:02X}" for b in c.encode()) for c in segment)


def segment(tok: str) -> str:
    """A KV key token back to its path segment."""
    out, i = bytearray(), 0
    while i < len(tok):
        if tok[i] == "=":
            out.append(int(tok[i + 1 : i + 3], 16))
            i += 3
        else:
            out += tok[i].encode()
            i += 1
    return out.decode()


def kv_key(key: str) -> str:
    return ".".join([ROOT, *(token(s) for s in check_key(key).split("/"))])


def mark(key: str) -> str:
    return f"{kv_key(key)}.{DIR_MARK}"


def moving(dst: str) -> str:
    """The key of a move's intent: its destination's tokens under MOVES."""
    return MOVES + kv_key(dst)[len(ROOT):]


def ancestors(key: str) -> list[str]:
    """The directories above a key that hold markers (the two virtual tops have none)."""
    out = []
    p = parent(key)
    while p and p not in VIRTUAL:
        out.append(p)
        p = parent(p)
    return out
