"""Dates in conversation text: the day a message was said, and relative dates ("yesterday",
"last week") resolved against it, so a memory read months later still says when things happened.

Deterministic and English-only; what it cannot resolve it leaves as it was.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")


def day(ts: float) -> str:
    """`8 May 2023` for a unix time (UTC: the clock the session recorded)."""
    d = datetime.fromtimestamp(ts, UTC)
    return f"{d.day} {d:%B %Y}"


def _week_of(d: datetime) -> str:
    monday = d - timedelta(days=d.weekday())
    return f"the week of {day(monday.timestamp())}"


def _resolutions(at: datetime) -> list[tuple[re.Pattern[str], str]]:
    out = [
        (r"\byesterday\b", day((at - timedelta(days=1)).timestamp())),
        (r"\btoday\b", day(at.timestamp())),
        (r"\btonight\b", day(at.timestamp())),
        (r"\btomorrow\b", day((at + timedelta(days=1)).timestamp())),
        (r"\blast week\b", _week_of(at - timedelta(days=7))),
        (r"\bthis week\b", _week_of(at)),
        (r"\bnext week\b", _week_of(at + timedelta(days=7))),
        (r"\blast month\b", f"{(at.replace(day=1) - timedelta(days=1)):%B %Y}"),
        (r"\bthis month\b", f"{at:%B %Y}"),
        (r"\blast year\b", str(at.year - 1)),
        (r"\bthis year\b", str(at.year)),
        (r"\bnext year\b", str(at.year + 1)),
        (r"\blast weekend\b", f"the weekend before {day(at.timestamp())}"),
    ]
    for i, name in enumerate(WEEKDAYS):
        back = (at.weekday() - i) % 7 or 7
        out.append((rf"\blast {name}\b", day((at - timedelta(days=back)).timestamp())))
    return [(re.compile(p, re.I), r) for p, r in out]


def resolve_relative(text: str, ts: float) -> str:
    """`I went yesterday` said on 8 May 2023 -> `I went yesterday [7 May 2023]`."""
    at = datetime.fromtimestamp(ts, UTC)
    for pattern, resolved in _resolutions(at):
        text = pattern.sub(lambda m, r=resolved: f"{m.group(0)} [{r}]", text)
    return text
