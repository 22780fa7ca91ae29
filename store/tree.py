"""The file tree on disk: atomic writes, reads, listings, moves.

Every write is temp file + fsync + rename (+ fsync of the directory), so a crash leaves either
the old or the new file and never a half-written one. Temp files are named `.tmp-*` and are
never listed.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import aiofiles
import aiofiles.os

from skald.messages.errors import Conflict, InvalidArgument, NotFound
from skald.store import faults

TMP_PREFIX = ".tmp-"
ABSTRACT = ".abstract.md"
OVERVIEW = ".overview.md"
GENERATED = frozenset({ABSTRACT, OVERVIEW})
MAX_READ_BYTES = 64 * 1024 * 1024


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_new_files(files: dict[Path, bytes], dirs: tuple[Path, ...] = ()) -> None:
    """Create files and make them durable with `dirs` (whose entries must be durable too): written
    directly, since nobody reads them until their directory is renamed into place, then fsync'd
    one by one (a syncfs would also flush what Phase 2 writes meanwhile: slower here)."""
    fds: list[int] = []
    try:
        for path, data in files.items():
            fds.append(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
            view = memoryview(data)
            while view:
                view = view[os.write(fds[-1], view):]
        for d in dirs:
            fds.append(os.open(d, os.O_RDONLY))
        for fd in fds:
            os.fsync(fd)
    finally:
        for fd in fds:
            os.close(fd)


def write_atomic_sync(path: Path, data: bytes, *, exclusive: bool = False, durable: bool = True) -> None:
    """Durably replace (or, with `exclusive`, create) `path` with `data`. A concurrent writer
    may have turned the path into a directory, or a parent into a file, since the caller looked:
    those are typed refusals, not crashes. `durable=False` skips the two fsyncs (still atomic
    against a crashed process; a power cut may lose it): for a file whose loss is repaired."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError) as e:
        raise InvalidArgument("a file is in the way", {"path": path.parent.name}) from e
    tmp = path.parent / f"{TMP_PREFIX}{uuid.uuid4().hex}"
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            if durable:
                os.fsync(f.fileno())
    except FileNotFoundError as e:  # the directory was removed by a concurrent writer
        raise Conflict("the directory was removed meanwhile; retry", {"path": path.parent.name}) from e
    except BaseException:  # a full disk (ENOSPC) among others: no partial temp file is left behind
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    faults.point("tree.before_rename")  # a temp file exists; the target is still the old one
    try:
        if exclusive:
            # link() fails if the target exists: create-if-absent without a race.
            try:
                os.link(tmp, path)
            except FileExistsError as e:
                raise Conflict("already exists", {"path": path.name}) from e
            os.unlink(tmp)
        else:
            os.replace(tmp, path)
    except (IsADirectoryError, NotADirectoryError) as e:
        raise InvalidArgument("is a directory", {"path": path.name}) from e
    except OSError as e:
        if e.errno in (errno.ENOTEMPTY, errno.EEXIST, errno.EISDIR):
            raise InvalidArgument("is a directory", {"path": path.name}) from e
        if e.errno == errno.ENOENT:  # a concurrent delete took the directory (and our temp file)
            raise Conflict("the directory was removed meanwhile; retry", {"path": path.parent.name}) from e
        raise
    finally:
        if tmp.exists():
            tmp.unlink()
    if not durable:
        return
    try:
        _fsync_dir(path.parent)
    except FileNotFoundError as e:  # removed right after the rename: the delete came second
        raise Conflict("the directory was removed meanwhile; retry", {"path": path.parent.name}) from e


async def write_atomic(path: Path, data: bytes, *, exclusive: bool = False) -> None:
    await asyncio.to_thread(write_atomic_sync, path, data, exclusive=exclusive)


async def read_bytes(path: Path) -> bytes:
    try:
        st = await aiofiles.os.stat(path)
    except FileNotFoundError as e:
        raise NotFound("no such file", {"path": path.name}) from e
    if os.path.isdir(path):
        raise InvalidArgument("is a directory", {"path": path.name})
    if st.st_size > MAX_READ_BYTES:
        raise InvalidArgument("file too large to read in one request", {"max": MAX_READ_BYTES})
    try:
        async with aiofiles.open(path, "rb") as f:
            return await f.read()
    except FileNotFoundError as e:  # removed since the stat
        raise NotFound("no such file", {"path": path.name}) from e
    except (IsADirectoryError, NotADirectoryError) as e:  # replaced by a directory since the stat
        raise InvalidArgument("is a directory", {"path": path.name}) from e


def read_bytes_sync(path: Path) -> bytes:
    """`read_bytes` for a worker thread: the same typed errors, whatever races the read."""
    try:
        if path.stat().st_size > MAX_READ_BYTES:
            raise InvalidArgument("file too large to read in one request", {"max": MAX_READ_BYTES})
        return path.read_bytes()
    except FileNotFoundError as e:
        raise NotFound("no such file", {"path": path.name}) from e
    except (IsADirectoryError, NotADirectoryError) as e:
        raise InvalidArgument("is a directory", {"path": path.name}) from e


async def read_text(path: Path) -> str:
    return (await read_bytes(path)).decode("utf-8", errors="replace")


def read_text_sync(path: Path, default: str | None = None) -> str | None:
    try:
        return path.read_text("utf-8", errors="replace")
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        return default


def visible(name: str, show_hidden: bool) -> bool:
    if name.startswith(TMP_PREFIX):
        return False
    return show_hidden or not name.startswith(".")


def listdir_sorted(path: Path, show_hidden: bool = False, missing_ok: bool = False) -> list[os.DirEntry[str]]:
    """Sorted visible entries. `missing_ok` is for walks: a directory removed by a concurrent
    writer after its parent was listed is simply gone, not an error."""
    try:
        with os.scandir(path) as it:
            entries = [e for e in it if visible(e.name, show_hidden) and not e.is_symlink()]
    except FileNotFoundError as e:
        if missing_ok:
            return []
        raise NotFound("no such directory", {"path": path.name}) from e
    except NotADirectoryError as e:
        if missing_ok:
            return []
        raise InvalidArgument("not a directory", {"path": path.name}) from e
    entries.sort(key=lambda e: e.name)
    return entries


def walk_files(root: Path, max_depth: int = 64, show_hidden: bool = False) -> Iterator[tuple[Path, int]]:
    """Files under `root` (depth-first, sorted, symlinks skipped) with their depth below it."""
    stack: list[tuple[Path, int]] = [(root, 0)]
    while stack:
        d, depth = stack.pop()
        try:
            entries = listdir_sorted(d, show_hidden)
        except (NotFound, InvalidArgument):
            continue
        subdirs = []
        for e in entries:
            if e.is_dir(follow_symlinks=False):
                if depth < max_depth:
                    subdirs.append((Path(e.path), depth + 1))
            elif e.is_file(follow_symlinks=False):
                yield Path(e.path), depth
        stack.extend(reversed(subdirs))


def walk_dirs_bottom_up(root: Path) -> list[Path]:
    """Every directory under `root` (root included), children before parents."""
    out: list[Path] = []
    for dirpath, dirnames, _ in os.walk(root, topdown=True, followlinks=False):
        dirnames[:] = sorted(d for d in dirnames if visible(d, False))
        out.append(Path(dirpath))
    out.sort(key=lambda p: len(p.parts), reverse=True)
    return out


def remove_sync(path: Path, recursive: bool) -> None:
    """Remove a file or a directory; one removed meanwhile by someone else is NOT_FOUND, never a crash."""
    try:
        _remove(path, recursive)
    except FileNotFoundError as e:
        raise NotFound("no such file or directory", {"path": path.name}) from e


def _remove(path: Path, recursive: bool) -> None:
    if path.is_dir() and not path.is_symlink():
        if not recursive and any(visible(n, False) for n in os.listdir(path)):
            raise Conflict("directory not empty; pass recursive", {"path": path.name})
        # Rename first so the subtree disappears atomically, then delete at leisure.
        trash = path.parent / f"{TMP_PREFIX}rm-{uuid.uuid4().hex}"
        os.replace(path, trash)
        _fsync_dir(path.parent)
        shutil.rmtree(trash, ignore_errors=True)
    elif path.exists() or path.is_symlink():
        path.unlink()
        _fsync_dir(path.parent)
    else:
        raise NotFound("no such file or directory", {"path": path.name})


def move_sync(src: Path, dst: Path) -> None:
    if not src.exists():
        raise NotFound("no such file or directory", {"path": src.name})
    if dst.exists():
        raise Conflict("destination exists", {"path": dst.name})
    try:
        dst.parent.mkdir(parents=True, exist_ok=True)
        os.rename(src, dst)
    except FileNotFoundError as e:  # moved or removed by a concurrent writer
        raise NotFound("no such file or directory", {"path": src.name}) from e
    except (FileExistsError, IsADirectoryError, NotADirectoryError) as e:
        raise Conflict("destination exists", {"path": dst.name}) from e
    except OSError as e:
        if e.errno in (errno.ENOTEMPTY, errno.EEXIST):  # created by a concurrent writer meanwhile
            raise Conflict("destination exists", {"path": dst.name}) from e
        raise
    _fsync_dir(dst.parent)
    if src.parent != dst.parent:
        _fsync_dir(src.parent)
