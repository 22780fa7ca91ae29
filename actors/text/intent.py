"""Intent analysis (docs/design/retrieval.md): session context + query -> a plan of typed queries.

Bounded on every side: the archive overview is cut at 30,000 characters, only the last five
messages with text are shown, at most three queries are used (the original first), the model
call runs under a timeout fuse, and any failure falls back to the original query and says so.
"""

from __future__ import annotations

import asyncio

import msgspec

from skald.actors.kit.ports import LLM
from skald.actors.text import comparative
from skald.actors.text.llmjson import json_object

MAX_SUMMARY_CHARS = 30_000
MAX_RECENT_MESSAGES = 5
MAX_QUERIES = 3
CONTEXT_TYPES = ("memory", "resource", "skill")

SYSTEM = """You plan retrieval for an AI agent's context store. Given the conversation so far and the
user's current request, answer with JSON only:
{"reasoning": "<one sentence>", "queries": [{"query": "...", "context_type": "memory|resource|skill",
 "intent": "<why>", "priority": 1-5}]}
Styles: skill queries start with a verb ("extract tables from PDF"); resource queries are noun phrases
("RFC template"); memory queries read "the user's ..." ("the user's code style preferences").
A question that compares two people or things ("what do Ann and Bo both like?") gets a query for each.
Give 0 queries for greetings or chit-chat, at most 5 otherwise."""


class TypedQuery(msgspec.Struct, kw_only=True):
    """One query of a plan: its text, the context type it searches, and why it was planned."""

    query: str
    context_type: str | None = None  # None: every type (the original query)
    intent: str = ""
    priority: int = 3


class QueryPlan(msgspec.Struct, kw_only=True):
    """What intent analysis made of a query in its session: up to three typed queries, and how the plan came about."""

    queries: list[TypedQuery]
    reasoning: str = ""
    status: str = "original"  # original | split | planned | failed | timeout | off
    error: str | None = None


def original(query: str, status: str = "original", error: str | None = None) -> QueryPlan:
    return QueryPlan(queries=[TypedQuery(query=query)], status=status, error=error)


def offline(query: str) -> QueryPlan:
    """The plan without a model: the original query, and a question comparing two names also asked
    of each (`comparative.parts`), said as "split"; list and context mode plan alike."""
    parts = comparative.parts(query)
    if not parts:
        return original(query)
    return QueryPlan(queries=[TypedQuery(query=q) for q in [query, *parts][:MAX_QUERIES]], status="split")


def build_prompt(query: str, summary: str, recent: list[tuple[str, str]]) -> str:
    parts = []
    if summary:
        parts.append("## Conversation summary\n" + summary[:MAX_SUMMARY_CHARS])
    msgs = [(r, t) for r, t in recent if t.strip()][-MAX_RECENT_MESSAGES:]
    if msgs:
        parts.append("## Recent messages\n" + "\n".join(f"[{r}]: {t}" for r, t in msgs))
    parts.append("## Current request\n" + query)
    return "\n\n".join(parts)


def parse_plan(text: str, query: str) -> QueryPlan:
    """The model's JSON -> a plan of at most three queries, the original first; raises on garbage."""
    data = json_object(text)
    if not isinstance(data.get("queries", []), list):
        raise ValueError("planner JSON has no queries list")
    planned: list[TypedQuery] = []
    for q in data.get("queries", []):
        if not isinstance(q, dict) or not isinstance(q.get("query"), str) or not q["query"].strip():
            continue
        ct = q.get("context_type")
        prio = q.get("priority", 3)
        planned.append(TypedQuery(query=q["query"].strip(), context_type=ct if ct in CONTEXT_TYPES else "resource",
                                  intent=str(q.get("intent", ""))[:500],
                                  priority=prio if isinstance(prio, int) and not isinstance(prio, bool) else 3))
    reasoning = str(data.get("reasoning", ""))[:2000]
    if not planned:
        return QueryPlan(queries=[], reasoning=reasoning, status="planned")
    planned.sort(key=lambda t: t.priority)
    out = [TypedQuery(query=query)]
    for t in planned:
        if len(out) >= MAX_QUERIES:
            break
        if t.query.lower() != query.lower():
            out.append(t)
    return QueryPlan(queries=out, reasoning=reasoning, status="planned")


async def analyze(llm: LLM, query: str, summary: str, recent: list[tuple[str, str]],
                  timeout_s: float) -> QueryPlan:
    """Never raises: the fuse or any failure yields the original query with the reason. Without a
    model, or with no session text to plan from, the offline plan."""
    if llm.extractive or (not summary and not any(t.strip() for _, t in recent)):
        return offline(query)
    try:
        c = await asyncio.wait_for(llm.complete(SYSTEM, build_prompt(query, summary, recent), max_tokens=600,
                                                json=True, timeout_s=timeout_s), timeout_s)
        return parse_plan(c.text, query)
    except TimeoutError:
        return original(query, "timeout", f"intent analysis exceeded {timeout_s}s")
    except Exception as e:  # noqa: BLE001 - reported in the plan, never raised
        return original(query, "failed", f"{type(e).__name__}: {e}"[:500])
