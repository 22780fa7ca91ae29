"""Tool-output externalisation over a whole logical Turn (docs/design/sessions.md). Pure: decides, does not write.

A single output over 20,000 characters always goes out; then, while the Turn's outputs still total
100,000 characters or more, the largest remaining ones go out. Ten steps of 10,000 characters
each no longer slip under a per-message limit.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from skald.actors.session.turns import parse_turns
from skald.messages.sessions import Message, ToolPart

SINGLE_OUTPUT_MAX = 20_000
TURN_OUTPUTS_MAX = 100_000
PREVIEW_CHARS = 1_000


@dataclass(frozen=True, slots=True)
class Externalize:
    """One tool output chosen to move to a file: which message and part, and its size."""

    message_id: str
    part_index: int
    tool_id: str
    chars: int

    @property
    def filename(self) -> str:
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in (self.tool_id or "tool"))
        return f"{self.message_id}__{self.part_index}__{safe}.txt"


def plan_externalization(messages: Sequence[Message]) -> list[Externalize]:
    out: list[Externalize] = []
    for turn in parse_turns(messages):
        outputs = [Externalize(m.id, i, p.tool_id, len(p.tool_output)) for m in turn.messages
                   for i, p in enumerate(m.parts)
                   if isinstance(p, ToolPart) and p.tool_output_uri is None and p.tool_output]
        chosen = {e for e in outputs if e.chars > SINGLE_OUTPUT_MAX}
        total = sum(e.chars for e in outputs if e not in chosen)
        for e in sorted(outputs, key=lambda e: -e.chars):
            if total < TURN_OUTPUTS_MAX:
                break
            if e not in chosen:
                chosen.add(e)
                total -= e.chars
        out.extend(e for e in outputs if e in chosen)
    return out


def has_outputs(m: Message) -> bool:
    """Whether a message carries a tool output still inline (the only thing a Turn's rule weighs)."""
    return any(isinstance(p, ToolPart) and p.tool_output and p.tool_output_uri is None for p in m.parts)


def preview(text: str) -> str:
    return text[:PREVIEW_CHARS] + ("…" if len(text) > PREVIEW_CHARS else "")
