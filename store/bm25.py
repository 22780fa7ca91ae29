"""BM25 over index rows, local and incremental: keyword search with no remote engine.

Tokens keep identifiers whole (`ERR_AUTH_42`, `parse_config`, `v2.3.1`) and also index their
parts, so both the exact code and its words match; plain English words are stemmed (Snowball),
so `restarting` finds `restart`; CJK text is indexed as character unigrams
and bigrams (no segmenter needed). Postings live in dicts for cheap updates and are turned into
arrays per term on first use, so scoring a common term over 100k documents is one vector op.
"""

from __future__ import annotations

import functools
import math
import re
import threading
from collections import Counter
from collections.abc import Callable

import numpy as np
import snowballstemmer

_STEMMER = snowballstemmer.stemmer("english")  # BSD; the Snowball project's own Python port
K1 = 1.2
B = 0.75
# A term in more than this share of the rows (and more than COMMON_MIN_DF of them) is left out
# of scoring: its IDF is near zero, and its posting list is what a search over a million rows
# would spend its time on (Lucene's "common terms" reasoning).
COMMON_SHARE = 0.2
COMMON_MIN_DF = 5_000
_TOKEN = re.compile(r"[A-Za-z0-9_]+(?:[.\-:/][A-Za-z0-9_]+)*")
_PARTS = re.compile(r"[A-Za-z0-9]+")
_CODE = re.compile(r"\d")
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af]+")


# Function words a query carries ("when did she ...") that say nothing about what it is about.
# Left out of a query's terms (never of the index, so a query of nothing else still matches).
# A short list on purpose: published lists (python-stop-words' English has 1,333 entries) hold
# content words such as "act", "added" or "10" that a technical search must keep. Words that are
# also names ("May", "will", "can", "US") stay terms.
_STOP = """
a an the and or but nor of to in on at by for with from into onto about as than then so if
is am are was were be been being do does did done doing have has had having would shall
should could might must i me my mine we our you your he him his she her it its they
them their this that these those there here what which who whom whose when where why how
not no yes just also too very any some all each both either neither other such own same
""".split()


def query_terms(text: str) -> set[str]:
    """A query's terms without its function words (all of them when it has nothing else)."""
    terms = set(tokenize(text))
    return (terms - STOP_WORDS) or terms



@functools.lru_cache(maxsize=200_000)
def stem(word: str) -> str:
    """English Snowball stem of a plain word (`restarting` -> `restart`); identifiers and numbers
    are left whole, since `v2.3.1` and `ERR_AUTH_42` must match exactly."""
    if not word.isalpha() or not word.isascii() or len(word) < 4:
        return word
    return _STEMMER.stemWord(word)


def tokenize(text: str) -> list[str]:
    out: list[str] = [stem(t) for t in _TOKEN.findall(text.lower())]
    for tok in out[:]:
        if not tok.isalnum():  # an identifier with separators: its parts are terms too
            parts = _PARTS.findall(tok)
            if len(parts) > 1:
                out.extend(stem(p) for p in parts)
    if not text.isascii():
        for run in _CJK.findall(text):
            out.extend(run)
            out.extend(run[i : i + 2] for i in range(len(run) - 1))
    return out


STOP_WORDS = frozenset(t for w in _STOP for t in tokenize(w))  # as the tokenizer turns them ("does" -> "doe")


class KeywordIndex:
    def __init__(self) -> None:
        self._post: dict[str, dict[int, int]] = {}
        self._arr: dict[str, tuple[np.ndarray, np.ndarray]] = {}  # term -> (labels, tfs), built lazily
        self._terms: dict[int, tuple[str, ...]] = {}
        self._dl = np.zeros(1024, dtype=np.float32)
        self._total = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._terms)

    def add(self, label: int, text: str) -> None:
        with self._lock:
            self._remove(label)
            counts = Counter(tokenize(text))
            for term, tf in counts.items():
                self._post.setdefault(term, {})[label] = tf
                self._arr.pop(term, None)
            n = sum(counts.values())
            if label >= self._dl.shape[0]:
                grown = np.zeros(max(label + 1, self._dl.shape[0] * 2), dtype=np.float32)
                grown[: self._dl.shape[0]] = self._dl
                self._dl = grown
            self._dl[label] = n
            self._terms[label] = tuple(counts)
            self._total += n

    def remove(self, label: int) -> None:
        with self._lock:
            self._remove(label)

    def _remove(self, label: int) -> None:
        terms = self._terms.pop(label, None)
        if terms is None:
            return
        for t in terms:
            p = self._post.get(t)
            if p is not None:
                p.pop(label, None)
                self._arr.pop(t, None)
                if not p:
                    del self._post[t]
        self._total -= int(self._dl[label])
        self._dl[label] = 0

    def _postings(self, term: str) -> tuple[np.ndarray, np.ndarray] | None:
        arr = self._arr.get(term)
        if arr is None:
            post = self._post.get(term)
            if not post:
                return None
            arr = (np.fromiter(post.keys(), dtype=np.int64, count=len(post)),
                   np.fromiter(post.values(), dtype=np.float32, count=len(post)))
            self._arr[term] = arr
        return arr

    def coverage(self, query: str, labels: list[int]) -> list[float]:
        """For each label, the share of the query's IDF mass its text contains (0..1): how much of
        what the query asks for, weighted by how rare each word is, the row says at all. Words no
        row has weigh the most, so a query about something absent covers little anywhere. When the
        query holds identifiers (a digit in a word: `OPS-0001234`, `E1234`, `v2.3.1`), only they count."""
        terms = query_terms(query)
        codes = {t for t in terms if _CODE.search(t)}
        if codes:
            terms = codes  # a ticket number, error code or version is what such a query is about
        with self._lock:
            n = len(self._terms)
            if not n or not terms or not labels:
                return [0.0] * len(labels)
            idf = {}
            for t in terms:
                df = len(self._post.get(t, ()))
                idf[t] = math.log(1 + (n - df + 0.5) / (df + 0.5))
            total = sum(idf.values()) or 1.0
            out = [0.0] * len(labels)
            for t, w in idf.items():  # a few query terms x a dict lookup per row: no scan of any row's terms
                post = self._post.get(t)
                if post:
                    for i, label in enumerate(labels):
                        if label in post:
                            out[i] += w
            return [x / total for x in out]

    def absent_share(self, query: str) -> float:
        """The share of the query's IDF mass (function words aside) in words no row holds at all:
        0 when the index knows every word, near 1 when the query is about things never written
        down here (an absent word carries the highest IDF)."""
        terms = query_terms(query)
        with self._lock:
            n = len(self._terms)
            if not n or not terms:
                return 0.0
            idf = {t: math.log(1 + (n - (df := len(self._post.get(t, ()))) + 0.5) / (df + 0.5)) for t in terms}
            total = sum(idf.values()) or 1.0
            return sum(w for t, w in idf.items() if t not in self._post) / total

    def search(self, query: str, k: int,
               allow: Callable[[np.ndarray], np.ndarray]) -> list[tuple[int, float]]:
        """Top k (label, BM25 score) among the labels `allow` accepts (it takes an array of labels and
        answers a boolean array: filters run as array operations)."""
        terms = query_terms(query)
        with self._lock:
            n = len(self._terms)
            if not n or not terms:
                return []
            avgdl = self._total / n
            scores = np.zeros(self._dl.shape[0], dtype=np.float32)
            common = max(COMMON_MIN_DF, int(n * COMMON_SHARE))
            for t in terms:
                post = self._postings(t)
                if post is None:
                    continue
                labels, tf = post
                df = labels.size
                if df > common:
                    continue  # in most rows: next to no weight, and the whole cost of the search
                idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
                dl = self._dl[labels]
                scores[labels] += idf * tf * (K1 + 1) / (tf + K1 * (1 - B + B * dl / avgdl))
        hit = np.flatnonzero(scores)
        if hit.size == 0:
            return []
        want = min(hit.size, max(k * 4, 64))
        out: list[tuple[int, float]] = []
        while True:
            top = hit[np.argpartition(-scores[hit], want - 1)[:want]] if want < hit.size else hit
            top = top[np.argsort(-scores[top], kind="stable")]
            top = top[allow(top)][:k]
            out = list(zip(top.tolist(), scores[top].tolist(), strict=True))
            if len(out) >= k or want >= hit.size:
                return out
            want = min(hit.size, want * 4)
