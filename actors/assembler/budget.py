"""Tier filling under a token budget (docs/design/context-assembly.md): breadth first, then depth. No I/O, no model.

1. Floor: in score order every entry lands on the first tier of its chain (its start tier,
   then down its ladder to the bare URI) that is available, within the per-entry cap and
   within what is left; an entry that cannot even be a bare URI is dropped. A section of a long
   document is bounded when it is cut, so it is not capped: the best passages are served whole
   before weaker ones, which is what answers a question.
2. Overview upgrades, then full upgrades, in score order, each within the cap.
3. One spare pass: with budget left, the deepest tier an entry may reach that fits, bounded
   by the budget alone (not the cap).

An oversized tier steps down; nothing is ever truncated. Costs are measured on the rendered
element, so the budget is kept on the text the model will read.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from skald.actors.assembler import render
from skald.actors.assembler import tiers as tiers_mod
from skald.store.tokens import estimate_units

_SEP = estimate_units(render.SEPARATOR)


@dataclass(slots=True)
class Slot:
    """A candidate with the texts of each tier it can be served at, and their token costs."""

    uri: str
    category: str
    score: float
    is_dir: bool
    start: str
    deepest: str
    texts: dict[str, str]  # tier -> text; a missing tier is unavailable ("uri" is always available)
    origin: str = "self"
    location: str = ""
    bounded: bool = False  # a section of a long document: cut to size when indexed, so no cap applies
    _costs: dict[str, int] = field(default_factory=dict)
    _units: dict[str, float] = field(default_factory=dict)
    _head: str = ""

    def head(self) -> str:
        """The rendered element's opening, built once: it is priced, then rendered."""
        if not self._head:
            self._head = render.head(self.uri, self.category, self.score, self.origin, self.location)
        return self._head

    def cost(self, tier: str) -> int | None:
        """Tokens of this entry rendered at `tier` (plus its separator); None if unavailable.
        Additive estimates: the head is measured once, each body once."""
        c = self._costs.get(tier)
        if c is not None:
            return c
        if tier != "uri" and not self.texts.get(tier):
            return None
        head = self._units.get("head")
        if head is None:
            head = self._units["head"] = estimate_units(self.head()) + _SEP
        units, has_body = render.body_units(self.texts[tier]) if tier != "uri" else (0.0, False)
        c = self._costs[tier] = math.ceil(head + render.close_units(tier, has_body) + units)
        return c


@dataclass(slots=True)
class Fill:
    """The budget's decision: the tier of each slot (or none), and what the block costs."""

    tiers: list[str | None]  # per slot: the tier served, or None when dropped
    per_entry_cap: int
    floor_tokens: int
    used_tokens: int
    overview_upgrades: int = 0
    full_upgrades: int = 0
    spare_upgrades: int = 0
    wanted: list[str] = field(default_factory=list)  # per slot: the first tier of its chain it has


def per_entry_cap(max_tokens: int, candidates: int) -> int:
    return max(1, (max_tokens // max(1, candidates)) * 2)


def fill(slots: list[Slot], max_tokens: int) -> Fill:
    """`slots` in score order. Pure: the same slots and budget always give the same plan."""
    cap = per_entry_cap(max_tokens, len(slots))
    left = max_tokens
    chosen: list[str | None] = [None] * len(slots)
    wanted: list[str] = ["uri"] * len(slots)
    for i, s in enumerate(slots):
        first = True
        for tier in tiers_mod.chain(s.category, s.is_dir, s.start):
            c = s.cost(tier)
            if c is None:
                continue
            if first:
                wanted[i], first = tier, False
            if (tier != "uri" and c > cap and not s.bounded) or c > left:
                continue
            chosen[i] = tier
            left -= c
            break
    out = Fill(chosen, cap, max_tokens - left, 0, wanted=wanted)

    def upgrade(i: int, tier: str, capped: bool) -> bool:
        nonlocal left
        s, cur = slots[i], chosen[i]
        assert cur is not None
        c, now = s.cost(tier), s.cost(cur)
        if c is None or now is None or (capped and c > cap and not s.bounded) or c - now > left:
            return False
        chosen[i] = tier
        left -= c - now
        return True

    for target in ("overview", "full"):
        for i, s in enumerate(slots):
            cur = chosen[i]
            if cur is None or target not in tiers_mod.deeper(s.category, s.is_dir, cur, s.deepest):
                continue
            if upgrade(i, target, capped=True):
                if target == "overview":
                    out.overview_upgrades += 1
                else:
                    out.full_upgrades += 1
    for i, s in enumerate(slots):
        cur = chosen[i]
        if cur is None:
            continue
        for tier in reversed(tiers_mod.deeper(s.category, s.is_dir, cur, s.deepest)):
            if upgrade(i, tier, capped=False):
                out.spare_upgrades += 1
                break
    out.used_tokens = max_tokens - left
    return out


def read_plan(slots: list[Slot], max_tokens: int) -> list[str | None]:
    """Which slots need a read, decided from abstract lengths alone: a directory reads its
    `.overview.md`; a file reads its body when a tier it may serve comes from the body (events'
    overview and full, a pinned overview or full). A memory's overview is only a fallback, so
    its body is read only when its abstract is missing or over the per-entry cap."""
    cap = per_entry_cap(max_tokens, len(slots))
    out: list[str | None] = []
    for s in slots:
        if s.is_dir:
            wanted = "overview" in (s.start, s.deepest) and "overview" not in s.texts
            out.append("dir_overview" if wanted else None)
            continue
        if "full" in s.texts:
            out.append(None)  # a section arrives with its text
            continue
        reach = {s.start, *tiers_mod.deeper(s.category, False, s.start, s.deepest)}
        if reach & {"overview", "full"}:
            out.append("body")
        elif "overview" in tiers_mod.chain(s.category, False, s.start):
            c = s.cost("abstract")
            out.append("body" if c is None or c > cap else None)
        else:
            out.append(None)
    return out


def coverage(slots: list[Slot], f: Fill) -> list[dict[str, object]]:
    """What the budget cost the caller: entries dropped, or served below the tier they would
    have started at, with the tokens that tier needed, so an agent knows what it did not get."""
    out: list[dict[str, object]] = []
    for s, tier, wanted in zip(slots, f.tiers, f.wanted, strict=True):
        if tier == s.start:  # served where it starts: nothing withheld (the common case)
            continue
        if tier is not None and tiers_mod.rank(s.category, s.is_dir, tier) >= tiers_mod.rank(s.category, s.is_dir,
                                                                                             wanted):
            continue
        out.append({"uri": s.uri, "score": round(s.score, 4), "served": tier or "dropped", "wanted": wanted,
                    "tokens": s.cost(wanted)})
    return out


_SPACE = b" \t\n\r\x0b\x0c"


def body_key(text: str) -> bytes:
    """What makes two bodies the same memory: their text, case and whitespace aside. Deleting
    bytes is one table pass in C; deleting characters from a str looks each one up in a dict
    (8x slower on a 2 KB body)."""
    return text.lower().encode("utf-8", "surrogatepass").translate(None, _SPACE)


def dedup_bodies(slots: list[Slot], key_of: Callable[[Slot], bytes]) -> tuple[list[Slot], int]:
    """Drop entries whose body repeats a better-scored entry's (the same memory stored twice)."""
    seen: set[bytes] = set()
    kept: list[Slot] = []
    for s in slots:
        k = key_of(s)
        if k and k in seen:
            continue
        if k:
            seen.add(k)
        kept.append(s)
    return kept, len(slots) - len(kept)
