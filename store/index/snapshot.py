"""The index on disk: a snapshot written atomically beside the replica (vectors, rows, graph,
foreign rows, each checksummed) and read back whole or not at all."""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import uuid
import zlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Self

import hnswlib
import msgspec
import numpy as np

from skald.messages.index import IndexRow
from skald.store import bm25_snapshot, packed
from skald.store.index import graphfile, restore, sqgraph
from skald.store.index.adopt import adopt_keywords
from skald.store.index.building import IndexBuilding
from skald.store.index.texts import Frozen, TextHeap
from skald.store.index.types import HNSW_EF_SEARCH

log = logging.getLogger("skald.store.index")

ROWS = "rows.zst"  # the rows, msgpack zstd-compressed (`store/packed.py`)
# What a snapshot writes. rows.zst and keywords.arrays since they are compressed (rows.msgpack and
# keywords.npz before, still read); foreign.msgpack since 2026-12; texts.* since leaf texts left the rows (a
# snapshot without them holds rows with their text); keywords.* since the keyword index is saved
# (without them it is rebuilt from the texts). vectors.npy is only read: the vectors are the
# graph's own (`graphfile.py`); an older snapshot has them beside it. The graph is graph.links and
# vectors.f16 when its vectors are float16 values (every one since the stream carries float16), else
# graph.bin as hnswlib saved it. abstracts.* since leaf abstracts left the rows (without them the
# rows hold theirs). An 8-bit graph (`sqgraph.py`) is graph.faiss (its links, without the codes),
# its ids, ranges and deleted elements' codes, beside vectors.f16, which then holds every label's
# vector in label order (the codes are made again from it on load).
GRAPH_FILES = (graphfile.GRAPH, graphfile.LINKS, graphfile.HALVES, *sqgraph.FILES)
SNAPSHOT_FILES = (ROWS, *GRAPH_FILES, "foreign.msgpack", "texts.bin", "texts.npy", "texts.dict",
                  "abstracts.bin", "abstracts.npy", "abstracts.dict", *bm25_snapshot.FILES)
READ_FILES = (*SNAPSHOT_FILES, "vectors.npy", "rows.msgpack", "keywords.npz")


def _crc32(path: Path, nbytes: int | None = None) -> int:
    """CRC-32 of a snapshot file, read in pieces (a 100k-row snapshot is ~150 MB): of its first
    `nbytes` when given (the texts file, linked from the live heap, grows after the snapshot)."""
    crc, left = 0, nbytes if nbytes is not None else -1
    with open(path, "rb") as f:
        while left != 0 and (piece := f.read(1 << 22 if left < 0 else min(1 << 22, left))):
            crc = zlib.crc32(piece, crc)
            left -= len(piece) if left > 0 else 0
    return crc


def _covered(meta: dict[str, Any], name: str) -> int | None:
    """The bytes of a snapshot file its checksum covers: a heap's recorded length (texts, abstracts),
    else the whole file."""
    field = {"texts.bin": "texts_bytes", "abstracts.bin": "abstracts_bytes"}.get(name)
    return int(meta[field]) if field is not None and field in meta else None


def _check(directory: Path, meta: dict[str, Any], names: list[str]) -> None:
    """Raise unless each of `names` matches the checksum the snapshot's meta holds for it."""
    for name in names:
        if _crc32(directory / name, _covered(meta, name)) != meta["crc32"][name]:
            raise ValueError(f"{name} does not match its checksum")


def _save_heap(heap: TextHeap, tmp: Path, name: str, at: Frozen, *columns: np.ndarray) -> int:
    """A text heap into `tmp` as `<name>.bin` (its file), `<name>.npy` (where each label's entry is,
    and `columns` beside it) and `<name>.dict` (what it is packed with, once trained); the bytes of
    the file its entries lie in."""
    table, nbytes = heap.save(tmp / f"{name}.bin", at)
    np.save(tmp / f"{name}.npy", np.column_stack([table, *columns]))
    if (dictionary := heap.packer.dictionary) is not None:
        (tmp / f"{name}.dict").write_bytes(dictionary)
    return nbytes


def _load_heap(heap: TextHeap, directory: Path, name: str, meta: dict[str, Any], width: int) -> np.ndarray:
    """What `_save_heap` wrote, taken as `heap`'s; its table (of `width` columns, checked)."""
    n = int(meta["rows"])
    table = np.load(directory / f"{name}.npy")
    if table.shape != (n, width):
        raise ValueError(f"{name} {table.shape} for a snapshot of {n}")
    crcs = meta.get("crc32") or {}
    dictionary = (directory / f"{name}.dict").read_bytes() if f"{name}.dict" in crcs else None
    heap.load(directory / f"{name}.bin", table[:, :2], _covered(meta, f"{name}.bin"), dictionary)
    return table


class IndexSnapshot(IndexBuilding):

    """The index on disk: written atomically with checksums, read back whole or refused."""

    def content_hash(self) -> str:
        """Identical for two replicas holding the same rows, whatever order they arrived in: the
        XOR of each row's digest, kept up to date by every write. (A sorted scan of every row,
        as this was, took ~0.5 s of the event loop per `system.health` at 50,000 rows.)"""
        return f"{self._chash:032x}"

    def save(self, directory: Path, adopt: bool = False) -> int:
        """Write a snapshot atomically (a temp directory renamed over the old one); the sequence
        it holds. The index lock is held only to list the rows: writing them, the vectors and the
        graph takes about a second per 30,000 rows, during which searches used to wait. With
        `adopt`, the index then takes up the snapshot's keyword index (`adopt.py`)."""
        with self._save_lock:
            try:
                return self._save(Path(directory), adopt)
            finally:
                self._kw_log = None  # taken up, or not to be: writes stop being logged

    def _save(self, directory: Path, adopt: bool) -> int:
        tmp = directory.parent / f".tmp-snap-{uuid.uuid4().hex}"
        tmp.mkdir(parents=True)
        rows, meta, (texts_at, abstracts_at, tlen, kw_gen) = self._freeze(adopt)
        try:
            # Where each text is, and its length in characters (what hybrid reads, without the text).
            meta["texts_bytes"] = _save_heap(self._texts, tmp, "texts", texts_at, tlen)
            meta["abstracts_bytes"] = _save_heap(self._abstracts, tmp, "abstracts", abstracts_at)
            bm25_snapshot.save(self.keywords, tmp, kw_gen)
            packed.write_bytes(tmp / ROWS, msgspec.msgpack.encode(rows))
            (tmp / "foreign.msgpack").write_bytes(msgspec.msgpack.encode(meta.pop("foreign")))
            meta["graph"] = self.graph_kind
            with self._graph_lock:  # an 8-bit graph writes its own files beside (`sqgraph.py`)
                self._graph.save_index(str(tmp / graphfile.GRAPH))
            present = np.fromiter((row is not None for row in rows), dtype=bool, count=len(rows))
            if self.graph_kind == sqgraph.KIND:
                self._save_vectors(tmp / graphfile.HALVES, present)
        finally:
            self._thaw()
        if self.graph_kind != sqgraph.KIND:
            graphfile.split(tmp / graphfile.GRAPH, self.dim)  # kept whole when a vector is not float16
        # The files are complete: their checksums are read back without holding up searches.
        meta["crc32"] = {name: _crc32(tmp / name, _covered(meta, name)) for name in SNAPSHOT_FILES
                         if (tmp / name).exists()}
        (tmp / "meta.json").write_bytes(msgspec.json.encode(meta))
        for f in tmp.iterdir():
            with open(f, "rb") as fh:
                os.fsync(fh.fileno())
        old = directory.parent / f".tmp-old-{uuid.uuid4().hex}"
        if directory.exists():
            os.rename(directory, old)
        os.rename(tmp, directory)
        shutil.rmtree(old, ignore_errors=True)
        graph, halves = graphfile.saved(directory)
        try:  # the vectors not written since are read from the graph just saved
            if meta["graph"] == sqgraph.KIND:
                graph, halves = directory / sqgraph.FILE, directory / graphfile.HALVES
                pos = np.where(present, np.arange(present.size, dtype=np.int32), -1).astype(np.int32)
            else:
                pos = graphfile.positions(graph, self.dim, len(self._rows))
        except (OSError, graphfile.UnexpectedLayout) as e:
            log.warning("index snapshot graph %s: %s; its vectors stay in the float32 file too", directory, e)
        else:
            with self._lock:
                self._qv.rebase(halves or graph, self._saved_writes, pos)
        if adopt:
            adopt_keywords(self, directory)
        return int(meta["applied_seq"])

    def _save_vectors(self, path: Path, present: np.ndarray, chunk: int = 16_384) -> None:
        """Each snapshot row's vector into `path` as float16 in label order (zeros for a free
        label), read a chunk at a time under the index lock while the snapshot holds the graph
        still (a row deleted meanwhile keeps its label, and its vector in the file, until then)."""
        with open(path, "wb") as f:
            for i in range(0, present.size, chunk):
                labels = np.arange(i, min(present.size, i + chunk), dtype=np.int64)
                with self._lock:
                    mat = self._qv.exact(labels)
                mat[~present[labels]] = 0.0
                f.write(mat.astype("<f2").data)

    def _freeze(self, log_keywords: bool = False) -> tuple[list[IndexRow | None], dict[str, Any],
                                                          tuple[Frozen, Frozen, np.ndarray, np.ndarray]]:
        """The rows and meta of one moment with every row in the graph, and the graph held still
        (`_saving`) until `_thaw`, so the graph written after matches them; where the leaf texts
        and abstracts are and each label's keyword generation at that moment (what `_load`
        repairs to). With `log_keywords`, the labels keyword-written from that moment are logged."""
        while True:
            while self.build_graph() > 0:
                pass
            with self._lock:
                if self._pending:  # rows came meanwhile: into the graph first
                    continue
                self._saving = True
                self._saved_writes = self._qv.mark()
                self._kw_log = [] if log_keywords else None
                n = len(self._rows)
                meta: dict[str, Any] = {"applied_seq": self.applied_seq, "dim": self.dim, "model": self.model,
                                        "rows": n, "chash": f"{self._chash:032x}"}
                meta["foreign"] = dict(self.foreign)
                # The graph (with the vectors) is held still until `_thaw`; the texts are read
                # where they are now and the keyword index's changes since are repaired on load.
                return self._rows[:n], meta, (self._texts.frozen(n), self._abstracts.frozen(n),
                                               self._tlen[:n].astype(np.int64),
                                               bm25_snapshot.generations(self.keywords, n))

    def _thaw(self) -> None:
        """The graph moves again: the deletes that waited, then the vectors that waited."""
        with self._lock:
            self._texts.compact()  # when its garbage outgrew the live texts; nothing reads it meanwhile
            self._abstracts.compact()
            self._saving = False
            waited, self._unsaved_deletes = self._unsaved_deletes, []
            with self._graph_lock:
                for label, in_graph in waited:
                    if in_graph:
                        with contextlib.suppress(RuntimeError):
                            self._graph.mark_deleted(label)
            self._free.extend(label for label, _ in waited)
        while self.build_graph() > 0:
            pass

    @classmethod
    def load(cls, directory: Path, dim: int, model: str, text_dir: Path | None = None,
             graph: str = "hnsw") -> Self | None:
        """The snapshot in `directory`, or None when there is none usable for this model and
        graph (a snapshot of the other kind of graph is rebuilt from the index stream). A
        snapshot that does not read back whole (a file truncated, bit-flipped or missing, its
        checksums off) is logged and refused: the replica then rebuilds from the index stream."""
        directory = Path(directory)
        if not (directory / "meta.json").exists():
            return None
        try:
            return cls._load(directory, dim, model, text_dir, graph)
        except Exception as e:  # noqa: BLE001 - any way a snapshot is unreadable means the same: rebuild
            log.warning("index snapshot %s is corrupt (%s: %s): rebuilding from the index stream",
                        directory, type(e).__name__, e)
            return None

    @classmethod
    def _load(cls, directory: Path, dim: int, model: str, text_dir: Path | None, kind: str) -> Self | None:
        meta = msgspec.json.decode((directory / "meta.json").read_bytes())
        if meta.get("dim") != dim or meta.get("model") != model:
            return None
        if meta.get("graph", "hnsw") != kind:
            log.info("index snapshot %s holds a %s graph, not %s: rebuilding from the index stream",
                     directory, meta.get("graph", "hnsw"), kind)
            return None
        crcs = meta.get("crc32") or {}
        if unknown := [name for name in crcs if name not in READ_FILES]:
            raise ValueError(f"{unknown[0]} is not a snapshot file")
        n = int(meta["rows"])
        idx = cls(dim, model, capacity=max(1024, n), text_dir=text_dir or directory.parent, graph=kind)
        # The graph is checked and loaded on a thread of its own while this one reads the rows:
        # both are C work that lets go of the interpreter (copies, reads, checksums) for the most
        # part, and this machine has two cores. (A million rows: 17 s one after the other.)
        with ThreadPoolExecutor(max_workers=1) as pool:
            graph_loaded = pool.submit(idx._load_graph, directory, meta, text_dir or directory.parent)
            _check(directory, meta, [name for name in crcs if name not in GRAPH_FILES])
            raw = packed.read_bytes(directory / ROWS) if ROWS in crcs else (directory / "rows.msgpack").read_bytes()
            rows = msgspec.msgpack.decode(raw, type=list[IndexRow | None])
            del raw
            if len(rows) != n:
                raise ValueError(f"{len(rows)} rows for a snapshot of {n}")
            texts_saved = (directory / "texts.npy").exists()
            redo: set[int] | None = None  # labels to index for keywords again; None: every one
            if any(all(name in crcs for name in files) for files in (bm25_snapshot.FILES, *bm25_snapshot.OLDER_FILES)):
                idx.keywords, changed = bm25_snapshot.load(directory)
                redo = set(changed.tolist())
            if texts_saved:
                idx._tlen[:n] = _load_heap(idx._texts, directory, "texts", meta, 3)[:, 2]
            abstracts_saved = (directory / "abstracts.npy").exists()
            if abstracts_saved:
                _load_heap(idx._abstracts, directory, "abstracts", meta, 2)
            graph, halves = graph_loaded.result()
            if "vectors.npy" in crcs:  # an older snapshot: the vectors beside the graph
                vecs = np.load(directory / "vectors.npy", mmap_mode="r")
                if vecs.shape != (n, dim):
                    raise ValueError(f"vectors {vecs.shape} for a snapshot of {n}")
                for i in range(0, n, 16_384):  # read in pieces: quantised into memory, float32 into the file
                    idx._qv.put(np.arange(i, i + min(16_384, n - i), dtype=np.int64),
                                np.asarray(vecs[i : i + 16_384], dtype=np.float32), fresh=False)
                del vecs
                vectors_read = None
            else:  # quantised on the other thread while the rows are restored here
                vectors_read = pool.submit(idx._vectors_from_graph, graph, halves, rows)
            # The XOR of the rows' digests, as saved with them (a digest of every row is 3-4 s of a
            # million-row load); computed for a snapshot from before it was saved.
            restore.restore(idx, rows, texts_saved, abstracts_saved, redo,
                            int(meta["chash"], 16) if "chash" in meta else None)
            if vectors_read is not None:
                vectors_read.result()
        idx.applied_seq = int(meta.get("applied_seq", 0))
        if "foreign.msgpack" in (meta.get("crc32") or {}):  # snapshots from before it have none
            idx.foreign = msgspec.msgpack.decode((directory / "foreign.msgpack").read_bytes(), type=dict[str, str])
        return idx

    def _load_graph(self, directory: Path, meta: dict[str, Any], scratch: Path) -> tuple[Path, Path | None]:
        """The snapshot's graph, checked against its checksums first (hnswlib trusts what it
        reads), loaded into this index; the files it was read from."""
        _check(directory, meta, [name for name in meta.get("crc32") or {} if name in GRAPH_FILES])
        if self.graph_kind == sqgraph.KIND:
            self._graph = sqgraph.SqGraph.load(directory, self.dim, self._level.shape[0], directory / graphfile.HALVES)
            return directory / sqgraph.FILE, directory / graphfile.HALVES
        self._graph = hnswlib.Index(space="ip", dim=self.dim)
        graph, halves = graphfile.saved(directory)
        if halves is None:
            self._graph.load_index(str(graph), max_elements=self._level.shape[0])
        else:
            with graphfile.assembled(graph, halves, self.dim, scratch) as whole:
                self._graph.load_index(whole, max_elements=self._level.shape[0])
        self._graph.set_ef(HNSW_EF_SEARCH)
        return graph, halves

    def _vectors_from_graph(self, path: Path, halves: Path | None, rows: list[IndexRow | None]) -> None:
        """Every live row's vector read out of the saved graph (`graphfile.py`: the graph file, or
        a split graph's links and float16 `halves`) and quantised into memory; that file is then
        where exact reads find them (`QuantisedVectors.rebase`), nothing copied to the float32
        file. Asked of the graph row by row, and written to that file, when the layout is not the
        one known or a sample disagrees with the graph."""
        n = len(rows)
        if self.graph_kind == sqgraph.KIND and halves is not None:
            self._vectors_in_label_order(halves, rows)
            return
        try:
            checked = False
            pos, at = np.full(self._qv.q.shape[0], -1, dtype=np.int32), 0
            present = np.array([row is not None for row in rows], dtype=bool)
            for labels, mat in graphfile.vectors(path, self.dim, halves):
                fits = labels < pos.size
                pos[labels[fits]] = np.arange(at, at + labels.size, dtype=np.int32)[fits]
                at += labels.size
                live = (labels < n) & present[np.minimum(labels, n - 1)] if n else np.zeros(labels.size, dtype=bool)
                labels, mat = labels[live], mat[live]
                if not labels.size:
                    continue
                if not checked:
                    if not graphfile.verify(self._graph, labels, mat):
                        raise graphfile.UnexpectedLayout("the vectors read differ from the graph's")
                    checked = True
                order = np.argsort(labels)
                self._qv.put(labels[order], mat[order], fresh=False, in_base=True)
            # Read from the graph file from now on (checked against the graph above), not copied.
            base = halves or path
            if not self._qv.rebase(base, self._qv.mark(), pos, check=False):
                raise ValueError(f"{base} cannot be read as the vectors' base")
            return
        except graphfile.UnexpectedLayout as e:
            log.warning("index snapshot graph %s: %s; reading its vectors one by one", path, e)
        if isinstance(self._graph, sqgraph.SqGraph):
            raise ValueError("an 8-bit graph's snapshot without its vectors")
        live_labels = np.asarray([lab for lab, r in enumerate(rows) if r is not None], dtype=np.int64)
        for i in range(0, live_labels.size, 4096):
            part = live_labels[i : i + 4096]
            self._qv.put(part, np.asarray(self._graph.get_items(part.tolist(), return_type="numpy"),
                                          dtype=np.float32), fresh=False)

    def _vectors_in_label_order(self, halves: Path, rows: list[IndexRow | None], chunk: int = 16_384) -> None:
        """An 8-bit graph's snapshot: every label's float16 vector in label order, quantised into
        memory, the file then the base exact reads find them in."""
        n = len(rows)
        if n == 0:
            return
        vmap = np.memmap(halves, dtype="<f2", mode="r", shape=(graphfile.halves_layout(halves, self.dim, n).elements,
                                                               self.dim))
        present = np.array([row is not None for row in rows], dtype=bool)
        for i in range(0, n if self._qv.coded is None else 0, chunk):  # the graph's codes serve as int8
            labels = np.arange(i, min(n, i + chunk), dtype=np.int64)
            live = present[labels]
            if live.any():
                self._qv.put(labels[live], np.asarray(vmap[i : i + chunk], dtype=np.float32)[live], fresh=False,
                             in_base=True)
        del vmap
        pos = np.where(present, np.arange(n, dtype=np.int32), -1).astype(np.int32)
        if not self._qv.rebase(halves, self._qv.mark(), pos, check=False):
            raise ValueError(f"{halves} cannot be read as the vectors' base")
