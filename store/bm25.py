"""BM25 over index rows, local and incremental: keyword search with no remote engine.

Terms come from `store/terms.py` (words of every script, each row's words stemmed in its own
language, `store/language.py`); a query's words are looked up under the stems of every language
the index holds. Postings are arrays per
term (12 bytes a posting), so scoring a common term over 100k documents is one vector op and a
million rows fit in memory.
"""

from __future__ import annotations

import re
import threading
from collections import Counter
from collections.abc import Callable

import numpy as np

from skald.store import bm25_math
from skald.store.bm25_math import K1, B
from skald.store.language import DEFAULT
from skald.store.postings import GEN, GEN_MASK, TF, TF_MAX, PostingsTable
from skald.store.row_terms import RowTerms
from skald.store.terms import ENGLISH, Langs, query_groups, query_terms, query_words, tokenize

_CODE = re.compile(r"\d")

# A term in more than this share of the rows (and more than COMMON_MIN_DF of them) is left out
# of scoring: its IDF is near zero, and its posting list is what a search over a million rows
# would spend its time on (Lucene's "common terms" reasoning).
COMMON_SHARE = 0.2
COMMON_MIN_DF = 5_000
# A term in more rows than CHAMPIONS_FROM is scored over its champion list: the CHAMPIONS rows where
# it weighs most (highest length-normalised frequency), kept per term and topped up with the rows
# that gained the term since, instead of over every posting (Manning et al., "Introduction to
# Information Retrieval", 7.1.3). Its IDF is low (in over 65k rows), so a row outside the list loses
# little; a search that finds fewer than k allowed rows this way (a narrow scope) is done exactly.
# On a million Zipf-distributed rows (bench/keywords.py) a query's top 10 keep 0.986 of the exact
# BM25 score mass, at 1.2 ms instead of 3.1; 4,096 champions: 0.962 at 0.8 ms.
CHAMPIONS = 16_384
CHAMPIONS_FROM = 4 * CHAMPIONS
# A term's BM25 weights change with every write (the row count and the average length move), and
# only then: between writes a repeated term reuses them. Bounded by postings (12 bytes each with
# their labels: 24 MB at most).
WEIGHTS_CACHED_MAX = 2_000_000




class KeywordIndex:
    """Postings per term as arrays (`store/postings.py`). Each label has a generation; removing a row bumps
    it, which retires all its postings at once (no search through any posting list), and a term
    whose retired postings outnumber its live ones is compacted."""

    def __init__(self) -> None:
        self._tid: dict[str, int] = {}  # term -> its id
        self._post = PostingsTable()  # by term id
        self._terms = RowTerms()  # label -> the term ids its text holds (sorted)
        self._gen = np.zeros(1024, dtype=GEN)  # each label's, bumped by every rewrite and removal
        self._dl = np.zeros(1024, dtype=np.float32)
        self._total = 0
        self._lock = threading.Lock()
        self._scratch = np.zeros(0, dtype=np.float32)  # search's sums, all zero between searches
        self._writes = 0  # rows added or removed: the weights below are of one count
        # term id (~id: its champion list) -> (writes, labels, weights)
        self._weighed: dict[int, tuple[int, np.ndarray, np.ndarray]] = {}
        self._weighed_size = 0
        self._lang: dict[int, str] = {}  # label -> its row's language, when not DEFAULT
        self._lang_rows: Counter[str] = Counter()
        self.languages: Langs = ENGLISH  # DEFAULT, then every other language a row is in

    def __len__(self) -> int:
        return len(self._terms)

    def _grow(self, label: int) -> None:
        if label >= self._dl.shape[0]:
            size = max(label + 1, self._dl.shape[0] * 2)
            for name in ("_dl", "_gen"):
                old = getattr(self, name)
                grown = np.zeros(size, dtype=old.dtype)
                grown[: old.shape[0]] = old
                setattr(self, name, grown)

    def add(self, label: int, text: str, lang: str = DEFAULT) -> None:
        """Index the row's text, its words stemmed as words of `lang` (its language)."""
        self.add_many([(label, text, lang)])

    def add_many(self, items: list[tuple[int, str, str]]) -> None:
        """`add` of many rows, their postings written a term at a time (one slice per term of the
        batch) instead of a posting at a time: a numpy scalar write per term of every row was a
        quarter of a replica's catch-up at a million rows."""
        with self._lock:
            tids: list[int] = []
            labels: list[int] = []
            gens: list[int] = []
            tfs: list[int] = []
            batch: set[int] = set()
            for label, text, lang in items:
                if label in batch:  # the same row again: its first text is indexed before it is replaced
                    self._extend(tids, labels, gens, tfs)
                    tids, labels, gens, tfs = [], [], [], []
                    batch.clear()
                batch.add(label)
                self._writes += 1
                self._remove(label)
                self._grow(label)
                if lang != DEFAULT:
                    self._lang[label] = lang
                    self._lang_rows[lang] += 1
                    if self._lang_rows[lang] == 1:
                        self._set_languages()
                counts = Counter(tokenize(text, lang))
                row_tids = []
                for term in counts:
                    tid = self._tid.get(term)
                    if tid is None:
                        tid = self._tid[term] = self._post.new_term()
                    row_tids.append(tid)
                tids += row_tids
                labels += [label] * len(row_tids)
                gens += [int(self._gen[label])] * len(row_tids)
                tfs += counts.values()
                n = sum(counts.values())
                self._dl[label] = n
                self._terms.set(label, np.sort(np.asarray(row_tids, dtype=np.int32)))
                self._total += n
            self._extend(tids, labels, gens, tfs)

    def _extend(self, tids: list[int], labels: list[int], gens: list[int], tfs: list[int]) -> None:
        """Postings (term id, label, generation, frequency) to their terms (`PostingsTable.add`)."""
        if tids:
            self._post.add(np.asarray(tids, dtype=np.int64), np.asarray(labels, dtype=np.int32),
                           np.asarray(gens, dtype=GEN), np.minimum(np.asarray(tfs, dtype=np.int64), TF_MAX).astype(TF))

    def remove(self, label: int) -> None:
        with self._lock:
            self._writes += 1
            self._remove(label)

    def _set_languages(self) -> None:
        self.languages = (DEFAULT, *sorted(lang for lang, n in self._lang_rows.items() if n > 0))

    def _remove(self, label: int) -> None:
        tids = self._terms.pop(label)
        if tids is None:
            return
        lang = self._lang.pop(label, None)
        if lang is not None:
            self._lang_rows[lang] -= 1
            if not self._lang_rows[lang]:
                del self._lang_rows[lang]
                self._set_languages()
        nxt = (int(self._gen[label]) + 1) & GEN_MASK
        if nxt == 0:  # a retired posting from 65,536 rewrites ago would pass for current
            self._post.purge(label, tids, self._gen)
        self._gen[label] = nxt  # every posting of the old text is retired at once
        for tid in tids.tolist():
            post = self._post[tid]
            post.live -= 1
            if post.n - post.live > max(8, post.live):
                post.compact(self._gen)
        self._total -= int(self._dl[label])
        self._dl[label] = 0

    @property
    def from_snapshot(self) -> bool:
        """Whether postings are read from a snapshot's arrays (mapped from its file)."""
        return self._post.loaded_terms > 0

    def vocabulary(self) -> int:
        """Distinct terms ever indexed (a term no row holds any more still counts until restart)."""
        return len(self._tid)

    def _df(self, term: str) -> int:
        tid = self._tid.get(term)
        return 0 if tid is None else self._post.live(tid)

    def coverage(self, query: str, labels: list[int]) -> list[float]:
        """For each label, the share of the query's IDF mass its text contains (0..1): how much of
        what the query asks for, weighted by how rare each word is, the row says at all. Words no
        row has weigh the most, so a query about something absent covers little anywhere. When the
        query holds identifiers (a digit in a word: `OPS-0001234`, `E1234`, `v2.3.1`), only they count.
        A word counts once, whichever of its languages' stems the row holds."""
        groups = query_groups(query, self.languages)
        codes = [g for g in groups if any(_CODE.search(t) for t in g)]
        if codes:
            groups = tuple(codes)  # a ticket number, error code or version is what such a query is about
        with self._lock:
            n = len(self._terms)
            if not n or not groups or not labels:
                return [0.0] * len(labels)
            idf = [bm25_math.idf(n, max(self._df(t) for t in g)) for g in groups]
            total = sum(idf) or 1.0
            word = {self._tid[t]: i for i, g in enumerate(groups) for t in g if self._df(t)}  # absent words: in no row
            if not word:
                return [0.0] * len(labels)
            order = sorted(word)
            qids = np.asarray(order, dtype=np.int32)
            qword = np.asarray([word[t] for t in order], dtype=np.int64)
            weights = np.asarray(idf, dtype=np.float64)
            # Every candidate's term ids in one array: which are query terms, summed per candidate.
            ids, lens = self._terms.many(labels)
            if not ids.size:
                return [0.0] * len(labels)
            at = np.minimum(np.searchsorted(qids, ids), qids.size - 1)
            owner = np.repeat(np.arange(len(labels)), lens)
            if qids.size == len(groups):  # one term a word: each (row, word) pair is met once at most
                gained = np.where(qids[at] == ids, weights[qword[at]], 0.0)
                return (np.bincount(owner, weights=gained, minlength=len(labels)) / total).tolist()
            hit = qids[at] == ids
            pairs = np.unique(owner[hit] * len(groups) + qword[at[hit]])  # a word held in two stems counts once
            held = np.bincount(pairs // len(groups), weights=weights[pairs % len(groups)], minlength=len(labels))
            return (held / total).tolist()

    def words_in(self, query: str, labels: list[int]) -> list[list[str]]:
        """For each label, the query's words (`query_words`) whose term the row's text holds; every
        row in one pass over their term ids, as `coverage` does."""
        pairs = query_words(query, self.languages)
        out: list[list[str]] = [[] for _ in labels]
        with self._lock:
            tids = {tid: w for w, g in pairs for t in g if (tid := self._tid.get(t)) is not None}
            if not tids or not labels:
                return out
            ids, lens = self._terms.many(labels)
        want = np.sort(np.fromiter(tids, dtype=np.int32, count=len(tids)))
        at = np.minimum(np.searchsorted(want, ids), want.size - 1)  # a few query terms: no sort of ids
        hit = np.flatnonzero(want[at] == ids)
        if hit.size:
            ends = np.cumsum(lens)
            for row, tid in zip(np.searchsorted(ends, hit, side="right").tolist(), ids[hit].tolist(), strict=True):
                if tids[tid] not in out[row]:
                    out[row].append(tids[tid])
        order = {w: i for i, (w, _) in enumerate(pairs)}
        return [sorted(words, key=order.__getitem__) if len(words) > 1 else words for words in out]

    def holders(self, query: str, sample: int) -> dict[str, tuple[int, np.ndarray]]:
        """For each word of a query (`query_words`): how many rows hold it (its commonest stem's
        document frequency) and at most `sample` of their labels, evenly spaced: enough to tell
        what share of a scope holds a word that most of it may hold (the speakers' names
        throughout a conversation's turns), at a fixed cost whatever the word's frequency."""
        pairs = query_words(query, self.languages)
        out: dict[str, tuple[int, np.ndarray]] = {}
        with self._lock:
            for w, g in pairs:
                tid = max((self._tid[t] for t in g if t in self._tid), key=self._post.live, default=None)
                if tid is None:
                    out[w] = (0, np.zeros(0, dtype=np.int64))
                    continue
                labels = self._post.current(tid, self._gen)[0]
                step = max(1, -(-labels.size // sample))
                out[w] = (int(labels.size), labels[::step].astype(np.int64))
        return out

    def absent_share(self, query: str) -> float:
        """The share of the query's IDF mass (function words aside) in words no row holds at all:
        0 when the index knows every word, near 1 when the query is about things never written
        down here (an absent word carries the highest IDF)."""
        groups = query_groups(query, self.languages)
        with self._lock:
            n = len(self._terms)
            if not n or not groups:
                return 0.0
            dfs = [max(self._df(t) for t in g) for g in groups]
            idf = [bm25_math.idf(n, df) for df in dfs]
            total = sum(idf) or 1.0
            return sum(w for w, df in zip(idf, dfs, strict=True) if not df) / total

    def search(self, query: str, k: int, allow: Callable[[np.ndarray], np.ndarray],
               within: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Top k (labels, BM25 scores) among the labels `allow` accepts (it takes an array of labels
        and answers a boolean array: filters run as array operations), best first, ties by label.
        Work is in proportion to the query's postings, never to the index: a term's scores are
        summed in a scratch array only over its own labels, and only those are read back; a term
        in very many rows contributes its champion list (CHAMPIONS). `within`, a mask by label of a
        narrow scope's rows: every posting is read (champions would mostly miss the scope) and only
        the scope's are summed, so `allow` is asked about a few rows, not a frequent term's all."""
        terms = query_terms(query, self.languages)
        if not terms:
            return bm25_math.EMPTY_LABELS, bm25_math.EMPTY_SCORES
        if within is not None:
            return bm25_math.top(*self._scores(terms, prune=False, within=within)[:2], k, allow)
        hit, scores, pruned = self._scores(terms, prune=True)
        labels, best = bm25_math.top(hit, scores, k, allow)
        if pruned and labels.size < k:  # a narrow scope: the champion lists may have missed its rows
            labels, best = bm25_math.top(*self._scores(terms, prune=False)[:2], k, allow)
        return labels, best

    def warm_champions(self) -> int:
        """Choose the champion list of every term a search would score over one, a term at a time
        under the lock, so the first searches after a load or a large ingest do not: choosing
        one is a pass over all of a frequent term's postings (100,000 and more at a million
        rows), which a search paid the first time it met the term. Returns how many terms."""
        with self._lock:
            n = len(self._terms)
            if not n:
                return 0
            tids = self._post.frequent(CHAMPIONS_FROM, _common(n))
        for tid in tids:
            with self._lock:  # the lock was let go between terms: a removal may have thinned this one
                if len(self._terms) and self._post.live(tid) > CHAMPIONS_FROM:
                    self._champions(tid, self._total / len(self._terms))
        return len(tids)

    def _champions(self, tid: int, avgdl: float) -> tuple[np.ndarray, np.ndarray]:
        """(labels, tfs) of the term's champion list (`Postings.champions`), chosen again when stale."""
        return self._post[tid].champions(self._gen, self._dl, avgdl, K1, B, CHAMPIONS)

    def _weights_of(self, tid: int, idf: float, avgdl: float,
                    champions: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """(labels, BM25 weights) of every row holding the term (with `champions`, of its champion
        list's rows), computed once per write: between writes a frequent term's list and its
        weights are the same for every search (choosing and weighing them again was a fifth of a
        find at a million rows)."""
        key = ~tid if champions else tid
        got = self._weighed.get(key)
        if got is not None and got[0] == self._writes:
            return got[1], got[2]
        labels, tf = self._champions(tid, avgdl) if champions else self._post.current(tid, self._gen)
        labels = bm25_math.frozen(labels.astype(np.int64))
        weights = bm25_math.frozen(bm25_math.weights(tf, self._dl[labels], idf, avgdl))
        if got is None:
            if self._weighed_size + labels.size > WEIGHTS_CACHED_MAX:
                self._weighed.clear()
                self._weighed_size = 0
            self._weighed_size += labels.size
        else:
            self._weighed_size += labels.size - got[1].size
        self._weighed[key] = (self._writes, labels, weights)
        return labels, weights

    def _scores(self, terms: frozenset[str], prune: bool,
                within: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, bool]:
        """(labels, BM25 scores) of every row holding a query term (of those `within` marks, when
        given), and whether a champion list stood in for a term's postings."""
        pruned = False
        with self._lock:
            n = len(self._terms)
            if not n:
                return bm25_math.EMPTY_LABELS, bm25_math.EMPTY_SCORES, False
            avgdl = self._total / n
            common = _common(n)
            parts: list[tuple[np.ndarray, np.ndarray]] = []
            for t in sorted(terms):
                tid = self._tid.get(t)
                if tid is None or not 0 < (df := self._post.live(tid)) <= common:
                    continue  # absent, or in most rows: next to no weight, and the whole cost of the search
                idf = bm25_math.idf(n, df)
                if prune and df > CHAMPIONS_FROM:
                    parts.append(self._weights_of(tid, idf, avgdl, champions=True))
                    pruned = True
                else:
                    parts.append(self._weights_of(tid, idf, avgdl))
            if within is not None:
                parts = [(lab[m], w[m]) for lab, w in parts for m in (bm25_math.marked(within, lab),)]
            if not parts:
                return bm25_math.EMPTY_LABELS, bm25_math.EMPTY_SCORES, pruned
            if len(parts) == 1:
                return parts[0][0].astype(np.int64, copy=False), parts[0][1], pruned
            # Labels repeat across terms: summed in the scratch array and read back at every
            # posting, a row of several terms then listed once for each with its whole score.
            # `bm25_math.top` drops the repeats among the few it keeps: taking each label once here (a
            # stamp array written and read at every posting, then a gather) was twice the time,
            # at a million rows 0.53-0.74 against 0.25-0.39 ms for 33k postings a query.
            if self._scratch.shape[0] < self._dl.shape[0]:
                self._scratch = np.zeros(self._dl.shape[0], dtype=np.float32)
            for labels, contrib in parts:
                self._scratch[labels] += contrib
            hit = np.concatenate([labels for labels, _ in parts]).astype(np.int64, copy=False)
            scores = self._scratch[hit]
            self._scratch[hit] = 0.0
            return hit, scores, pruned


def _common(n: int) -> int:
    """The document frequency above which a term of an index of n rows is not scored (COMMON_SHARE)."""
    return max(COMMON_MIN_DF, int(n * COMMON_SHARE))
