"""Turning index hits into results (docs/design/retrieval-api.md): threshold, level suffixes, dedup by
URI, grouping."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Protocol

from skald.actors.text import sections
from skald.messages.index import IndexRow
from skald.messages.search import FindResult, MatchedContext

SUFFIX = {0: "/.abstract.md", 1: "/.overview.md"}


def served_uri(row_uri: str, level: int) -> str:
    """A directory hit is served as its `.abstract.md` (L0) or `.overview.md` (L1); idempotent."""
    suffix = SUFFIX.get(level)
    if suffix is None or row_uri.endswith(suffix):
        return row_uri
    return row_uri + suffix


def node_uri(uri: str) -> str:
    """The node a served URI names (strips a level suffix); idempotent."""
    for suffix in SUFFIX.values():
        if uri.endswith(suffix):
            return uri[: -len(suffix)]
    return uri


def passes(score: float, threshold: float | None, gte: bool = False) -> bool:
    """Strict `>` by default (docs/design/retrieval.md), `>=` when asked."""
    if threshold is None:
        return True
    return score >= threshold if gte else score > threshold


def to_matched(row: IndexRow, score: float, abstract: str) -> MatchedContext:
    """A long document's L0/L1 rows are served as the document itself (it has no `.overview.md`).
    `abstract` is the index's for the row (a leaf's is not held on the row: `abstract_of`)."""
    uri = row.uri if row.kind == "document" else served_uri(row.uri, row.level)
    return MatchedContext(context_type=row.context_type, uri=uri, level=row.level,
                          score=round(float(score), 6), category=row.category, abstract=abstract,
                          tags=list(row.tags) or None, location=location(row))


def explain(result: FindResult, query: str, how: str,
            words_in: Callable[[str, list[tuple[str, int]]], list[list[str]]],
            overview_of: Callable[[str], str | None]) -> None:
    """Seed 004's `match_reason` and `overview` of each hit: how it was found and which words of
    the query its text holds ("semantic and keywords (port, caddy)"; a hit of a planned query
    names that query, which the caller left in `match_reason`), and a directory's or long
    document's overview (its L1 text) beside its abstract. `words_in(query, [(uri, level)])` and
    `overview_of(node uri)` read the index; a listing without a query gives no reason."""
    by_query: dict[str, list[MatchedContext]] = {}
    for m in (*result.memories, *result.resources, *result.skills):
        if m.level in (0, 1):
            m.overview = overview_of(node_uri(m.uri))
        by_query.setdefault(m.match_reason or query, []).append(m)
    for asked, hits in by_query.items():
        if not asked.strip():
            continue
        for m, words in zip(hits, words_in(asked, [(node_uri(m.uri), m.level) for m in hits]), strict=True):
            reason = f"{how} and keywords ({', '.join(words)})" if words and how != "keywords" else (
                f"keywords ({', '.join(words)})" if words else how)
            m.match_reason = reason if asked == query else f"planned query {asked!r}: {reason}"


def l1_overview(row: IndexRow | None) -> str | None:
    """A directory's overview or a long document's table of contents: its L1 row's text after
    the name line."""
    return (overview_text(row.text) or None) if row is not None else None


def overview_text(text: str) -> str:
    """An L1 row's text without its first line (the node's name)."""
    return text.partition("\n")[2]


def location(row: IndexRow) -> str:
    return sections.place(row.start_line, row.end_line, row.page) if row.kind == "section" else ""


def by_score(matched: list[MatchedContext], raw: list[float]) -> list[MatchedContext]:
    """Several ranked lists' matches as one: best score first, ties by `raw` (each match's
    similarity before calibration, on the same scale for every query): calibrated scores clip at
    1.0, where a query's strongest hits tie."""
    return [m for m, _ in sorted(zip(matched, raw, strict=True), key=lambda x: (-x[0].score, -x[1]))]


def group(items: Iterable[MatchedContext], limit: int, ranked_input: bool = False) -> FindResult:
    """Dedup by served URI (best score wins), sort by score, cut at `limit`, group by context type.
    Ties go by URI, or, with `ranked_input` (items best first by raw similarity), keep the input's
    order: calibrated scores clip at 1.0, and the strongest hits would otherwise fall into URI order."""
    best: dict[str, MatchedContext] = {}
    for m in items:
        cur = best.get(m.uri)
        if cur is None or m.score > cur.score:
            best[m.uri] = m
    if ranked_input:
        ranked = sorted(best.values(), key=lambda m: -m.score)[:limit]  # stable: ties keep the input order
    else:
        ranked = sorted(best.values(), key=lambda m: (-m.score, m.uri))[:limit]
    out = FindResult(memories=[], resources=[], skills=[], total=len(ranked))
    for m in ranked:
        {"memory": out.memories, "skill": out.skills}.get(m.context_type, out.resources).append(m)
    return out


class Uses(Protocol):
    """Where hit use counts are read from (the retriever's usage counters)."""

    def get(self, account: str, uri: str) -> int: ...


def count_uses(result: FindResult, uses: Uses, account: str) -> None:
    """Each hit's `active_count`: its node's uses (served in a block, reported used)."""
    for m in (*result.memories, *result.resources, *result.skills):
        m.active_count = uses.get(account, node_uri(m.uri))
