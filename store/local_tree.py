"""The Tree port on one host's disk: the data directory as it always was. Writes are temp file +
fsync + rename (`store/tree.py`), an archive directory is built under a temp name and renamed into
place, and a marker is created with a hard link (the kernel's create-if-absent)."""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import uuid
from collections.abc import Iterator
from pathlib import Path

from skald.messages.errors import Conflict, InvalidArgument
from skald.store import tree
from skald.store.treeport import Entry, check_key


@contextlib.contextmanager
def _os_errors(key: str) -> Iterator[None]:
    """`tree.write_atomic_sync`'s typed refusals in the port's vocabulary."""
    try:
        yield
    except Conflict as e:
        if e.message == "already exists":
            raise FileExistsError(key) from e
        raise FileNotFoundError(key) from e  # the directory was removed meanwhile
    except InvalidArgument as e:
        raise (NotADirectoryError if e.message == "a file is in the way" else IsADirectoryError)(key) from e


class LocalTree:
    """`Tree` over a directory."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def path(self, key: str) -> Path:
        """Where a key lives on this disk (for the code not yet on the port: its caches, its appends)."""
        return self.root / check_key(key)

    def read(self, key: str) -> bytes:
        return self.path(key).read_bytes()

    def read_many(self, keys: list[str]) -> list[bytes | None]:
        out: list[bytes | None] = []
        for key in keys:
            try:
                out.append(self.path(key).read_bytes())
            except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
                out.append(None)
        return out

    def write(self, key: str, data: bytes, *, durable: bool = True) -> bool:
        path = self.path(key)
        existed = path.is_file()
        with _os_errors(key):
            tree.write_atomic_sync(path, data, durable=durable)
        return existed

    def create(self, key: str, data: bytes) -> bool:
        try:
            with _os_errors(key):
                tree.write_atomic_sync(self.path(key), data, exclusive=True)
        except FileExistsError:
            return False
        return True

    def append(self, key: str, data: bytes) -> None:
        path = self.path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            view = memoryview(data)
            while view:  # a nearly full disk takes part of a write (a short count) before refusing
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)

    def mkdir(self, key: str) -> None:
        path = self.path(key)
        if path.is_file():
            raise FileExistsError(key)
        path.mkdir(parents=True, exist_ok=True)  # NotADirectoryError / FileExistsError from a file on the way

    def write_dir(self, key: str, files: dict[str, bytes]) -> None:
        final = self.path(key)
        final.parent.mkdir(parents=True, exist_ok=True)
        if final.exists():
            raise FileExistsError(key)
        tmp = final.parent / f"{tree.TMP_PREFIX}{uuid.uuid4().hex}"
        tmp.mkdir()
        try:
            tree.write_new_files({tmp / name: data for name, data in files.items()}, (tmp,))
            os.rename(tmp, final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        self._sync_dir(final.parent)

    def stat(self, key: str) -> Entry | None:
        try:
            st = os.stat(os.path.join(self.root, check_key(key)))
        except (FileNotFoundError, NotADirectoryError):
            return None
        is_dir = stat.S_ISDIR(st.st_mode)
        return Entry(key.rpartition("/")[2], is_dir, 0 if is_dir else st.st_size, st.st_mtime)

    def stat_many(self, keys: list[str]) -> list[Entry | None]:
        return [self.stat(k) for k in keys]

    def list(self, key: str, *, details: bool = True) -> list[Entry]:
        out = []
        with os.scandir(self.path(key)) as it:  # FileNotFoundError / NotADirectoryError, as the port says
            found = sorted((e for e in it if not e.name.startswith(tree.TMP_PREFIX) and not e.is_symlink()),
                           key=lambda e: e.name)
        if not details:  # the directory entry's type, no stat of each
            return [Entry(e.name, e.is_dir()) for e in found]
        for e in found:
            try:
                st = e.stat()
            except FileNotFoundError:  # removed while listing
                continue
            is_dir = e.is_dir()
            out.append(Entry(e.name, is_dir, 0 if is_dir else st.st_size, st.st_mtime))
        return out

    def remove(self, key: str, *, recursive: bool = False) -> bool:
        path = self.path(key)
        try:
            if path.is_dir() and not path.is_symlink():
                if not recursive:
                    raise IsADirectoryError(key)
                # Renamed aside first, so the subtree disappears at once; then deleted at leisure.
                trash = path.parent / f"{tree.TMP_PREFIX}rm-{uuid.uuid4().hex}"
                os.replace(path, trash)
                self._sync_dir(path.parent)
                shutil.rmtree(trash, ignore_errors=True)
                return True
            else:
                path.unlink()
        except FileNotFoundError:
            return False
        self._sync_dir(path.parent)
        return True

    def put_note(self, key: str, data: bytes) -> None:
        self.write(key, data, durable=False)

    def move(self, src: str, dst: str) -> None:
        target = self.path(dst)
        if target.exists():
            raise FileExistsError(dst)
        target.parent.mkdir(parents=True, exist_ok=True)
        os.rename(self.path(src), target)
        self._sync_dir(target.parent)

    @staticmethod
    def _sync_dir(path: Path) -> None:
        """A directory's entries made durable (a rename or unlink survives a power cut)."""
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            return
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
