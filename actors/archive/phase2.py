"""Phase 2 as pure functions: the one model input, its parsing, the extractive default, the
checkpoint records. The model sees `<checkpoint_source index=...>` markers only, never ids,
budgets or URIs; Skald maps summaries back by index (seed 001, "minimal LLM contract")."""

from __future__ import annotations

import json
from dataclasses import dataclass

from skald.actors.text import extract
from skald.actors.text.llmjson import json_object
from skald.messages.sessions import ContextPart, Message, TextPart, ToolPart
from skald.store.session_meta import Checkpoint
from skald.store.tokens import estimate_tokens

__all__ = ["estimate_tokens"]

MEMORY_CATEGORIES = ("events", "entities", "preferences", "experiences", "profile")
TOOL_CHARS_IN_PROMPT = 2_000

SYSTEM = """You maintain an AI agent's working memory of a conversation. Read the archived messages and
answer with JSON only:
{"overview": "<markdown working memory: goals, decisions, facts, open threads>",
 "checkpoint_summaries": ["<one summary per <checkpoint_source index=N> block, in index order>"],
 "memories": [{"category": "events|entities|preferences|experiences|profile", "content": "<markdown>"}]}
A checkpoint summary covers intent, key actions, tool results, errors and what is unfinished.
An event memory starts with a '# Summary' section. Do not include private reasoning."""


@dataclass(slots=True)
class Request:
    """A checkpoint to write: which messages it replaces and whose turn it belongs to."""

    index: int
    turn_anchor_message_id: str | None
    source_message_ids: list[str]
    budget_tokens: int
    archive_id: str


@dataclass(slots=True)
class Output:
    overview: str
    checkpoint_summaries: list[str]
    memories: list[dict[str, str]]


def _render(m: Message) -> str:
    lines = []
    for p in m.parts:
        if isinstance(p, TextPart):
            lines.append(f"[{m.role.capitalize()}]\n{p.text}")
        elif isinstance(p, ContextPart):
            lines.append(f"[{m.role.capitalize()} context]\n{p.abstract}")
        elif isinstance(p, ToolPart):
            out = p.tool_output[:TOOL_CHARS_IN_PROMPT]
            inp = json.dumps(p.tool_input, ensure_ascii=False)[:500] if p.tool_input is not None else ""
            lines.append(f"[tool:{p.tool_name or p.tool_id}] {inp}\n{out}".rstrip())
    return "\n".join(lines)


def format_input(messages: list[Message], requests: list[Request]) -> str:
    """Every message once; each checkpoint's source range wrapped in its index marker."""
    where: dict[str, int] = {}
    for r in requests:
        for mid in r.source_message_ids:
            where[mid] = r.index
    blocks: list[str] = []
    open_idx: int | None = None
    for m in messages:
        idx = where.get(m.id)
        if idx != open_idx:
            if open_idx is not None:
                blocks.append("</checkpoint_source>")
            if idx is not None:
                blocks.append(f'<checkpoint_source index="{idx}">')
            open_idx = idx
        blocks.append(_render(m))
    if open_idx is not None:
        blocks.append("</checkpoint_source>")
    return "\n\n".join(blocks)


def parse_output(text: str, n_requests: int) -> Output:
    """The model's JSON; raises ValueError on anything the archive cannot trust."""
    data = json_object(text)
    overview = data.get("overview")
    if not isinstance(overview, str) or not overview.strip():
        raise ValueError("answer has no overview")
    sums = data.get("checkpoint_summaries", [])
    if not isinstance(sums, list) or len(sums) != n_requests:
        raise ValueError(f"expected {n_requests} checkpoint summaries, got "
                         f"{len(sums) if isinstance(sums, list) else 'none'}")
    if any(not isinstance(s, str) or not s.strip() for s in sums):
        raise ValueError("a checkpoint summary is empty")
    mems = []
    for m in data.get("memories", []) or []:
        if isinstance(m, dict) and m.get("category") in MEMORY_CATEGORIES and isinstance(m.get("content"), str) \
                and m["content"].strip():
            mems.append({"category": m["category"], "content": m["content"].strip()})
    return Output(overview=overview.strip(), checkpoint_summaries=[s.strip() for s in sums], memories=mems)


def _text(m: Message) -> str:
    return " ".join(p.text for p in m.parts if isinstance(p, TextPart)).strip()


def extractive(messages: list[Message], requests: list[Request]) -> Output:
    """No model: a real extract. Overview lists what the user asked and what came back; each
    checkpoint lists its steps' first sentences and tool outcomes; one event memory per archive."""
    asks = [extract.cut_sentences(t, 200) for m in messages if m.role == "user" and (t := _text(m))]
    said = [extract.cut_sentences(t, 200) for m in messages if m.role == "assistant" and (t := _text(m))]
    tools = [f"{p.tool_name or p.tool_id}: {p.tool_status or 'done'}" for m in messages for p in m.parts
             if isinstance(p, ToolPart)]
    parts = ["# Working memory (extractive)"]
    if asks:
        parts.append("## User requests\n" + "\n".join(f"- {a}" for a in asks[-20:]))
    if said:
        parts.append("## Assistant replies\n" + "\n".join(f"- {s}" for s in said[-20:]))
    if tools:
        parts.append("## Tools used\n" + "\n".join(f"- {t}" for t in tools[-20:]))
    by_id = {m.id: m for m in messages}
    sums = []
    for r in requests:
        steps = [by_id[i] for i in r.source_message_ids if i in by_id]
        lines = [extract.cut_sentences(t, 160) for m in steps if (t := _text(m))]
        lines += [f"{p.tool_name or p.tool_id} -> {extract.cut_sentences(p.tool_output, 120)}"
                  for m in steps for p in m.parts if isinstance(p, ToolPart)]
        sums.append("; ".join(lines) or f"{len(steps)} earlier steps")
    mems = []
    if asks:
        summary = extract.cut_sentences(" ".join(asks), 400)
        mems.append({"category": "events", "content": f"# Summary\n\n{summary}\n\n# Details\n\n"
                     + "\n".join(f"- {a}" for a in asks[:20])})
    return Output(overview="\n\n".join(parts), checkpoint_summaries=sums, memories=mems)


def fit_tokens(text: str, budget: int) -> str:
    """Deterministic cut to a token budget (by the shared estimator), at a sentence if possible."""
    if estimate_tokens(text) <= budget:
        return text
    lo, hi = 0, len(text)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if estimate_tokens(text[:mid]) <= budget:
            lo = mid
        else:
            hi = mid - 1
    return extract.cut_sentences(text[:lo], lo) if lo else ""


def checkpoint_records(requests: list[Request], summaries: list[str]) -> list[Checkpoint]:
    out = []
    for r, s in zip(requests, summaries, strict=True):
        text = fit_tokens(s, r.budget_tokens)
        out.append(Checkpoint(turn_anchor_message_id=r.turn_anchor_message_id, source_message_ids=r.source_message_ids,
                              abstract=text, estimated_tokens=estimate_tokens(text), archive_id=r.archive_id))
    return out
