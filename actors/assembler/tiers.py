"""Detail tiers per category (docs/design/context-assembly.md, tiers; `search(mode="context")`).

A memory's abstract is its whole body (the writer embeds the body), so for memory categories
the content ladder is uri < overview < abstract <= full; for resources, skills and directories
it is uri < abstract < overview < full. Falling back and deepening both walk that ladder.
Resources and skills never fall "back" to an overview: that would read a body nobody asked for.
"""

from __future__ import annotations

import functools

from skald.actors.text import extract

MEMORY_CATEGORIES = frozenset({"events", "entities", "preferences", "experiences", "memories"})
MEMORY_LADDER = ("uri", "overview", "abstract", "full")
OTHER_LADDER = ("uri", "abstract", "overview", "full")
DIR_LADDER = ("uri", "abstract", "overview")  # a directory's deepest tier is its overview

# category -> (start tier, deepest tier) when `detail` does not pin it
DEFAULTS: dict[str, tuple[str, str]] = {
    "events": ("overview", "full"),  # the one type whose # Summary really compresses its body
    "entities": ("abstract", "abstract"),
    "preferences": ("abstract", "abstract"),
    "experiences": ("abstract", "abstract"),
    "memories": ("abstract", "abstract"),
    "resources": ("abstract", "abstract"),  # bodies may be large or hold credentials
    "skills": ("abstract", "abstract"),
}


def ladder(category: str, is_dir: bool) -> tuple[str, ...]:
    if is_dir:
        return DIR_LADDER
    return MEMORY_LADDER if category in MEMORY_CATEGORIES else OTHER_LADDER


def bounds(category: str, is_dir: bool, pinned: str | None) -> tuple[str, str]:
    """(start, deepest) tier of one entry; a pin is both, capped by what the entry can be."""
    lad = ladder(category, is_dir)
    if pinned is not None:
        tier = pinned if pinned in lad else lad[-1]
        return tier, tier
    if is_dir:
        return "overview", "overview"
    return DEFAULTS.get(category, ("abstract", "abstract"))


@functools.lru_cache(maxsize=1024)
def chain(category: str, is_dir: bool, start: str) -> tuple[str, ...]:
    """Tiers to try, from `start` down the ladder, ending at the bare URI. Resources and skills
    whose abstract fails go straight to the URI (never to a body they were not asked for).
    Cached: budget filling asks it for every entry several times."""
    lad = ladder(category, is_dir)
    if not is_dir and category not in MEMORY_CATEGORIES and start == "abstract":
        return ("abstract", "uri")
    return tuple(reversed(lad[: lad.index(start) + 1]))


@functools.lru_cache(maxsize=1024)
def deeper(category: str, is_dir: bool, current: str, deepest: str) -> tuple[str, ...]:
    """Tiers above `current` up to `deepest`, shallowest first."""
    lad = ladder(category, is_dir)
    return lad[lad.index(current) + 1 : lad.index(deepest) + 1]


def rank(category: str, is_dir: bool, tier: str) -> int:
    return ladder(category, is_dir).index(tier)


def file_overview(name: str, body: str) -> str:
    """Overview by source type: a code file's skeleton, a memory's `# Summary` section, or a
    document's heading tree and first paragraph (docs/design/context-assembly.md)."""
    return extract.text_overview(name, body)
