"""Read-only views of a session directory, for actors other than the session actor.

Layout (seed 001): `{session}/messages.jsonl` (live messages, one JSON object per line) and
`{session}/history/archive_NNN/` whose `.done` marks a completed archive with `.overview.md`.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

_ARCHIVE = re.compile(r"^archive_(\d+)$")


def latest_overview(session: Path) -> str:
    """The overview of the newest completed archive (state from markers only), or ''."""
    hist = session / "history"
    try:
        names = [n for n in hist.iterdir() if _ARCHIVE.match(n.name)]
    except (FileNotFoundError, NotADirectoryError):
        return ""
    for d in sorted(names, key=lambda p: int(_ARCHIVE.match(p.name).group(1)), reverse=True):  # type: ignore[union-attr]
        if (d / ".done").is_file():
            try:
                return (d / ".overview.md").read_text("utf-8", errors="replace")
            except FileNotFoundError:
                return ""
    return ""


def message_text(msg: dict) -> str:
    parts = msg.get("parts")
    if isinstance(parts, list):
        return "\n".join(p.get("text", "") for p in parts if isinstance(p, dict) and p.get("type") == "text"
                         and isinstance(p.get("text"), str))
    content = msg.get("content")
    return content if isinstance(content, str) else ""


def recent_messages(session: Path, n: int) -> list[tuple[str, str]]:
    """The last `n` live messages that carry text, as (role, text); malformed lines are skipped."""
    try:
        lines = (session / "messages.jsonl").read_text("utf-8", errors="replace").splitlines()
    except (FileNotFoundError, NotADirectoryError):
        return []
    out: list[tuple[str, str]] = []
    for line in reversed(lines):
        try:
            msg = json.loads(line)
        except ValueError:
            continue
        if not isinstance(msg, dict):
            continue
        text = message_text(msg)
        if text.strip():
            out.append((str(msg.get("role", "user")), text))
            if len(out) >= n:
                break
    return list(reversed(out))
