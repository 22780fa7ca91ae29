"""Time decay of event memories, in one place for every retrieval path (find, list search,
context candidates): an event's similarity is multiplied by its time score."""

from __future__ import annotations

from skald.actors.retriever.params import is_event, time_score
from skald.actors.retriever.results import to_matched
from skald.messages.index import IndexRow
from skald.messages.search import MatchedContext


def decay_factor(row: IndexRow, decay: float | None, now: float) -> float | None:
    """The time score of an event memory; None when no decay applies (not an event, or off)."""
    if decay is None or not is_event(row):
        return None
    return time_score(row.updated_at, now, decay)


def decayed_score(row: IndexRow, score: float, decay: float | None, now: float) -> float:
    ts = decay_factor(row, decay, now)
    return score if ts is None else score * ts


def decayed_match(row: IndexRow, score: float, decay: float | None, now: float) -> MatchedContext:
    """The hit as a result; a decayed one keeps its similarity as `origin_score` beside `time_score`."""
    m = to_matched(row, score)
    ts = decay_factor(row, decay, now)
    if ts is not None:
        m.origin_score, m.time_score = m.score, round(ts, 6)
        m.score = round(score * ts, 6)
    return m
