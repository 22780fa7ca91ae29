"""A term's postings stay a range of shared arrays until a search's or a later write's use makes
them a `Postings` of their own: the index answers as one whose every term had its own from the
start, through writes, rewrites, removals and a snapshot, and an ingest of rows that each hold a
code of their own makes no object for those codes."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from skald.store import bm25_snapshot, postings
from skald.store.bm25 import KeywordIndex
from skald.store.terms import tokenize

WORDS = ["gateway", "restart", "timeout", "latency", "node", "cache", "disk", "quota", "replica", "shard"]


def text(rng: random.Random, label: int, version: int) -> str:
    """Common words, and a code held by this row alone (a rare term per row, as real text has)."""
    return " ".join(rng.choices(WORDS, k=rng.randint(2, 8))) + f" code{label}x{version}"


def held(kw: KeywordIndex) -> dict[str, dict[int, int]]:
    """term -> {label: frequency} of the rows that hold it now, read without making any `Postings`."""
    out: dict[str, dict[int, int]] = {}
    for term, tid in kw._tid.items():
        labels, tfs = kw._post.current(tid, kw._gen)
        assert kw._post.live(tid) == labels.size, term
        if labels.size:
            out[term] = dict(zip(labels.tolist(), tfs.tolist(), strict=True))
    return out


def expected(texts: dict[int, str]) -> dict[str, dict[int, int]]:
    out: dict[str, dict[int, int]] = {}
    for label, t in texts.items():
        for term, n in Counter(tokenize(t, "en")).items():
            out.setdefault(term, {})[label] = n
    return out


def every(labels: np.ndarray) -> np.ndarray:
    return np.ones(labels.size, dtype=bool)


def test_ranges_answer_as_postings_through_writes_removals_and_a_snapshot(tmp_path: Path) -> None:
    rng = random.Random(3)
    kw, texts = KeywordIndex(), {}
    for step in range(12):
        batch = []
        for _ in range(40):
            label = rng.randrange(120)  # rewrites of earlier rows, in this batch and earlier ones
            texts[label] = text(rng, label, step)
            batch.append((label, texts[label], "en"))
        kw.add_many(batch)
        for label in rng.sample(sorted(texts), 5):
            kw.remove(label)
            del texts[label]
        if step == 5:  # saved and loaded halfway: later writes go to terms loaded and terms new
            bm25_snapshot.save(kw, tmp_path, bm25_snapshot.generations(kw, kw._gen.shape[0]))
            kw, _ = bm25_snapshot.load(tmp_path)
        assert held(kw) == {t: p for t, p in expected(texts).items()}, step
        query = " ".join(rng.sample(WORDS, 2)) + f" code{rng.choice(sorted(texts))}x{step}"
        fresh = KeywordIndex()
        fresh.add_many([(label, t, "en") for label, t in texts.items()])
        (la, sa), (lb, sb) = kw.search(query, 10, every), fresh.search(query, 10, every)
        assert la.tolist() == lb.tolist() and np.allclose(sa, sb), query
    # every posting saved, made and unmade terms alike: a snapshot of it loads to the same index
    (tmp_path / "again").mkdir()
    bm25_snapshot.save(kw, tmp_path / "again", bm25_snapshot.generations(kw, kw._gen.shape[0]))
    assert held(bm25_snapshot.load(tmp_path / "again")[0]) == expected(texts)


def test_an_ingest_of_codes_makes_no_object_for_a_term_in_one_row() -> None:
    rng = random.Random(5)
    kw = KeywordIndex()
    for start in range(0, 2_000, 256):  # as a replica applies: 256 rows at a time
        kw.add_many([(label, text(rng, label, 0), "en") for label in range(start, min(2_000, start + 256))])
    made = [tid for tid in range(len(kw._post)) if kw._post._items[tid] is not None]
    assert len(kw._post) == len(WORDS) + 2_000
    # the common words are written again by later batches (made then); no row's own code is
    assert len(made) <= len(WORDS)
    kw.search("code17x0", 5, every)  # a search reads a term without making it
    assert kw._post._items[kw._tid["code17x0"]] is None
    kw.remove(17)  # a removal does: its count of live rows changes
    assert kw._post._items[kw._tid["code17x0"]] is not None and kw._post.live(kw._tid["code17x0"]) == 0


def test_a_row_rewritten_until_its_generation_wraps_holds_none_of_its_old_words(tmp_path: Path) -> None:
    """A posting keeps its row's generation in 16 bits. A row rewritten 65,536 times comes back to
    the generation its retired postings were written with: they must be gone by then, in a term
    compacted never since (one retired posting of two) and in a term of its current text."""
    def every(labels: np.ndarray) -> np.ndarray:
        return np.ones(labels.shape[0], dtype=bool)

    kw = KeywordIndex()
    kw.add_many([(0, "zebra apple", "en"), (1, "zebra pear", "en"), (2, "apple", "en")])
    for i in range(65_536):  # the row's last text, "apple quince", is written at generation 0 again
        kw.add_many([(0, "apple quince" if i % 2 else "apple", "en")])
    assert int(kw._gen[0]) == 0
    assert kw.search("zebra", 5, every)[0].tolist() == [1]
    assert sorted(kw.search("apple", 5, every)[0].tolist()) == [0, 2]
    assert kw.search("quince", 5, every)[0].tolist() == [0]
    assert (kw._df("zebra"), kw._df("appl"), kw._df("quinc")) == (1, 2, 1)
    assert held(kw) == {"zebra": {1: 1}, "pear": {1: 1}, "appl": {0: 1, 2: 1}, "quinc": {0: 1}}
    # saved and loaded: the same
    bm25_snapshot.save(kw, tmp_path, bm25_snapshot.generations(kw, kw._gen.shape[0]))
    back, changed = bm25_snapshot.load(tmp_path)
    assert held(back) == held(kw) and not changed.size


@pytest.mark.parametrize("fold_at", [1, 150, 1 << 30])
def test_batches_waiting_to_be_written_answer_as_written_ones(monkeypatch: pytest.MonkeyPatch, fold_at: int) -> None:
    """An ingest's postings wait and are written together (each term once for every batch
    waiting) when enough wait or when anything reads: several batches rewriting each other's rows
    and removals between them give the postings, frequencies and search of an index written at
    once, however many waited, and a term of one row is still written as a range."""
    monkeypatch.setattr(postings, "FOLD_AT", fold_at)
    rng = random.Random(11)
    kw, texts = KeywordIndex(), {}
    for step in range(10):
        for _ in range(3):  # batches with nothing read between them
            batch = []
            for _ in range(30):
                label = rng.randrange(90)
                texts[label] = text(rng, label, step)
                batch.append((label, texts[label], "en"))
            kw.add_many(batch)
        if step % 3 == 2:
            gone = rng.choice(sorted(texts))
            kw.remove(gone)
            del texts[gone]
        query = " ".join(rng.sample(WORDS, 2)) + f" code{rng.choice(sorted(texts))}x{step}"
        fresh = KeywordIndex()
        fresh.add_many([(label, t, "en") for label, t in texts.items()])
        (la, sa), (lb, sb) = kw.search(query, 10, every), fresh.search(query, 10, every)
        assert la.tolist() == lb.tolist() and np.allclose(sa, sb), query
        assert held(kw) == expected(texts), step
    kw.add_many([(label, f"gateway code{label}x99", "en") for label in range(1000, 1030)])
    kw.add_many([(label, f"restart code{label}x99", "en") for label in range(1030, 1060)])
    assert kw.search("code1042x99", 5, every)[0].tolist() == [1042]
    assert all(kw._post._items[kw._tid[f"code{label}x99"]] is None for label in range(1000, 1060))


def test_a_loaded_table_keeps_one_generation_a_row_and_its_rewritten_rows_leave_it(tmp_path: Path) -> None:
    """Every posting a snapshot holds was its row's when written, so the loaded table keeps one
    generation a row (not one a posting: 2 bytes each, most of a cold start's keyword memory);
    a row rewritten or removed after the load leaves the loaded terms, made or not."""
    kw = KeywordIndex()
    kw.add_many([(label, " ".join(WORDS) + f" code{label}", "en") for label in range(200)])
    bm25_snapshot.save(kw, tmp_path, bm25_snapshot.generations(kw, kw._gen.shape[0]))
    back, _ = bm25_snapshot.load(tmp_path)
    postings_held = int(back._post._off[-1])
    assert postings_held == 200 * (len(WORDS) + 1)
    assert back._post._born.shape[0] <= back._gen.shape[0] < postings_held
    back.search("gateway", 5, every)  # a frequent term made (its own generations, from its rows')
    back.add_many([(3, "quota", "en")])  # rewritten: out of "gateway" (made) and "code3" (unmade)
    back.remove(4)
    texts = {label: " ".join(WORDS) + f" code{label}" for label in range(200) if label not in (3, 4)}
    texts[3] = "quota"
    assert held(back) == expected(texts)
