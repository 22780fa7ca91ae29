"""The pure steps of context assembly (docs/design/context-assembly.md, the pipeline): retrieval's
candidates grouped and chosen under the quotas, the chosen slots filled under the token budget and
rendered as flat XML, and the stats that say what the block cost. No I/O: `handlers.py` gathers
what these take (candidates, transcripts, file texts, the model's digest) and writes what they give
(the dedup ledger)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from skald.actors.assembler import budget, passages, render, selection
from skald.actors.assembler.params import Params
from skald.messages import context as context_msgs

Lines = dict[str, list[str]]  # a transcript's lines, by the document they come from


def choose(buckets: dict[str, list[context_msgs.Candidate]], scripts: Lines,
           p: Params) -> list[context_msgs.Candidate]:
    """Candidates by bucket into the entries to place: turns grouped with their neighbours (from
    the transcripts at hand), each bucket's quota taken, adjacent passages merged."""
    room = p.limit if p.quotas is None else sum(p.quotas.values())

    def beside(c: context_msgs.Candidate, step: int) -> context_msgs.Candidate | None:
        lines = scripts.get(passages.document_of(c))
        return passages.turn_beside(c, lines, step) if lines else None

    grouped = {k: passages.group_turns(v, room, p.max_tokens, beside=beside) for k, v in buckets.items()}
    chosen = selection.select(grouped, p.quotas, p.limit)
    return passages.merge_neighbours(chosen, passages.MERGED_MAX_TOKENS)


@dataclass(slots=True)
class Block:
    """Slots placed under the budget: the entries served, their rendering, and what it cost."""

    entries: list[context_msgs.ContextEntry]
    rendered: str
    slots: list[budget.Slot]
    plan: budget.Fill
    candidates: int
    deduped: int


def fill(slots: list[budget.Slot], max_tokens: int) -> Block:
    """Near-copies dropped, tiers chosen under `max_tokens` (breadth first, then depth), each
    placed entry rendered as one `<memory>` element."""
    candidates = len(slots)
    slots, deduped = budget.dedup_bodies(
        slots, lambda s: budget.body_key(s.texts.get("full") or s.texts.get("abstract", "")))
    plan = budget.fill(slots, max_tokens)
    entries: list[context_msgs.ContextEntry] = []
    elements: list[str] = []
    for s, tier in zip(slots, plan.tiers, strict=True):
        if tier is None:
            continue
        text = s.texts.get(tier, "") if tier != "uri" else ""
        entries.append(context_msgs.ContextEntry(uri=s.uri, category=s.category, score=round(s.score, 4),
                                                 detail=tier, text=text, origin=s.origin, location=s.location))
        elements.append(render.element_after(s.head(), tier, text))
    return Block(entries, render.join(elements), slots, plan, candidates, deduped)


def stats_of(block: Block, p: Params, retrieval: context_msgs.CandidatesResult, *, query_expansion: str,
             planned_queries: list[str] | None, rewrite: str, rewrite_usage: dict[str, Any] | None,
             dedup: dict[str, Any], uses_counted: int | None, instructions_hash: str | None,
             telemetry: dict[str, float] | None, session_created: bool = False,
             unread: list[str] | None = None) -> context_msgs.ContextStats:
    """What the block cost and why it holds what it holds."""
    tier_counts: dict[str, int] = {}
    for e in block.entries:
        tier_counts[e.detail] = tier_counts.get(e.detail, 0) + 1
    plan = block.plan
    return context_msgs.ContextStats(
        candidates=block.candidates, returned=len(block.entries),
        dropped=block.candidates - block.deduped - len(block.entries), deduped=block.deduped,
        max_tokens=p.max_tokens, used_tokens=plan.used_tokens, per_entry_cap=plan.per_entry_cap,
        detail=p.detail_echo, tier_counts=tier_counts,
        fill=context_msgs.FillStats(floor_tokens=plan.floor_tokens, overview_upgrades=plan.overview_upgrades,
                                    full_upgrades=plan.full_upgrades, spare_upgrades=plan.spare_upgrades),
        query_expansion=query_expansion, planned_queries=planned_queries, rewrite=rewrite,
        rewrite_usage=rewrite_usage, excluded=retrieval.excluded, dedup={**dedup, "cooled": retrieval.cooled},
        coverage=budget.coverage(block.slots, plan), uses_counted=uses_counted,
        instructions_hash=instructions_hash, quotas=p.quotas, retrieval_errors=retrieval.errors or None,
        ignored=p.ignored or None, deprecated=p.deprecated or None, telemetry=telemetry,
        session_created=session_created, unread=sorted(set(unread)) if unread else None)


def timed(timing: dict[str, float], name: str, start: float, now: Callable[[], float]) -> float:
    """Record a stage's milliseconds; the time it ended (the next stage's start)."""
    end = now()
    timing[name] = (end - start) * 1000
    return end
