"""The cross-turn dedup ledger, `{session_uri}/.recall_log.json` (docs/design/context-assembly.md).

The clock is the session's monotonic message counter. A URI served at clock `t` with a real
tier is cooled while `0 <= clock - t < dedup_turns`; a bare-URI entry never cools (it lost to
the budget, the reader has not seen it). Malformed records are coerced on read and dropped on
the next write; records ahead of the clock (left by a rotation) are ignored and dropped. A
write keeps records younger than 4 x the window and at most 500 URIs, newest first.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

NAME = ".recall_log.json"
MAX_URIS = 500
WINDOW_KEEP = 4
TIERS = frozenset({"abstract", "overview", "full"})


@dataclass(frozen=True, slots=True)
class Record:
    """One ledger entry: the turn a URI was served at, at which tier, and when."""

    turn: int
    detail: str
    ts: float


def _int(v: Any) -> int | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v if v >= 0 else None
    if isinstance(v, float) and v.is_integer() and v >= 0:
        return int(v)
    if isinstance(v, str) and v.isdigit():
        return int(v)
    return None


def parse(raw: Any) -> tuple[dict[str, Record], int]:
    """Whatever is on disk -> (valid records, how many were malformed). Never raises."""
    records = raw.get("records") if isinstance(raw, dict) else None
    if not isinstance(records, dict):
        return {}, 1 if raw is not None else 0
    out: dict[str, Record] = {}
    bad = 0
    for uri, rec in records.items():
        if not isinstance(uri, str) or not uri.startswith("viking://") or not isinstance(rec, dict):
            bad += 1
            continue
        turn = _int(rec.get("turn"))
        detail = rec.get("detail")
        ts = rec.get("ts", 0.0)
        if turn is None or detail not in TIERS:
            bad += 1
            continue
        out[uri] = Record(turn=turn, detail=str(detail),
                          ts=float(ts) if isinstance(ts, (int, float)) and not isinstance(ts, bool) else 0.0)
    return out, bad


def cooled(records: dict[str, Record], clock: int, window: int) -> set[str]:
    if window <= 0:
        return set()
    return {u for u, r in records.items() if r.turn <= clock and clock - r.turn < window}


def update(records: dict[str, Record], served: list[tuple[str, str]], clock: int, window: int,
           now: float) -> dict[str, Record]:
    """The ledger after serving `served` [(uri, tier)] at `clock`."""
    keep = {u: r for u, r in records.items() if r.turn <= clock and clock - r.turn < WINDOW_KEEP * max(1, window)}
    for uri, tier in served:
        if tier in TIERS:
            keep[uri] = Record(turn=clock, detail=tier, ts=now)
    newest = sorted(keep.items(), key=lambda kv: (-kv[1].turn, -kv[1].ts, kv[0]))[:MAX_URIS]
    return dict(newest)


def dump(records: dict[str, Record]) -> dict[str, Any]:
    return {"version": 1, "records": {u: {"turn": r.turn, "detail": r.detail, "ts": r.ts} for u, r in records.items()}}
