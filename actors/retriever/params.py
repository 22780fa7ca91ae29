"""Validation and normalisation of find parameters (docs/design/retrieval-api.md). Pure: no I/O, clock passed in."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from skald.messages.errors import InvalidArgument
from skald.messages.index import IndexRow
from skald.messages.search import FindRequest

_REL = re.compile(r"^(\d+)\s*([smhdw])$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_DECAY = re.compile(r"^(\d+)([mhd])$")
# Events older than the protection window lose half their score every 30 days (docs/usage.md, Retrieval).
EVENT_HALF_LIFE_S = 30 * 86400.0
EVENT_DECAY_OVERFETCH = 3


def parse_levels(level: int | str | list[int] | None) -> frozenset[int] | None:
    if level is None:
        return None
    if isinstance(level, bool):
        raise InvalidArgument("level must be 0, 1, 2 or a list of them", {"field": "level"})
    if isinstance(level, int):
        vals = [level]
    elif isinstance(level, str):
        try:
            vals = [int(x) for x in level.replace(" ", "").split(",") if x != ""]
        except ValueError as e:
            raise InvalidArgument(f"level {level!r} is not a list of levels", {"field": "level"}) from e
    else:
        vals = list(level)
    if not vals or any(v not in (0, 1, 2) for v in vals):
        raise InvalidArgument("level must be 0, 1, 2 or a list of them", {"field": "level", "value": level})
    return frozenset(vals)


_DATE_ONLY = re.compile(r"^\d{4}-\d{2}-\d{2}$")


def parse_time(value: str | None, field: str, now: float) -> float | None:
    """`2h` (ago), ISO 8601, or `YYYY-MM-DD`; values without a zone are UTC."""
    if value is None or value == "":
        return None
    v = value.strip()
    if m := _REL.match(v):
        return now - int(m.group(1)) * _UNIT_S[m.group(2)]
    try:
        dt = datetime.fromisoformat(v.replace("Z", "+00:00"))
    except ValueError as e:
        raise InvalidArgument(f"{field} must be like 2h, 30m, 7d or an ISO 8601 date", {"field": field}) from e
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    if field == "until" and _DATE_ONLY.match(v):
        # A named day is included whole (OpenViking's reading): `until: 2026-03-11` ends at its last instant.
        return dt.timestamp() + 86_400 - 1e-3
    return dt.timestamp()


def parse_decay(value: str | None) -> float | None:
    """The events protection window in seconds (`"0"`, `"7d"`, `Xm/Xh/Xd`); None = off."""
    if value is None:
        return None
    v = value.strip()
    if v == "0":
        return 0.0
    m = _DECAY.match(v)
    if not m:
        raise InvalidArgument("events_time_decay_protection must be \"0\" or a non-negative Xm, Xh or Xd",
                              {"field": "events_time_decay_protection"})
    return int(m.group(1)) * _UNIT_S[m.group(2)]


def time_score(updated_at: float, now: float, protection_s: float) -> float:
    if not updated_at:
        return 1.0
    age = abs(now - updated_at)
    if age <= protection_s:
        return 1.0
    return math.exp(-math.log(2) * (age - protection_s) / EVENT_HALF_LIFE_S)


def is_event(row: IndexRow) -> bool:
    return "memory_type=events" in row.tags


def context_types(ct: str | list[str] | None) -> frozenset[str] | None:
    if ct is None:
        return None
    vals = [ct] if isinstance(ct, str) else list(ct)
    if not vals:
        return None
    return frozenset(vals)


def tag_predicate(tags: tuple[str, ...]) -> Callable[[IndexRow], bool] | None:
    if not tags:
        return None
    want = frozenset(tags)
    return lambda row: want.issubset(row.tags)


_FIELDS = {"uri", "parent_uri", "level", "context_type", "category", "owner", "created_at", "updated_at",
           "active_count", "tags", "account"}
_RANGE_OPS = {"gt", "gte", "lt", "lte"}


def compile_filter(spec: dict[str, Any] | None) -> Callable[[IndexRow], bool] | None:
    """A metadata filter over index fields.

    Forms: `{"category": "events"}`, `{"level": [0, 1]}`, `{"updated_at": {"gte": 1.7e9}}`,
    `{"and": [...]}`, `{"or": [...]}`, `{"not": {...}}`, and OpenViking's
    `{"op": "must" | "must_not", "field": F, "conds": [...]}` / `{"op": "range", "field": F, "gte": ...}`.
    """
    if spec is None:
        return None
    if not isinstance(spec, dict) or not spec:
        raise InvalidArgument("filter must be a non-empty object", {"field": "filter"})
    return _compile(spec, 0)


def _field_value(row: IndexRow, field: str) -> Any:
    return getattr(row, field)


def _compile(spec: Any, depth: int) -> Callable[[IndexRow], bool]:
    if depth > 16:
        raise InvalidArgument("filter nested too deeply", {"field": "filter"})
    if not isinstance(spec, dict):
        raise InvalidArgument("filter clauses must be objects", {"field": "filter"})
    if "op" in spec:
        op = spec["op"]
        if op in ("and", "or"):
            subs = [_compile(c, depth + 1) for c in _list(spec.get("conds"))]
            return (lambda r: all(f(r) for f in subs)) if op == "and" else (lambda r: any(f(r) for f in subs))
        field = _field(spec.get("field"))
        if op in ("must", "must_not"):
            vals = _list(spec.get("conds"))
            pos = _member(field, vals)
            return pos if op == "must" else (lambda r: not pos(r))
        if op == "range":
            return _range(field, {k: v for k, v in spec.items() if k in _RANGE_OPS})
        raise InvalidArgument(f"unknown filter op {op!r}", {"field": "filter"})
    preds: list[Callable[[IndexRow], bool]] = []
    for key, val in spec.items():
        if key == "and":
            subs = [_compile(c, depth + 1) for c in _list(val)]
            preds.append(lambda r, s=subs: all(f(r) for f in s))
        elif key == "or":
            subs = [_compile(c, depth + 1) for c in _list(val)]
            preds.append(lambda r, s=subs: any(f(r) for f in s))
        elif key == "not":
            sub = _compile(val, depth + 1)
            preds.append(lambda r, s=sub: not s(r))
        elif isinstance(val, dict):
            preds.append(_range(_field(key), val))
        else:
            preds.append(_member(_field(key), val if isinstance(val, list) else [val]))
    return lambda r: all(p(r) for p in preds)


def _list(v: Any) -> list[Any]:
    if not isinstance(v, list):
        raise InvalidArgument("filter conds must be a list", {"field": "filter"})
    return v


def _field(name: Any) -> str:
    if name not in _FIELDS:
        raise InvalidArgument(f"unknown filter field {name!r}", {"field": "filter", "fields": sorted(_FIELDS)})
    return str(name)


def _member(field: str, vals: list[Any]) -> Callable[[IndexRow], bool]:
    if field == "tags":
        want = set(vals)
        return lambda r: bool(want.intersection(r.tags))
    allowed = set(vals) if all(isinstance(v, (str, int, float)) for v in vals) else None
    if allowed is None:
        raise InvalidArgument("filter values must be strings or numbers", {"field": "filter"})
    return lambda r: _field_value(r, field) in allowed


def _range(field: str, ops: dict[str, Any]) -> Callable[[IndexRow], bool]:
    if not ops or set(ops) - _RANGE_OPS or not all(isinstance(v, (int, float)) for v in ops.values()):
        raise InvalidArgument("range filters take numeric gt/gte/lt/lte", {"field": "filter"})

    def ok(r: IndexRow) -> bool:
        v = _field_value(r, field)
        if not isinstance(v, (int, float)):
            return False
        return (("gt" not in ops or v > ops["gt"]) and ("gte" not in ops or v >= ops["gte"])
                and ("lt" not in ops or v < ops["lt"]) and ("lte" not in ops or v <= ops["lte"]))

    return ok


@dataclass(slots=True)
class Common:
    """find's parameters, validated once for find and search alike."""

    now: float
    levels: frozenset[int] | None
    context_types: frozenset[str] | None
    since: float | None
    until: float | None
    decay: float | None
    predicate: Callable[[IndexRow], bool] | None
    limit: int


def common(req: FindRequest, now: float, check_tags: Callable[[Any], tuple[str, ...]]) -> Common:
    if req.image_url is not None:
        raise InvalidArgument("image queries need a multimodal embedding model; this deployment has none",
                              {"field": "image_url"})
    since = parse_time(req.since, "since", now)
    until = parse_time(req.until, "until", now)
    if since is not None and until is not None and since > until:
        raise InvalidArgument("since is after until", {"field": "since"})
    tags = check_tags(req.tags)
    preds = [p for p in (tag_predicate(tags), compile_filter(req.filter)) if p is not None]
    pred = (lambda r: all(p(r) for p in preds)) if preds else None
    return Common(now=now, levels=parse_levels(req.level), context_types=context_types(req.context_type),
                  since=since, until=until, decay=parse_decay(req.events_time_decay_protection), predicate=pred,
                  limit=req.node_limit or req.limit)
