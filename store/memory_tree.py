"""The Tree port in a dict, for logic tests and as the contract's plainest statement: directories
exist where files are under them (or where one was made by `write_dir` or `move`)."""

from __future__ import annotations

import threading
import time

from skald.store.treeport import Entry, check_key, parent


class MemoryTree:
    """`Tree` in memory, safe to call from several threads."""

    def __init__(self) -> None:
        self.files: dict[str, tuple[bytes, float]] = {}
        self.dirs: set[str] = set()
        self._lock = threading.Lock()

    def _add_dirs(self, key: str) -> None:
        p = parent(key)
        while p:
            self.dirs.add(p)
            p = parent(p)

    def _is_dir(self, key: str) -> bool:
        return key in self.dirs or any(k.startswith(key + "/") for k in self.files)

    def read(self, key: str) -> bytes:
        with self._lock:
            if check_key(key) not in self.files:
                raise IsADirectoryError(key) if self._is_dir(key) else FileNotFoundError(key)
            return self.files[key][0]

    def read_many(self, keys: list[str]) -> list[bytes | None]:
        with self._lock:
            return [self.files[k][0] if check_key(k) in self.files else None for k in keys]

    def write(self, key: str, data: bytes, *, durable: bool = True) -> bool:
        with self._lock:
            existed = check_key(key) in self.files
            self._put(key, data)
            return existed

    def _check_parents(self, key: str) -> None:
        """NotADirectoryError when a file stands where one of the key's parents would."""
        p = parent(key)
        while p:
            if p in self.files:
                raise NotADirectoryError(p)
            p = parent(p)

    def _put(self, key: str, data: bytes, mtime: float | None = None) -> None:
        if self._is_dir(key):
            raise IsADirectoryError(key)
        self._check_parents(key)
        self.files[key] = (bytes(data), time.time() if mtime is None else mtime)
        self._add_dirs(key)

    def create(self, key: str, data: bytes) -> bool:
        with self._lock:
            if check_key(key) in self.files:
                return False
            self._put(key, data)
            return True

    def append(self, key: str, data: bytes) -> None:
        with self._lock:
            old = self.files.get(check_key(key), (b"", 0.0))[0]
            self._put(key, old + data)

    def mkdir(self, key: str) -> None:
        with self._lock:
            if check_key(key) in self.files:
                raise FileExistsError(key)
            self._check_parents(key)
            self.dirs.add(key)
            self._add_dirs(key)

    def write_dir(self, key: str, files: dict[str, bytes]) -> None:
        with self._lock:
            if check_key(key) in self.files or self._is_dir(key):
                raise FileExistsError(key)
            for name, data in files.items():
                self._put(f"{key}/{check_key(name)}", data)
            self.dirs.add(key)
            self._add_dirs(key)

    def stat(self, key: str) -> Entry | None:
        with self._lock:
            name = check_key(key).rpartition("/")[2]
            if key in self.files:
                data, mtime = self.files[key]
                return Entry(name, False, len(data), mtime)
            return Entry(name, True) if self._is_dir(key) else None

    def stat_many(self, keys: list[str]) -> list[Entry | None]:
        return [self.stat(k) for k in keys]

    def list(self, key: str, *, details: bool = True) -> list[Entry]:
        with self._lock:
            if check_key(key) in self.files:
                raise NotADirectoryError(key)
            if not self._is_dir(key):
                raise FileNotFoundError(key)
            out: dict[str, Entry] = {}
            prefix = key + "/"
            for k, (data, mtime) in self.files.items():
                if k.startswith(prefix):
                    head, _, rest = k[len(prefix):].partition("/")
                    out[head] = Entry(head, True) if rest else Entry(head, False, len(data), mtime)
            for d in self.dirs:
                if d.startswith(prefix) and "/" not in d[len(prefix):]:
                    out.setdefault(d[len(prefix):], Entry(d[len(prefix):], True))
            return [out[n] if details else Entry(n, out[n].is_dir) for n in sorted(out)]

    def remove(self, key: str, *, recursive: bool = False) -> bool:
        with self._lock:
            if check_key(key) in self.files:
                del self.files[key]
                return True
            if not self._is_dir(key):
                return False
            if not recursive:
                raise IsADirectoryError(key)
            prefix = key + "/"
            for k in [k for k in self.files if k.startswith(prefix)]:
                del self.files[k]
            self.dirs = {d for d in self.dirs if d != key and not d.startswith(prefix)}
            return True

    def put_note(self, key: str, data: bytes) -> None:
        self.write(key, data)

    def move(self, src: str, dst: str) -> None:
        with self._lock:
            if check_key(dst) in self.files or self._is_dir(dst):
                raise FileExistsError(dst)
            if check_key(src) in self.files:
                self._put(dst, *self.files.pop(src))  # a move keeps the modification time, as rename does
                return
            if not self._is_dir(src):
                raise FileNotFoundError(src)
            prefix = src + "/"
            for k in [k for k in self.files if k.startswith(prefix)]:
                self._put(dst + "/" + k[len(prefix):], *self.files.pop(k))
            moved = {d for d in self.dirs if d == src or d.startswith(prefix)}
            self.dirs = (self.dirs - moved) | {dst + d[len(src):] for d in moved}
            self._add_dirs(dst)
