"""Files on one host's disk, as `LocalTree` writes them: atomic writes, and which names a listing
shows (reads, listings, walks and moves go through the Tree port: `store/treeops.py`).

Every write is temp file + fsync + rename (+ fsync of the directory), so a crash leaves either
the old or the new file and never a half-written one. Temp files are named `.tmp-*` and are
never listed.
"""

from __future__ import annotations

import contextlib
import errno
import os
import uuid
from pathlib import Path

from skald.messages.errors import Conflict, InvalidArgument
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


def visible(name: str, show_hidden: bool) -> bool:
    if name.startswith(TMP_PREFIX):
        return False
    return show_hidden or not name.startswith(".")
