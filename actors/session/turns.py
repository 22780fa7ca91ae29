"""User Turns and Assistant Steps, and the retention planner (docs/design/sessions.md, retention). Pure.

A Turn starts at a real user query and runs to the next one; a tool-only user message is
transport, not a new Turn. A Step is one assistant message with the tool results that answer
it, and is never split: when input is malformed (a result with no call, a call answered in a
later step) the atom widens instead of separating a call from its result.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import msgspec

from skald.messages.sessions import ContextPart, Message, TextPart, ToolPart
from skald.store.tokens import estimate_tokens

MESSAGE_OVERHEAD_TOKENS = 4  # role and separators a chat template adds per message


def estimate(text: str) -> int:
    return estimate_tokens(text)


def message_tokens(m: Message) -> int:
    total = MESSAGE_OVERHEAD_TOKENS
    for p in m.parts:
        if isinstance(p, TextPart):
            total += estimate_tokens(p.text)
        elif isinstance(p, ContextPart):
            total += estimate_tokens(p.abstract) + estimate_tokens(p.uri)
        elif isinstance(p, ToolPart):
            total += estimate_tokens(p.tool_name) + estimate_tokens(p.tool_output)
            if p.tool_input is not None:
                total += estimate_tokens(msgspec.json.encode(p.tool_input).decode())
    return total


def is_user_query(m: Message) -> bool:
    if m.message_kind is not None:
        return m.message_kind == "user_query"
    if m.role != "user":
        return False
    return any(isinstance(p, (TextPart, ContextPart)) for p in m.parts)


def is_transport(m: Message) -> bool:
    if m.message_kind is not None:
        return m.message_kind == "tool_transport"
    return m.role == "user" and bool(m.parts) and all(isinstance(p, ToolPart) for p in m.parts)


@dataclass(slots=True)
class Step:
    """An assistant message with the tool results that answer it: never split by retention."""

    messages: list[Message] = field(default_factory=list)

    @property
    def ids(self) -> list[str]:
        return [m.id for m in self.messages]

    @property
    def tokens(self) -> int:
        return sum(message_tokens(m) for m in self.messages)


@dataclass(slots=True)
class Turn:
    """A user query and the steps that answer it, up to the next query."""

    anchor: Message | None  # the user query; None for messages before the first one
    steps: list[Step] = field(default_factory=list)

    @property
    def messages(self) -> list[Message]:
        return ([self.anchor] if self.anchor else []) + [m for s in self.steps for m in s.messages]

    @property
    def tokens(self) -> int:
        return (message_tokens(self.anchor) if self.anchor else 0) + sum(s.tokens for s in self.steps)


def _tool_ids(m: Message) -> tuple[set[str], set[str]]:
    """(calls still waiting for a result, results) a message carries, by tool_id."""
    calls, results = set(), set()
    for p in m.parts:
        if isinstance(p, ToolPart) and p.tool_id:
            if m.role == "assistant" and not p.tool_output and p.tool_status in ("", "pending", "running"):
                calls.add(p.tool_id)
            else:
                results.add(p.tool_id)
    return calls, results


def turn_start(messages: Sequence[Message]) -> int:
    """Index where the last Turn begins (its user query; 0 when there is none)."""
    for i in range(len(messages) - 1, -1, -1):
        if is_user_query(messages[i]):
            return i
    return 0


def parse_turns(messages: Sequence[Message]) -> list[Turn]:
    turns: list[Turn] = []
    cur = Turn(anchor=None)
    for m in messages:
        if is_user_query(m):
            if cur.anchor is not None or cur.steps:
                turns.append(cur)
            cur = Turn(anchor=m)
        elif is_transport(m) and cur.steps:
            cur.steps[-1].messages.append(m)
        else:
            # An assistant message opens a step; a transport with no step before it widens into one.
            cur.steps.append(Step([m]))
    if cur.anchor is not None or cur.steps:
        turns.append(cur)
    for t in turns:
        t.steps = _merge_open_calls(t.steps)
    return turns


def _merge_open_calls(steps: list[Step]) -> list[Step]:
    """A call answered in a later step pulls everything up to its result into one step."""
    out: list[Step] = []
    i = 0
    while i < len(steps):
        step = Step(list(steps[i].messages))
        open_calls: set[str] = set()
        for m in step.messages:
            c, r = _tool_ids(m)
            open_calls |= c
            open_calls -= r
        j = i + 1
        while open_calls and j < len(steps):
            later = set()
            for m in steps[j].messages:
                later |= _tool_ids(m)[1]
            if not (later & open_calls) and not any(open_calls & _ids_after(steps, j)):
                break
            for m in steps[j].messages:
                c, r = _tool_ids(m)
                open_calls |= c
                open_calls -= r
            step.messages.extend(steps[j].messages)
            j += 1
        out.append(step)
        i = j
    return out


def _ids_after(steps: list[Step], j: int) -> set[str]:
    ids: set[str] = set()
    for s in steps[j:]:
        for m in s.messages:
            ids |= _tool_ids(m)[1]
    return ids


class RetentionPlan(msgspec.Struct, kw_only=True):
    """Which live messages a commit archives and which it keeps, and the checkpoint an oversized turn gets."""

    archive_messages: list[str]
    retained_messages: list[str]
    turn_anchor: str | None = None
    checkpoint_source_message_ids: list[str] = []
    raw_tail_start_message_id: str | None = None
    estimated_active_tokens: int = 0
    budget_exceeded: bool = False
    mode: str = "turn_budget"


def plan_retention(messages: Sequence[Message], turn_count: int, token_budget: int,
                   min_raw_tail_steps: int = 1) -> RetentionPlan:
    """Keep the newest whole Turns within `turn_count` and `token_budget`; an oversized newest Turn
    keeps its user anchor, a checkpoint of its early steps, and its most recent steps.

    Priority: user anchor > final assistant > recent steps > earlier steps > earlier turns.
    """
    turns = parse_turns(messages)
    kept: list[Turn] = []
    used = 0
    for t in reversed(turns):
        if len(kept) >= turn_count or used + t.tokens > token_budget:
            break
        kept.append(t)
        used += t.tokens
    kept.reverse()
    if kept or not turns or turn_count == 0:
        retained = [m.id for t in kept for m in t.messages]
        keep = set(retained)
        return RetentionPlan(archive_messages=[m.id for m in messages if m.id not in keep],
                             retained_messages=retained, estimated_active_tokens=used)
    # The newest Turn alone is over budget: anchor + raw tail of steps, the rest to a checkpoint.
    last = turns[-1]
    anchor_tokens = message_tokens(last.anchor) if last.anchor else 0
    tail: list[Step] = []
    used = anchor_tokens
    for i, step in enumerate(reversed(last.steps)):
        must = i < max(1, min_raw_tail_steps)  # the final step, and the configured minimum tail
        if not must and used + step.tokens > token_budget:
            break
        tail.append(step)
        used += step.tokens
    tail.reverse()
    tail_ids = [m.id for s in tail for m in s.messages]
    source = [m.id for s in last.steps[: len(last.steps) - len(tail)] for m in s.messages]
    retained = ([last.anchor.id] if last.anchor else []) + tail_ids
    keep = set(retained)
    return RetentionPlan(
        archive_messages=[m.id for m in messages if m.id not in keep], retained_messages=retained,
        turn_anchor=last.anchor.id if last.anchor else None, checkpoint_source_message_ids=source,
        raw_tail_start_message_id=tail_ids[0] if tail_ids else None, estimated_active_tokens=used,
        budget_exceeded=used > token_budget)


def plan_keep_recent(messages: Sequence[Message], keep: int) -> RetentionPlan:
    """Legacy `keep_recent_count`: the last N messages, widened so no Step is split (0 = archive all)."""
    if keep <= 0:
        return RetentionPlan(archive_messages=[m.id for m in messages], retained_messages=[], mode="keep_recent")
    cut = max(0, len(messages) - keep)
    starts: set[int] = set()
    pos = 0
    for t in parse_turns(messages):
        if t.anchor is not None:
            starts.add(pos)
            pos += 1
        for s in t.steps:
            starts.add(pos)
            pos += len(s.messages)
    while cut > 0 and cut not in starts:
        cut -= 1
    retained = [m.id for m in messages[cut:]]
    return RetentionPlan(archive_messages=[m.id for m in messages[:cut]], retained_messages=retained,
                         estimated_active_tokens=sum(message_tokens(m) for m in messages[cut:]),
                         mode="keep_recent")


def fit_to_budget(messages: Sequence[Message], budget_tokens: int) -> tuple[list[Message], int]:
    """The newest messages that fit `budget_tokens`, whole: a user anchor or an assistant step
    (with its tool results) is kept or dropped as one; (kept, messages dropped)."""
    atoms: list[list[Message]] = []
    for t in parse_turns(messages):
        if t.anchor is not None:
            atoms.append([t.anchor])
        atoms += [list(s.messages) for s in t.steps]
    kept: list[list[Message]] = []
    used = 0
    for atom in reversed(atoms):
        cost = sum(message_tokens(m) for m in atom)
        if used + cost > budget_tokens:
            break
        kept.append(atom)
        used += cost
    out = [m for atom in reversed(kept) for m in atom]
    return out, len(messages) - len(out)

