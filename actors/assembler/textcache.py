"""Bodies the assembler read before, kept while the file is unchanged (pure, no I/O).

A context request reads the files its candidates may serve (an event's overview and body, a
document's text); the same memories answer turn after turn, so most reads repeat. An entry is
valid only for the (mtime_ns, size) it was read at: the caller stats the file, and any write,
rename or rewrite in place changes one of them, so a stale body is never served. Bounded by the
characters it holds, least recently used first out.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import NamedTuple

DEFAULT_MAX_CHARS = 32 * 1024 * 1024  # ~32 MB of text: a large working set of memories and sections


class Body(NamedTuple):
    """A file's text as cached, and whether it is the whole text or only its head."""

    text: str
    whole: bool  # the file's entire text (else only its head, enough for an overview)


class TextCache:
    """File texts by path and mtime, bounded in characters, so repeated blocks do not read the same files again."""

    def __init__(self, max_chars: int = DEFAULT_MAX_CHARS) -> None:
        self.max_chars = max_chars
        self._items: OrderedDict[str, tuple[int, int, Body]] = OrderedDict()
        self._chars = 0
        self._lock = threading.Lock()  # the assembler reads files on several threads at once
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._items)

    def get(self, path: str, mtime_ns: int, size: int) -> Body | None:
        with self._lock:
            got = self._items.get(path)
            if got is None or got[0] != mtime_ns or got[1] != size:
                self.misses += 1
                return None
            self._items.move_to_end(path)
            self.hits += 1
            return got[2]

    def put(self, path: str, mtime_ns: int, size: int, body: Body) -> None:
        with self._lock:
            old = self._items.pop(path, None)
            if old is not None:
                self._chars -= len(old[2].text)
            if len(body.text) > self.max_chars:
                return
            self._items[path] = (mtime_ns, size, body)
            self._chars += len(body.text)
            while self._chars > self.max_chars:
                _, (_, _, gone) = self._items.popitem(last=False)
                self._chars -= len(gone.text)

    def stats(self) -> dict[str, int]:
        return {"entries": len(self._items), "chars": self._chars, "hits": self.hits, "misses": self.misses}
