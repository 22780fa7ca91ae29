"""Every change to a memory keeps the version it replaced.

    {memories}/<category>/<name>.md                          the memory as it is now
    {memories}/.history/<category>/<name>.md/0001.json       version 1: its text, when, why

Hidden folders are never indexed, so old versions do not compete with the memory in retrieval;
`memories.history` lists them. Saving a version is idempotent: the same text as the newest version
is not saved twice (a write redone after a crash adds nothing).
"""

from __future__ import annotations

import re

import msgspec

from skald.store.treeport import Tree, join

HISTORY = ".history"
_VERSION = re.compile(r"^(\d{4,})\.json$")


class Version(msgspec.Struct, kw_only=True):
    """One earlier text of a memory: which version it was, when and why it was replaced, and the text."""

    version: int
    at: float
    reason: str  # update | delete | merge
    content: str


def history_dir(memory: str) -> str:
    """The key of a memory's versions: memories/<category>/<name>.md -> memories/.history/<category>/<name>.md"""
    category_dir, name = memory.rsplit("/", 1)
    memories, category = category_dir.rsplit("/", 1)
    return join(memories, HISTORY, category, name)


def versions(tree: Tree, memory: str) -> list[Version]:
    """Every kept version of the memory at key `memory`, oldest first."""
    d = history_dir(memory)
    try:
        names = sorted(e.name for e in tree.list(d, details=False) if _VERSION.match(e.name))
    except (FileNotFoundError, NotADirectoryError):
        return []
    out = []
    for data in tree.read_many([join(d, n) for n in names]):
        try:
            if data is not None:
                out.append(msgspec.json.decode(data, type=Version))
        except (msgspec.DecodeError, msgspec.ValidationError):
            continue  # a torn version file from a crash mid-write; the next save writes it again
    return out


def save_version(tree: Tree, memory: str, reason: str, at: float) -> Version | None:
    """Keep the memory's current text as a new version before it changes; None if there is no
    current text or the newest version already holds it."""
    try:
        current = tree.read(memory).decode("utf-8")
    except FileNotFoundError:
        return None
    old = versions(tree, memory)
    if old and old[-1].content == current:
        return None
    v = Version(version=(old[-1].version if old else 0) + 1, at=at, reason=reason, content=current)
    tree.write(join(history_dir(memory), f"{v.version:04d}.json"), msgspec.json.encode(v))
    return v


_WORD = re.compile(r"\w+", re.UNICODE)


def words(text: str) -> set[str]:
    return {w.lower() for w in _WORD.findall(text)}


def same_fact(a: str, b: str, threshold: float = 0.85) -> bool:
    """Exact or near-duplicate text (word-set Jaccard, case and punctuation ignored): the same fact
    said again, which merges into the memory instead of becoming a second one."""
    wa, wb = words(a), words(b)
    if not wa or not wb:
        return a.strip() == b.strip()
    return len(wa & wb) / len(wa | wb) >= threshold
