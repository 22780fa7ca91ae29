"""Passage vectors by content hash: a text embedded once is never embedded again by the same
model, across re-ingests, directory refreshes, restarts and every worker sharing the data directory.

SQLite (stdlib) in WAL mode: one file under `.skald/`, safe for several processes, a lookup of a
batch in one query. The key is sha256(model, text); the value the vector, float16 as the index
stream keeps it (`vector_bytes.py`; float32 entries written before still read). Bounded: past
`max_rows` the oldest entries (by insertion) are dropped, a few percent at a time.
"""

from __future__ import annotations

import hashlib
import sqlite3
import threading
from pathlib import Path

import numpy as np

from skald.store import vector_bytes

SCHEMA = "CREATE TABLE IF NOT EXISTS vec (key BLOB PRIMARY KEY, dim INTEGER NOT NULL, data BLOB NOT NULL)"


def key(model: str, text: str) -> bytes:
    return hashlib.sha256(model.encode() + b"\x00" + text.encode()).digest()


class VectorCache:
    """Passage vectors by model and text digest in SQLite, so a re-ingest or another worker does not embed the same
    text again."""

    def __init__(self, path: Path, max_rows: int = 200_000) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.max_rows = max_rows
        self._lock = threading.Lock()
        self._db = sqlite3.connect(str(path), timeout=30.0, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")  # a lost entry is only embedded again
        self._db.execute(SCHEMA)
        self._writes = 0

    def get_many(self, keys: list[bytes]) -> dict[bytes, np.ndarray]:
        out: dict[bytes, np.ndarray] = {}
        with self._lock:
            for i in range(0, len(keys), 500):
                part = keys[i : i + 500]
                marks = ",".join("?" * len(part))
                for k, dim, data in self._db.execute(f"SELECT key, dim, data FROM vec WHERE key IN ({marks})", part):
                    vec = vector_bytes.unpack(data)
                    if vec.shape == (dim,):
                        out[bytes(k)] = vec
        return out

    def put_many(self, items: list[tuple[bytes, np.ndarray]]) -> None:
        if not items:
            return
        rows = [(k, int(v.shape[0]), vector_bytes.pack(v)) for k, v in items]
        with self._lock:
            self._db.execute("BEGIN")
            self._db.executemany("INSERT OR REPLACE INTO vec (key, dim, data) VALUES (?, ?, ?)", rows)
            self._db.execute("COMMIT")
            self._writes += len(rows)
            if self._writes >= max(1000, self.max_rows // 50):
                self._writes = 0
                self._trim()

    def _trim(self) -> None:
        (n,) = self._db.execute("SELECT count(*) FROM vec").fetchone()
        if n > self.max_rows:
            drop = n - self.max_rows + self.max_rows // 20
            self._db.execute("DELETE FROM vec WHERE rowid IN (SELECT rowid FROM vec ORDER BY rowid LIMIT ?)", (drop,))

    def __len__(self) -> int:
        with self._lock:
            return int(self._db.execute("SELECT count(*) FROM vec").fetchone()[0])

    def close(self) -> None:
        with self._lock:
            self._db.close()
