"""One flush for many files: the group commit's durability step.

Appending a line to each of 64 session files and fsync'ing each one costs 64 journal commits
(about 9 ms here, and 40 ms under load); writing all 64 and asking the kernel once to flush the
file system (`syncfs`, Linux) costs about 1.3 ms. The price is that `syncfs` also flushes whatever
else is dirty on that file system, so a batch of a few files keeps per-file fsync, and a failed or
unavailable `syncfs` falls back to per-file fsync, which also tells which file's writeback failed.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
from pathlib import Path

log = logging.getLogger("skald.store")
MIN_FILES = 4  # below this many files, per-file fsync is as cheap and flushes nothing else


def _load_syncfs() -> ctypes._CFuncPtr | None:  # type: ignore[name-defined]
    try:
        fn = ctypes.CDLL(None, use_errno=True).syncfs
    except (OSError, AttributeError):  # not Linux, or a libc without it
        return None
    fn.argtypes = [ctypes.c_int]
    fn.restype = ctypes.c_int
    return fn


_syncfs = _load_syncfs()
COUNTS = {"syncfs": 0, "fsync": 0}  # flushes done each way, for the health report and tests


def sync_files(fds: dict[int, int], devs: dict[int, int] | None = None) -> dict[int, OSError]:
    """Make the writes already issued on `fds` (key -> open fd, each opened before its write)
    durable; the errors by key. One `syncfs` per file system from MIN_FILES files on (Linux >= 5.8
    reports to it any writeback error since the fd was opened), else, or when it fails, fsync per fd.
    `devs` (key -> st_dev, known to a caller that already did fstat) spares this call its fstats:
    on a thread, every syscall is a hand-over of the GIL with a busy event loop."""
    if _syncfs is not None and len(fds) >= MIN_FILES and _syncfs_all(fds, devs):
        return {}
    failed: dict[int, OSError] = {}
    for key, fd in fds.items():
        COUNTS["fsync"] += 1
        try:
            os.fsync(fd)
        except OSError as exc:
            failed[key] = exc
    return failed


def _syncfs_all(fds: dict[int, int], devs: dict[int, int] | None) -> bool:
    assert _syncfs is not None
    by_dev: dict[int, int] = {}
    for key, fd in fds.items():
        by_dev.setdefault(devs[key] if devs is not None else os.fstat(fd).st_dev, fd)
    for fd in by_dev.values():
        COUNTS["syncfs"] += 1
        if _syncfs(fd) != 0:
            log.warning("syncfs failed (%s); flushing file by file", os.strerror(ctypes.get_errno()))
            return False
    return True


class Appended:
    """Whole lines appended to many files (page cache, cheap: done on the caller's thread), made
    durable together by `sync` (blocking, on a thread: nothing but the flush, because each syscall
    there waits for the GIL of a busy event loop), then `close` (back on the caller's thread)."""

    def __init__(self) -> None:
        self.failed: dict[Path, BaseException] = {}
        self._fds: dict[Path, tuple[int, int, int]] = {}  # path -> (fd, size before the append, st_dev)

    def write(self, path: Path, lines: bytes) -> None:
        """A torn last line from an earlier crash is closed off first so it cannot swallow the
        new line. A failure is kept by file; its lines are cut back at `close`."""
        fd = -1
        try:
            try:
                fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
            except FileNotFoundError:  # its directory is made then, not on every add
                path.parent.mkdir(parents=True, exist_ok=True)
                fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
            st = os.fstat(fd)
            self._fds[path] = (fd, st.st_size, st.st_dev)
            prefix = b"\n" if st.st_size and os.pread(fd, 1, st.st_size - 1) != b"\n" else b""
            data = memoryview(prefix + lines)
            while data:  # a nearly full disk takes part of a write (a short count) before refusing
                data = data[os.write(fd, data):]
        except Exception as exc:  # noqa: BLE001 - its callers hear it; nothing of theirs was accepted
            self.failed[path] = exc
            if fd >= 0 and path not in self._fds:
                os.close(fd)

    def sync(self) -> None:
        """Every written file made durable by one flush (`groupsync`); a file whose flush failed is
        kept in `failed`, so one file's failure does not refuse lines that another made durable."""
        keys = [p for p in self._fds if p not in self.failed]
        fds = {i: self._fds[p][0] for i, p in enumerate(keys)}
        devs = {i: self._fds[p][2] for i, p in enumerate(keys)}
        try:
            for i, exc in sync_files(fds, devs).items():
                self.failed[keys[i]] = exc
        except Exception as exc:  # noqa: BLE001 - nothing is known durable: every file refused
            for p in keys:
                self.failed[p] = exc

    def close(self) -> dict[Path, BaseException]:
        """What failed, by file. A file whose lines did not all reach the disk is cut back to what
        was there, so a reader never meets half a message and the caller's retry appends it whole."""
        try:
            for path in self.failed:
                if path in self._fds:
                    with contextlib.suppress(OSError):
                        os.ftruncate(*self._fds[path][:2])
        finally:
            for fd, _, _ in self._fds.values():
                os.close(fd)
            self._fds.clear()
        return self.failed

    def flush(self) -> dict[Path, BaseException]:
        """`sync` then `close`, for a caller that may block."""
        try:
            self.sync()
        finally:
            failed = self.close()
        return failed
