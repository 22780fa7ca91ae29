"""BM25 over index rows, local and incremental: keyword search with no remote engine.

Tokens keep identifiers whole (`ERR_AUTH_42`, `parse_config`, `v2.3.1`) and also index their
parts, so both the exact code and its words match; CJK text is indexed as character unigrams
and bigrams (no segmenter needed).
"""

from __future__ import annotations

import heapq
import math
import re
import threading
from collections import Counter
from collections.abc import Callable

K1 = 1.2
B = 0.75
_TOKEN = re.compile(r"[A-Za-z0-9_]+(?:[.\-:/][A-Za-z0-9_]+)*")
_PARTS = re.compile(r"[A-Za-z0-9]+")
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af]+")


def tokenize(text: str) -> list[str]:
    out: list[str] = []
    for m in _TOKEN.finditer(text):
        tok = m.group(0).lower()
        out.append(tok)
        parts = _PARTS.findall(tok)
        if len(parts) > 1:
            out.extend(parts)
    for run in _CJK.findall(text):
        out.extend(run)
        out.extend(run[i : i + 2] for i in range(len(run) - 1))
    return out


class KeywordIndex:
    def __init__(self) -> None:
        self._post: dict[str, dict[int, int]] = {}
        self._len: dict[int, int] = {}
        self._terms: dict[int, tuple[str, ...]] = {}
        self._total = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._len)

    def add(self, label: int, text: str) -> None:
        with self._lock:
            self._remove(label)
            counts = Counter(tokenize(text))
            for term, tf in counts.items():
                self._post.setdefault(term, {})[label] = tf
            n = sum(counts.values())
            self._len[label] = n
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
                if not p:
                    del self._post[t]
        self._total -= self._len.pop(label, 0)

    def search(self, query: str, k: int, allow: Callable[[int], bool]) -> list[tuple[int, float]]:
        """Top k (label, BM25 score) among labels `allow` accepts."""
        terms = set(tokenize(query))
        with self._lock:
            n = len(self._len)
            if not n or not terms:
                return []
            avgdl = self._total / n
            scores: dict[int, float] = {}
            for t in terms:
                post = self._post.get(t)
                if not post:
                    continue
                df = len(post)
                idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
                for label, tf in post.items():
                    dl = self._len[label]
                    s = idf * tf * (K1 + 1) / (tf + K1 * (1 - B + B * dl / avgdl))
                    scores[label] = scores.get(label, 0.0) + s
        out: list[tuple[int, float]] = []
        for label, s in heapq.nlargest(len(scores), scores.items(), key=lambda x: x[1]):
            if allow(label):
                out.append((label, s))
                if len(out) >= k:
                    break
        return out
