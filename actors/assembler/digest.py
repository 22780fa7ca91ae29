"""L3 digest rewrite (docs/design/context-assembly.md): the assembled block pressed into bullets that
each cite the `viking://` URIs they draw on. A bullet citing nothing, or citing a URI that was
not served, is dropped. The exact answer NO_RELEVANT_MEMORY means nothing here is relevant."""

from __future__ import annotations

import re

from skald.actors.text import extract

NO_RELEVANT = "NO_RELEVANT_MEMORY"
SESSION_SLICE_CHARS = 3_000
_URI = re.compile(r"viking://[^\s\])>,;\"'`<]+")
_BULLET = re.compile(r"^\s*(?:[-*•]|\d+[.)])\s+(.*\S)\s*$")

SYSTEM = f"""You condense retrieved memories for an AI agent. Write at most {{n}} short bullets that help
with the user's request. Every bullet must end with the viking:// URI(s) it draws on in square
brackets, copied exactly from the uri attributes. Use only facts from the memories. If none of
them is relevant to the request, answer exactly {NO_RELEVANT} and nothing else."""


def prompt(query: str, rendered: str, session_slice: str) -> str:
    parts = [f"## Request\n{query}"]
    if session_slice:
        parts.append(f"## Conversation so far\n{session_slice[:SESSION_SLICE_CHARS]}")
    parts.append(f"## Memories\n{rendered}")
    return "\n\n".join(parts)


def session_slice(overview: str, recent_user: list[str]) -> str:
    """Stable products first (the archive overview), then recent user messages; hard-capped."""
    out = overview.strip()[: SESSION_SLICE_CHARS * 2 // 3]
    for text in reversed(recent_user):
        line = f"\n[user]: {' '.join(text.split())}"
        if len(out) + len(line) > SESSION_SLICE_CHARS:
            break
        out += line
    return out.strip()


def normalise(text: str, served: set[str], max_bullets: int) -> str:
    """Keep bullets whose citations are all served URIs (and that cite at least one)."""
    kept: list[str] = []
    for line in text.splitlines():
        m = _BULLET.match(line)
        if not m:
            continue
        body = m.group(1)
        cited = [u.rstrip(".:!?") for u in _URI.findall(body)]
        if not cited or any(u not in served for u in cited):
            continue
        kept.append(f"- {body}")
        if len(kept) >= max_bullets:
            break
    return "\n".join(kept)


def is_no_relevant(text: str) -> bool:
    return text.strip().strip("`").strip() == NO_RELEVANT


def extractive(entries: list[tuple[str, str]], max_bullets: int) -> str:
    """No model: one bullet per served entry with text (its lead sentences), citing its URI."""
    out = []
    for uri, text in entries:
        lead = extract.cut_sentences(extract.first_paragraph(text) or text, 200)
        if lead:
            out.append(f"- {lead} [{uri}]")
        if len(out) >= max_bullets:
            break
    return "\n".join(out)
