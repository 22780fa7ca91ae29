"""`skald store migrate`: a tree copied from one store to another (the data directory into JetStream,
or back), file by file, each verified by its SHA-256 read back from the destination.

Resumable by construction: a file the destination already holds with the same digest is skipped, so
a copy stopped at any point (a kill, a lost connection) is finished by running it again, and a
second run over a finished copy copies nothing. An archive directory is written whole (`write_dir`),
never file by file, so the destination's markers never show an archive half there. Run it with
Skald stopped: files written during the copy may be missed.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator

import msgspec

from skald.store import treeops
from skald.store.index_changes import CHANGES_DIR
from skald.store.sessions import ARCHIVE_RE, HISTORY
from skald.store.treeport import Tree, join

# What a deployment's tree holds (the rest of a data directory is caches): the accounts, uploads in
# progress, and the notes of moves and removals whose index job a dead request still owes.
ROOTS = ("accounts", "uploads", CHANGES_DIR)


class Report(msgspec.Struct, kw_only=True):
    """What a copy did: files copied and skipped (already there, same digest), bytes copied,
    archives written whole, files that failed verification."""

    copied: int = 0
    skipped: int = 0
    bytes: int = 0
    archives: int = 0
    dirs: int = 0
    mismatched: list[str] = []


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _same(dst: Tree, key: str, digest: str) -> bool:
    try:
        return _digest(dst.read(key)) == digest
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        return False


def _is_archive(key: str) -> bool:
    parts = key.split("/")
    return len(parts) >= 2 and parts[-2] == HISTORY and ARCHIVE_RE.match(parts[-1]) is not None


def _nodes(src: Tree, key: str) -> Iterator[tuple[str, bool]]:
    """(key, is_dir) of everything under `key`, hidden files included, parents first; an archive
    directory is yielded, never entered."""
    for e in treeops.listdir(src, key, show_hidden=True, missing_ok=True):
        k = join(key, e.name)
        yield k, e.is_dir
        if e.is_dir and not _is_archive(k):
            yield from _nodes(src, k)


def migrate(src: Tree, dst: Tree, roots: tuple[str, ...] = ROOTS,
            progress: Callable[[Report], None] | None = None) -> Report:
    """Copy every file under `roots` from `src` to `dst`, verified, skipping what is already there."""
    rep = Report()
    for root in roots:
        if src.stat(root) is None:
            continue
        for key, is_dir in _nodes(src, root):
            if is_dir and _is_archive(key):
                _archive(src, dst, key, rep)
            elif is_dir:
                if dst.stat(key) is None:
                    dst.mkdir(key)
                    rep.dirs += 1
            else:
                _file(src, dst, key, rep)
            if progress is not None and (rep.copied + rep.skipped) % 500 == 0:
                progress(rep)
    return rep


def _file(src: Tree, dst: Tree, key: str, rep: Report) -> None:
    data = src.read(key)
    digest = _digest(data)
    if _same(dst, key, digest):
        rep.skipped += 1
        return
    dst.write(key, data)
    if not _same(dst, key, digest):
        rep.mismatched.append(key)
        return
    rep.copied += 1
    rep.bytes += len(data)


def _archive(src: Tree, dst: Tree, key: str, rep: Report) -> None:
    """An archive directory: written whole when the destination lacks it; file by file (its markers
    added since, typically `.done`) when the destination has it."""
    files = {e.name: src.read(join(key, e.name)) for e in src.list(key) if not e.is_dir}
    if dst.stat(key) is None:
        dst.write_dir(key, files)
        rep.archives += 1
        for name, data in files.items():
            if _same(dst, join(key, name), _digest(data)):
                rep.copied += 1
                rep.bytes += len(data)
            else:
                rep.mismatched.append(join(key, name))
        return
    for name in files:
        _file(src, dst, join(key, name), rep)
