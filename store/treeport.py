"""The Tree port: what actors and the store do to the `viking://` tree and the session directories,
named by key, so the tree can live somewhere other than one host's disk.

A key is a relative POSIX path under the data directory (`accounts/acme/user/u/sessions/s1/.done`),
never absolute and never with `..`: `Namespace` has already resolved and tenancy-checked it. Errors
are the file system's own vocabulary (`FileNotFoundError`, `FileExistsError`, `IsADirectoryError`,
`NotADirectoryError`), so code moved onto the port keeps its handling; a store that is not
answering for the moment raises `StoreUnavailable`, which is worth a retry.

Implementations: `LocalTree` (a directory on one host, the embedded default) and `MemoryTree` (a
dict, for logic tests); the many-host one keeps the tree in JetStream (docs/design/storage.md). Each
must pass `tests/unit/test_tree_port.py`, which states the contract by example.
"""

from __future__ import annotations

from typing import Protocol

import msgspec


class StoreUnavailable(ConnectionError):
    """The store did not answer (a lost connection, a stream electing its leader): the same call may
    succeed in a moment. Whether a write it interrupted landed is unknown, so what retries it must
    be safe to repeat (every write of Phase 2 and of the session actor is)."""


class Entry(msgspec.Struct, frozen=True):
    """One name in a directory."""

    name: str
    is_dir: bool
    size: int = 0  # bytes of a file; 0 for a directory
    mtime: float = 0.0


class Tree(Protocol):
    """Reads, atomic writes, appends, listings, moves, removals and marker transitions by key. The
    methods block (callers already run file work off the event loop, one thread hop per batch)."""

    def read(self, key: str) -> bytes:
        """A file's bytes; `FileNotFoundError` when there is none."""
        ...

    def read_many(self, keys: list[str]) -> list[bytes | None]:
        """Each file's bytes, in the order asked; None where there is no file (nothing, or a
        directory). For a caller that reads many small files: a store whose every read is a round
        trip (the JetStream tree) answers them together."""
        ...

    def write(self, key: str, data: bytes, *, durable: bool = True) -> bool:
        """Replace a file atomically (a reader sees the old bytes or the new, never a mix), creating
        its parent directories; True when a file was there before. `durable`: on stable storage
        before returning."""
        ...

    def create(self, key: str, data: bytes) -> bool:
        """Write a file only if there is none: True when this call created it, False when one was
        already there (two writers racing: exactly one wins). Markers are made this way."""
        ...

    def append(self, key: str, data: bytes) -> None:
        """Add bytes at the end of a file (created if missing), durably."""
        ...

    def mkdir(self, key: str) -> None:
        """Make a directory and its parents (nothing when it exists); `FileExistsError` when a file
        has that key, `NotADirectoryError` when a file stands where a parent would."""
        ...

    def write_dir(self, key: str, files: dict[str, bytes]) -> None:
        """Create a directory holding exactly these files, all or nothing (an archive); its names
        are plain file names. `FileExistsError` when the directory is already there."""
        ...

    def stat(self, key: str) -> Entry | None:
        """The entry at `key`, or None when there is none."""
        ...

    def stat_many(self, keys: list[str]) -> list[Entry | None]:
        """`stat` of each key, in the order asked: a store whose every stat is a round trip (the
        JetStream tree) answers them together."""
        ...

    def list(self, key: str, *, details: bool = True) -> list[Entry]:
        """A directory's entries, sorted by name; `FileNotFoundError` when it does not exist.
        Without `details`, names and kinds only (every size and time 0): where an entry's size
        and time are a read of their own (the JetStream tree), a listing of names costs none."""
        ...

    def remove(self, key: str, *, recursive: bool = False) -> bool:
        """Remove a file (or, with `recursive`, a directory and what it holds); False when there
        was nothing to remove."""
        ...

    def move(self, src: str, dst: str) -> None:
        """Move a file or directory to a key that does not exist yet (`FileExistsError` if it does)."""
        ...

    def put_note(self, key: str, data: bytes) -> None:
        """Write a small file (well under one bus message) that is only ever read by key or found
        through its directory's listing, and that nothing else is in the way of: without a write's
        checks, not synced. For a worker's note to itself that has to outlive the worker, not the
        host, at a fraction of a write's cost; removed as any file is. An implementation may make
        sure of a note's directory once per process: notes are not put into a directory after it
        was removed."""
        ...


def join(*parts: str) -> str:
    """Keys joined with `/`, empty parts skipped."""
    return "/".join(p.strip("/") for p in parts if p and p.strip("/"))


def parent(key: str) -> str:
    return key.rpartition("/")[0]


def check_key(key: str) -> str:
    """A key as the port accepts it: relative, normalised, no `..` or empty segment."""
    segs = key.split("/")
    if not key or key.startswith("/") or any(s in ("", ".", "..") for s in segs) or "\x00" in key:
        raise ValueError(f"not a tree key: {key!r}")
    return key
