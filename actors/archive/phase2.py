"""Phase 2 as pure functions: the one model input, its parsing, the extractive default, the
checkpoint records. The model sees `<checkpoint_source index=...>` markers only, never ids,
budgets or URIs; Skald maps summaries back by index (docs/design/sessions.md, the model's contract)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from skald.actors.text import dates, extract, facts
from skald.actors.text.llmjson import json_object
from skald.messages.sessions import ContextPart, Message, TextPart, ToolPart
from skald.store import archive_state
from skald.store.session_meta import Checkpoint
from skald.store.tokens import estimate_tokens

__all__ = ["estimate_tokens"]

MEMORY_CATEGORIES = ("events", "entities", "preferences", "experiences", "profile")
TOOL_CHARS_IN_PROMPT = 2_000
# One message is cut here inside a transcript memory (the archive keeps it whole): about 300
# tokens, inside the embedder's window with the previous turn as context.
TURN_CHARS = 1_200
TIMELINE_MAX = 200  # working-memory lines carried from archive to archive (one per archive)
PREVIOUS_OVERVIEW_CHARS = 12_000  # of the previous working memory, in the model's prompt
EXISTING_MAX = 200  # keyed memories listed to the model (category/key: first line), so it updates, not piles up
KEYED = ("entities", "preferences", "experiences")  # merged by key; events are append-only

SYSTEM = """You maintain an AI agent's working memory of a conversation. Update the previous working memory
(if given) with the archived messages: keep its facts unless they changed, add what is new, keep it
concise. Answer with JSON only:
{"overview": "<markdown working memory: goals, decisions, facts, open threads>",
 "checkpoint_summaries": ["<one summary per <checkpoint_source index=N> block, in index order>"],
 "memories": [{"category": "events|entities|preferences|experiences|profile",
               "key": "<entity name | preference topic | experience task>",
               "op": "add|update|delete", "content": "<markdown>"}]}
A checkpoint summary covers intent, key actions, tool results, errors and what is unfinished.
An event memory starts with a '# Summary' section. Entities, preferences and experiences are keyed:
reuse a key from <existing_memories> to update that memory (its whole new text) or delete it, and
do not repeat a fact it already holds. Do not include private reasoning."""


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
    """Phase 2's model answer as parsed: the overview, the checkpoint summaries, the memories."""

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


def format_input(messages: list[Message], requests: list[Request], previous_overview: str = "",
                 existing: list[str] | None = None) -> str:
    """The previous working memory (bounded), the keys of existing memories, then every message
    once; each checkpoint's source range wrapped in its index marker."""
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
    if existing:
        blocks.insert(0, "<existing_memories>\n" + "\n".join(existing[:EXISTING_MAX]) + "\n</existing_memories>")
    if previous_overview.strip():
        blocks.insert(0, f"<previous_working_memory>\n{previous_overview.strip()[:PREVIOUS_OVERVIEW_CHARS]}\n"
                         "</previous_working_memory>")
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
        if not (isinstance(m, dict) and m.get("category") in MEMORY_CATEGORIES):
            continue
        # "merge": the deterministic extractor's lines, added to the memory of their key
        op = m.get("op") if m.get("op") in ("add", "update", "delete", "merge") else "add"
        content = m.get("content") if isinstance(m.get("content"), str) else ""
        if not content.strip() and op != "delete":
            continue
        mem = {"category": m["category"], "content": content.strip(), "op": op}
        if isinstance(m.get("key"), str) and m["key"].strip():
            mem["key"] = m["key"].strip()[:200]
        mems.append(mem)
    return Output(overview=overview.strip(), checkpoint_summaries=[s.strip() for s in sums], memories=mems)


def _text(m: Message) -> str:
    return " ".join(p.text for p in m.parts if isinstance(p, TextPart)).strip()


def message_line(m: Message) -> str:
    """One message as a line of a transcript: its role, its text with relative dates resolved."""
    parts = []
    for p in m.parts:
        if isinstance(p, TextPart) and p.text.strip():
            parts.append(p.text.strip())
        elif isinstance(p, ToolPart):
            parts.append(f"[tool {p.tool_name or p.tool_id}: {extract.cut_sentences(p.tool_output, 200)}]")
        elif isinstance(p, ContextPart) and p.abstract:
            parts.append(f"[context {p.uri}: {extract.cut_sentences(p.abstract, 200)}]")
    text = " ".join(" ".join(parts).split())[:TURN_CHARS]
    if m.created_at:
        text = dates.resolve_relative(text, m.created_at)
    return f"{m.role}: {text}" if text else ""


def transcript_memory(session_id: str, messages: list[Message]) -> dict[str, str] | None:
    """Every archived message findable again, with or without a model: the archive as one
    `events` memory, a line per message (speaker, text, relative dates resolved) under a heading
    for each day, with its session and source message ids. The indexer makes each line a section
    (sections.turns), so recall finds single turns and serves those of one conversation together.
    Named after the session and first message: a replay writes the same file."""
    body: list[str] = []
    ids: list[str] = []
    day = ""
    for m in messages:
        line = message_line(m)
        if not line:
            continue
        d = dates.day(m.created_at) if m.created_at else ""
        if d != day or not body:
            body.append(f"## Conversation on {d}" if d else "## Conversation")
            day = d
        body.append(line)
        ids.append(m.id)
    if not ids:
        return None
    first = "".join(c if c.isalnum() or c in "-_" else "-" for c in ids[0])[:64]
    source = f"Session {session_id}, messages {ids[0]}" + (f" to {ids[-1]}." if len(ids) > 1 else ".")
    title = body[0][3:]
    return {"category": "events", "name": f"conversation_{session_id[:48]}_{first}.md",
            "content": "\n".join([f"# {title}", source, "", *body[1:]]) + "\n"}


def timeline(overview: str) -> list[str]:
    """The `## Timeline` lines of a working memory written by `extractive`."""
    m = re.search(r"^## Timeline\s*$", overview, flags=re.M)
    if not m:
        return []
    rest = overview[m.end():]
    nxt = re.search(r"^## ", rest, flags=re.M)
    body = rest[: nxt.start()] if nxt else rest
    return [ln for ln in body.splitlines() if ln.startswith("- ")]


def extractive(messages: list[Message], requests: list[Request], previous_overview: str = "") -> Output:
    """No model: a real extract. The working memory carries a timeline (one line per archive,
    accumulated from the previous overview, bounded) and this archive's requests and replies; each
    checkpoint lists its steps' first sentences and tool outcomes. The memories are the archive's
    transcript, verbatim (`transcript_memory`, added by the caller), and the preferences and
    entities a deterministic extractor finds (`facts`), each keyed to merge into its memory."""
    asks = [extract.cut_sentences(t, 200) for m in messages if m.role == "user" and (t := _text(m))]
    said = [extract.cut_sentences(t, 200) for m in messages if m.role == "assistant" and (t := _text(m))]
    tools = [f"{p.tool_name or p.tool_id}: {p.tool_status or 'done'}" for m in messages for p in m.parts
             if isinstance(p, ToolPart)]
    when = next((m.created_at for m in messages if m.created_at), 0.0)
    lead = asks[0] if asks else (said[0] if said else f"{len(messages)} messages")
    line = f"- {dates.day(when) + ': ' if when else ''}{extract.cut_sentences(lead, 160)}"
    lines = [*timeline(previous_overview), line][-TIMELINE_MAX:]
    parts = ["# Working memory (extractive)", "## Timeline\n" + "\n".join(lines)]
    if asks:
        parts.append("## Latest user requests\n" + "\n".join(f"- {a}" for a in asks[-20:]))
    if said:
        parts.append("## Latest assistant replies\n" + "\n".join(f"- {s}" for s in said[-20:]))
    if tools:
        parts.append("## Tools used\n" + "\n".join(f"- {t}" for t in tools[-20:]))
    by_id = {m.id: m for m in messages}
    sums = []
    for r in requests:
        steps = [by_id[i] for i in r.source_message_ids if i in by_id]
        lines_ = [extract.cut_sentences(t, 160) for m in steps if (t := _text(m))]
        lines_ += [f"{p.tool_name or p.tool_id} -> {extract.cut_sentences(p.tool_output, 120)}"
                   for m in steps for p in m.parts if isinstance(p, ToolPart)]
        sums.append("; ".join(lines_) or f"{len(steps)} earlier steps")
    return Output(overview="\n\n".join(parts), checkpoint_summaries=sums, memories=fact_memories(messages))


def fact_memories(messages: list[Message]) -> list[dict[str, str]]:
    """The deterministic extractor's preferences and entities as keyed memories to merge: the
    lines of each (category, key), dated, with their message ids."""
    said = [facts.Said(m.id, m.role, dates.resolve_relative(t, m.created_at) if m.created_at else t, m.created_at)
            for m in messages if (t := _text(m))]
    return [{"category": cat, "key": key, "op": "merge", "content": "\n".join(lines)}
            for (cat, key), lines in facts.grouped(facts.extract(said)).items()]


SOURCE = "_Source: "


def with_source(content: str, session_id: str, ids: list[str]) -> str:
    """A model's memory with where it came from: the session and the archived messages."""
    if not ids:
        return content
    span = ids[0] if len(ids) == 1 else f"{ids[0]} to {ids[-1]}"
    return f"{without_source(content).rstrip()}\n\n{SOURCE}session {session_id}, messages {span}._"


def without_source(text: str) -> str:
    """A memory's text without its source line (what two versions of a fact are compared on)."""
    return "\n".join(ln for ln in text.splitlines() if not ln.startswith(SOURCE)).rstrip()


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


def bound_roll_forward(candidates: list[archive_state.ArchiveState],
                       max_tokens: int) -> tuple[list[archive_state.ArchiveState], list[archive_state.ArchiveState]]:
    """(rolled, left out): the newest failed archives whose raw fits `max_tokens`, in order; the
    older ones wait (and count an attempt) so one Phase 2 prompt never grows without bound."""
    rolled: list[archive_state.ArchiveState] = []
    used = 0
    for s in reversed(candidates):
        cost = sum(estimate_tokens(message_line(m)) for m in s.listing.messages)
        if used + cost > max_tokens:
            break
        rolled.append(s)
        used += cost
    keep = {id(s) for s in rolled}
    return list(reversed(rolled)), [s for s in candidates if id(s) not in keep]


def memory_name(key: str) -> str:
    """A keyed memory's file name: the same entity, topic or task is always the same file."""
    s = re.sub(r"[^a-z0-9_-]+", "-", key.strip().lower()).strip("-")[:80]
    return f"{s or 'memory'}.md"


def key_of(mem: dict[str, str]) -> str:
    """The model's key, or the memory's first line (its heading or its first words)."""
    if mem.get("key"):
        return mem["key"]
    first = next((ln.strip("# ").strip() for ln in mem.get("content", "").splitlines() if ln.strip()), "")
    return " ".join(first.split()[:8])

