"""The deferred graph: a replica catching up makes rows searchable at once (exactly) and builds
the HNSW graph behind, without holding the index lock while it inserts."""

from __future__ import annotations

import logging
import threading

import msgspec
import numpy as np
import pytest

from skald.actors.kit.memory_bus import MemoryBus
from skald.actors.retriever.replica import IndexReplica
from skald.messages.index import IndexChange, IndexDelete, IndexRow
from skald.store.index import Query, VectorIndex


def rows(n: int, seed: int = 0) -> list[tuple[IndexRow, np.ndarray]]:
    rng = np.random.default_rng(seed)
    centers = rng.standard_normal((20, 64)).astype(np.float32)
    out = []
    for i in range(n):
        v = centers[i % 20] + 0.3 * rng.standard_normal(64).astype(np.float32)
        v /= np.linalg.norm(v)
        out.append((IndexRow(account="a", uri=f"viking://resources/t{i % 20}/d{i}.md", level=2,
                             parent_uri=f"viking://resources/t{i % 20}", context_type="resource", abstract=f"d{i}"), v))
    return out


@pytest.mark.parametrize("kind", ["hnsw", "sq8"])  # hnswlib, and faiss over 8-bit codes
def test_deferred_rows_are_found_exactly_then_by_the_graph(kind: str) -> None:
    data = rows(12_000)
    idx = VectorIndex(64, "m", graph=kind)
    for i in range(0, len(data), 1000):
        idx.upsert_many(data[i : i + 1000], defer_graph=True)
    assert idx.pending_graph == 12_000
    q = Query(account="a")
    probe = data[123][1]
    exact, trace = idx.search(probe, q, 10)
    assert trace.engine == "exact" and exact[0].row.uri == data[123][0].uri
    assert idx.delete("a", data[5][0].uri, 2)  # a pending row can be deleted
    while idx.build_graph(4000) > 0:
        pass
    assert idx.pending_graph == 0
    graph, trace = idx.search(probe, q, 10)
    assert trace.engine == kind
    assert [h.row.uri for h in graph][:5] == [h.row.uri for h in exact][:5]
    assert all(h.row.uri != data[5][0].uri for h in idx.search(data[5][1], q, 10)[0])


def test_a_row_updated_while_pending_keeps_its_newest_vector() -> None:
    data = rows(9_000, seed=1)
    idx = VectorIndex(64, "m")
    idx.upsert_many(data, defer_graph=True)
    row, _ = data[7]
    moved = data[4000][1]
    idx.upsert_many([(row, moved)], defer_graph=True)
    while idx.build_graph(2000) > 0:
        pass
    hits, _ = idx.search(moved, Query(account="a"), 3)
    assert row.uri in [h.row.uri for h in hits]


@pytest.mark.parametrize("kind", ["hnsw", "sq8"])  # hnswlib, and faiss over 8-bit codes
def test_rows_waiting_for_the_graph_are_scored_beside_it(kind: str) -> None:
    """Once the graph holds most rows, a few written since (not yet in it) are searched exactly
    beside the graph, not by falling back to an exact pass over every row."""
    data = rows(10_000, seed=2)
    idx = VectorIndex(64, "m", graph=kind)
    idx.upsert_many(data[:9_900], defer_graph=True)
    while idx.build_graph(4000) > 0:
        pass
    idx.upsert_many(data[9_900:], defer_graph=True)  # waiting: the builder has not run since
    assert idx.pending_graph == 100
    q = Query(account="a", prefixes=["viking://resources"])
    probe = data[9_950][1]
    hits, trace = idx.search(probe, q, 5)
    assert trace.engine == f"{kind}+pending" and hits[0].row.uri == data[9_950][0].uri
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    outside, _ = idx.search(probe, Query(account="a", prefixes=["viking://resources/t0"]), 5)
    assert all(h.row.uri.startswith("viking://resources/t0/") for h in outside)  # scope still holds


def test_the_level_and_type_counts_follow_upserts_deletes_and_snapshots(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The graph's selectivity estimate reads live rows per (level, context type) from counters kept
    on every write, not from a pass over all rows per query: they must equal a recount after any
    mix of inserts, level and type changes, deletes, and a snapshot round trip."""
    import msgspec

    idx = VectorIndex(64, "m")
    data = rows(300, seed=4)
    idx.upsert_many(data)
    rng = np.random.default_rng(9)
    for i in rng.choice(300, 80, replace=False).tolist():
        row, vec = data[i]
        idx.upsert_many([(msgspec.structs.replace(row, level=int(rng.integers(0, 3)),
                                                  context_type=str(rng.choice(["resource", "memory", "skill"]))), vec)])
    for i in rng.choice(300, 50, replace=False).tolist():
        for lv in (0, 1, 2):
            idx.delete("a", data[i][0].uri, lv)

    def recount(ix: VectorIndex) -> dict[tuple[int, int], int]:
        n = len(ix._rows)
        live = np.flatnonzero(ix._alive[:n])
        out: dict[tuple[int, int], int] = {}
        for lab in live.tolist():
            key = (int(ix._level[lab]), int(ix._ctype[lab]))
            out[key] = out.get(key, 0) + 1
        return out

    assert {k: v for k, v in idx._mix.items() if v} == recount(idx)
    assert sum(idx._mix.values()) == len(idx) < 300
    idx.save(tmp_path / "snap")
    back = VectorIndex.load(tmp_path / "snap", 64, "m")
    assert back is not None and {k: v for k, v in back._mix.items() if v} == recount(back) == recount(idx)


class HeldGraph:
    """The real hnswlib graph, whose `save_index` waits until the test lets it go: the moment a
    snapshot is writing the graph, held open."""

    def __init__(self, graph: object) -> None:
        self._graph = graph
        self.writing = threading.Event()
        self.release = threading.Event()

    def __getattr__(self, name: str) -> object:
        return getattr(self._graph, name)

    def save_index(self, path: str) -> None:
        self.writing.set()
        self.release.wait()
        self._graph.save_index(path)  # type: ignore[attr-defined]


@pytest.mark.parametrize("kind", ["hnsw", "sq8"])  # hnswlib, and faiss over 8-bit codes
def test_a_snapshot_lets_searches_and_writes_go_on_and_matches_its_moment(tmp_path, kind) -> None:  # type: ignore[no-untyped-def]
    """Writing a snapshot (a second per 30k rows) held the index lock, so every search waited.
    Now searches and writes go on while the graph is written, the snapshot is the index as it
    was when it began (its sequence with it), and replaying what came after gives the live index."""
    data = rows(10_000, seed=3)
    idx = VectorIndex(64, "m", graph=kind)
    idx.upsert_many(data[:9_990])
    while idx.build_graph() > 0:  # an 8-bit graph's rows wait for the builder's first batch
        pass
    idx.applied_seq = 100
    held = HeldGraph(idx._graph)
    idx._graph = held  # type: ignore[assignment]
    timer = threading.Timer(60, held.release.set)  # never hang: a blocked search shows as a failure below
    timer.start()
    saver = threading.Thread(target=idx.save, args=(tmp_path / "snap",))
    saver.start()
    assert held.writing.wait(30)
    q = Query(account="a")
    added, (moved, old_vec), gone = data[9_995], data[42], data[77]
    new_vec = data[5_000][1]
    tail = [[added], [(moved, new_vec)]]
    for ups in tail:
        idx.upsert_many(ups)
    assert idx.delete("a", gone[0].uri, 2)
    idx.applied_seq = 103
    top = idx.search(added[1], q, 3)[0]
    assert top[0].row.uri == added[0].uri and top[0].score > 0.99
    # The graph still holds the moved row's old vector; its score must be the new one's.
    assert all(h.row.uri != moved.uri or h.score < 0.9 for h in idx.search(old_vec, q, 5)[0])
    assert moved.uri in [h.row.uri for h in idx.search(new_vec, q, 3)[0]]
    assert all(h.row.uri != gone[0].uri for h in idx.search(gone[1], q, 5)[0])
    searched_while_held = not held.release.is_set()
    held.release.set()
    saver.join()
    timer.cancel()
    assert searched_while_held
    assert idx.pending_graph == 0  # what waited joined the graph once the snapshot was written

    loaded = VectorIndex.load(tmp_path / "snap", 64, "m", graph=kind)
    assert loaded is not None and loaded.applied_seq == 100 and len(loaded) == 9_990
    for ups in tail:
        loaded.upsert_many(ups)
    loaded.delete("a", gone[0].uri, 2)
    assert loaded.content_hash() == idx.content_hash()
    # The rows' hash is saved with them; a snapshot from before that computes the same from its rows.
    meta = msgspec.json.decode((tmp_path / "snap" / "meta.json").read_bytes())
    (tmp_path / "snap" / "meta.json").write_bytes(msgspec.json.encode({k: v for k, v in meta.items() if k != "chash"}))
    older = VectorIndex.load(tmp_path / "snap", 64, "m", graph=kind)
    assert older is not None and older.content_hash() == f"{int(meta['chash'], 16):032x}"
    for probe in (added[1], new_vec, old_vec, gone[1]):
        assert [h.row.uri for h in loaded.search(probe, q, 5)[0]] == [h.row.uri for h in idx.search(probe, q, 5)[0]]


def test_rows_of_another_embedder_are_skipped_said_once_and_counted(tmp_path, caplog) -> None:  # type: ignore[no-untyped-def]
    """An embeddings server moved to another address is another model (its name carries the
    address): the replica must not compare its vectors with this one's, and must not leave the
    index empty without a word."""
    rep = IndexReplica("openai:e5@new", 64, MemoryBus(), tmp_path)
    ours, theirs = rows(3, seed=4), rows(2, seed=5)
    changes = [IndexChange(upsert=msgspec.structs.replace(r, model=m, vector=v.astype("<f4").tobytes()))
               for m, batch in (("openai:e5@new", ours), ("openai:e5@old", theirs)) for r, v in batch]
    changes = [changes[0], changes[3], changes[1], changes[4], changes[2]]
    with caplog.at_level(logging.WARNING, logger="skald.retriever"):
        rep.apply(list(enumerate(changes, start=1)))
    assert len(rep.index) == 3 and rep.index.applied_seq == 5
    assert rep.health()["rows_other_model"] == 2
    said = [r.getMessage() for r in caplog.records if "openai:e5@old" in r.getMessage()]
    assert len(said) == 1 and "openai:e5@new" in said[0]
    # What is left of them is counted, across a snapshot, until this embedder writes or drops them.
    rep.index.save(tmp_path / "snap")
    loaded = VectorIndex.load(tmp_path / "snap", 64, "openai:e5@new")
    assert loaded is not None and len(loaded.foreign) == 2
    d0, d1 = theirs[0][0], theirs[1][0]
    loaded.upsert_many([(d0, theirs[0][1])])  # written again by this embedder (content.reindex)
    loaded.delete(d1.account, d1.uri, d1.level)
    assert loaded.foreign == {}


class Recording(VectorIndex):
    """The index as the replica drives it, noting the sequence it claims at each write."""

    def __init__(self) -> None:
        super().__init__(64, "m")
        self.claimed: list[int] = []

    def upsert_many(self, rows, defer_graph=False):  # type: ignore[no-untyped-def]
        self.claimed.append(self.applied_seq)
        return super().upsert_many(rows, defer_graph)

    def delete(self, account: str, uri: str, level: int) -> bool:
        self.claimed.append(self.applied_seq)
        return super().delete(account, uri, level)


def test_the_applied_sequence_never_runs_ahead_of_the_rows(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A snapshot records the sequence it holds and its tail starts after it: a sequence claimed
    while its rows still waited to be written would lose them for good (and a read-your-writes
    check would pass before the rows are searchable)."""
    rep = IndexReplica("m", 64, MemoryBus(), tmp_path)
    rep.index = Recording()
    data = rows(4, seed=6)
    batch = [(10 + i, IndexChange(upsert=msgspec.structs.replace(r, model="m", vector=v.astype("<f4").tobytes())))
             for i, (r, v) in enumerate(data)]
    batch.insert(2, (99, IndexChange(delete=IndexDelete(account="a", uri=data[0][0].uri, level=2))))
    batch = [(seq, ch) for seq, (_, ch) in zip(range(10, 15), batch, strict=True)]
    rep.apply(batch)
    assert rep.index.claimed and all(s == 0 for s in rep.index.claimed)
    assert rep.index.applied_seq == 14 and len(rep.index) == 3


@pytest.mark.parametrize("kind", ["hnsw", "sq8"])  # hnswlib, and faiss over 8-bit codes
def test_a_large_ingest_waiting_for_the_graph_is_scanned_alone_beside_it(kind: str) -> None:
    """Thousands of rows written since the graph was built (more than an exact pass over the
    scope would once have been taken for): the graph answers for the rows it holds, only the
    waiting ones are scored exactly, and the answer is the exact one."""
    data = rows(30_000, seed=3)
    idx = VectorIndex(64, "m", graph=kind)
    idx.upsert_many(data[:20_000], defer_graph=True)
    while idx.build_graph(8000) > 0:
        pass
    idx.upsert_many(data[20_000:], defer_graph=True)
    assert idx.pending_graph == 10_000
    q = Query(account="a")
    for probe_at in (25_000, 5_000, 29_999):
        probe = data[probe_at][1]
        hits, trace = idx.search(probe, q, 10)
        assert trace.engine == f"{kind}+pending" and hits[0].row.uri == data[probe_at][0].uri
        truth = sorted(range(len(data)), key=lambda i: -float(data[i][1] @ probe))[:10]
        assert len({h.row.uri for h in hits} & {data[i][0].uri for i in truth}) >= 9
        assert trace.examined < len(data)  # not an exact pass over every row
    scoped, _ = idx.search(data[25_001][1], Query(account="a", prefixes=["viking://resources/t1"]), 5)
    assert scoped and all(h.row.uri.startswith("viking://resources/t1/") for h in scoped)
