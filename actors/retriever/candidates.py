"""Candidates for context assembly (docs/design/context-assembly.md, `search(mode="context")`).

One request carries every bucket (a memory category, resources, skills, or `all`) and every
expanded query; the retriever answers in one round trip. Everything that must happen before a
bucket's limit is cut happens here, so that a bucket whose top page is cooled or collapsed
still fills from its next hits: exclusions (exact URIs and subtrees), navigation-only scope
directories, `profile.md`, skill packages collapsed to `<package>/SKILL.md`, directory levels
collapsed to one `.overview.md` entry, and the other-peer penalty.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import msgspec

from skald.actors.retriever import results
from skald.actors.text import sections
from skald.messages.context import Candidate
from skald.messages.index import IndexRow
from skald.store.uri import SCHEME, Identity

MEMORY_BUCKETS = ("events", "entities", "preferences", "experiences")
BUCKETS = (*MEMORY_BUCKETS, "resources", "skills", "all")
NAMED = frozenset(MEMORY_BUCKETS)
AGENT_PRESET = frozenset({"skills", "memories", "resources", "instructions"})


def display_category(row: IndexRow) -> str:
    """From what the row is (its context type), never from words in its URI
    (docs/design/context-assembly.md, finding 6)."""
    if row.context_type == "memory":
        return row.category if row.category in NAMED else "memories"
    return "skills" if row.context_type == "skill" else "resources"


def segments(uri: str) -> tuple[str, ...]:
    return tuple(filter(None, uri[len(SCHEME):].split("/"))) if uri.startswith(SCHEME) else ()


def is_scope_dir(segs: tuple[str, ...]) -> bool:
    """Preset navigation directories are never entries: `viking://resources`, `viking://agent`
    and its preset children, a user root and its first level, memory category roots, peer roots."""
    if len(segs) <= 1:
        return True
    if segs[0] == "agent":
        return len(segs) == 2 or (len(segs) == 3 and segs[1] == "memories")
    if segs[0] != "user":
        return False
    if len(segs) <= 3:
        return True
    if segs[2] == "memories":
        return len(segs) == 4
    if segs[2] == "peers":
        # user/u/peers/p, .../p/memories, .../p/resources, .../p/memories/<category>
        return len(segs) <= 5 or (len(segs) == 6 and segs[4] == "memories")
    return False


def is_profile(segs: tuple[str, ...]) -> bool:
    return bool(segs) and segs[-1] == "profile.md" and len(segs) >= 2 and segs[-2] == "memories"


def skill_package(segs: tuple[str, ...]) -> tuple[str, ...] | None:
    """The package root of a node inside a skills tree (`.../skills/<package>`), or None."""
    if "skills" not in segs[:3]:
        return None
    i = segs.index("skills")
    if len(segs) <= i + 1:
        return None
    return segs[: i + 2]


def bucket_scope(name: str, ident: Identity, peer_scope: str) -> tuple[list[str], frozenset[str], str | None]:
    """(prefixes, context types, memory category or None) a bucket searches.

    A caller pinned to a peer never sees another peer's space (tenancy); an unpinned caller
    sees every peer's space unless `peer_scope="actor"`."""
    user = ident.user_root
    if ident.peer:
        mem = [f"{user}/memories", f"{user}/peers/{ident.peer}/memories"]
        res = [f"{SCHEME}resources", f"{user}/resources", f"{user}/peers/{ident.peer}/resources"]
    elif peer_scope == "all":
        mem = [f"{user}/memories", f"{user}/peers"]
        res = [f"{SCHEME}resources", f"{user}/resources", f"{user}/peers"]
    else:
        mem = [f"{user}/memories"]
        res = [f"{SCHEME}resources", f"{user}/resources"]
    skills = [f"{user}/skills", f"{SCHEME}agent/skills"]
    if name in NAMED:
        return mem, frozenset({"memory"}), name
    if name == "resources":
        return res, frozenset({"resource"}), None
    if name == "skills":
        return skills, frozenset({"skill"}), None
    return list(dict.fromkeys([*mem, *res, *skills])), frozenset({"memory", "resource", "skill"}), None


def _nothing(uri: str) -> bool:
    return False


def excluder(uris: list[str], prefixes: list[str]) -> Callable[[str], bool]:
    """True for a URI listed exactly, or inside one of the subtrees."""
    if not uris and not prefixes:
        return _nothing
    exact = frozenset(uris)
    subtrees = tuple(p.rstrip("/") + "/" for p in prefixes)

    def excluded(uri: str) -> bool:
        """A section of an excluded document is excluded with it."""
        return uri in exact or uri.split("#", 1)[0] in exact or (bool(subtrees) and uri.startswith(subtrees)) \
            or (bool(subtrees) and "#" in uri and uri.split("#", 1)[0] + "/" in subtrees)

    return excluded


@dataclass(slots=True)
class Scored:
    """A hit's row with its calibrated score, and the raw similarity that orders ties."""

    row: IndexRow
    score: float
    raw: float = 0.0  # the similarity before calibration: orders hits the clipped scale ties


@dataclass(slots=True)
class Shaped:
    """Candidates after shaping, the URIs exclusions and the ledger removed, and for the entries
    that serve a text the index keeps out of its rows, the level of the row it is read from (a
    section's own, 2; a long document's table of contents, 1, when its L1 row was among the hits)."""

    candidates: list[Candidate]
    excluded: set[str]
    cooled: set[str]
    held: dict[str, int] = field(default_factory=dict)


TURNS_PER_ENTRY = 4  # turns a bucket may carry, on average, per entry it is asked for


def cut(found: list[Candidate], limit: int) -> list[Candidate]:
    """The first `limit` entries, best first, where the turns of one transcript count as one
    entry (the assembler serves them as one passage), with at most TURNS_PER_ENTRY x `limit`
    turns in all. Without transcripts this is `found[:limit]`."""
    out: list[Candidate] = []
    entries: set[str] = set()
    turns = 0
    for c in found:
        turn = sections.is_turn(c.uri)
        key = c.uri.partition("#")[0] if turn else c.uri
        if key not in entries:
            if len(entries) >= limit:
                continue
            entries.add(key)
        if turn:
            if turns >= TURNS_PER_ENTRY * limit:
                continue
            turns += 1
        out.append(c)
    return out


def rank_key(c: Candidate) -> tuple[float, float, str]:
    """Best first: the calibrated score, then the raw similarity (scores clip at 1.0, and the
    strongest hits of a query would otherwise tie and fall into URI order), then the URI."""
    return (-c.score, -c.raw, c.uri)


class _Served(msgspec.Struct, gc=False):
    """What a row is served as, from the row alone (its URI and kind): worked out once per row."""

    row: IndexRow  # the row object it was worked out for: a replaced row is worked out again
    uri: str
    is_dir: bool
    category: str
    package: tuple[str, ...] | None  # a skill package's root, whose abstract is looked up per request
    location: str
    scope: str  # "global", "self", or "peer" (a row in the space of the peer `peer`)
    peer: str
    lines: tuple[int, int] | None
    # The level of the row whose text the entry serves, which the index keeps out of its rows (a
    # section's own text, a long document's table of contents at its L1 row): read for the
    # candidates kept (`Shaped.held`); -1 for none.
    held: int


_SERVED: dict[str, _Served | None] = {}
# Rows; about 130 bytes each (34 MB at most). Full, it is dropped whole on a query's miss; the
# replica warms it as rows arrive (`warm`), which only fills what room there is.
SERVED_CACHE_MAX = 262_144


def _served(row: IndexRow) -> _Served | None:
    """None for a row that is never an entry (a profile, a navigation-only scope directory)."""
    segs = segments(row.uri)
    if not segs or is_profile(segs):
        return None
    pkg = skill_package(segs) if row.context_type == "skill" else None
    location, held = "", -1
    lines = (row.start_line, row.end_line) if row.kind == "section" else None
    if pkg is not None:
        uri, is_dir = SCHEME + "/".join(pkg) + "/SKILL.md", False
    elif row.kind == "document":
        # A long document's node: served as the document, its table of contents as overview.
        uri, is_dir, held = row.uri, True, 1 if row.level == 1 else -1
    elif row.kind == "section":
        uri, is_dir, location, held = row.uri, False, results.location(row), 2
    elif row.level in (0, 1):
        if is_scope_dir(segs):
            return None
        uri, is_dir = row.uri + "/.overview.md", True
    else:
        uri, is_dir = row.uri, False
    scope, peer = "self", ""
    if segs[:1] in (("resources",), ("agent",)):
        scope = "global"
    elif len(segs) > 3 and segs[0] == "user" and segs[2] == "peers":
        scope, peer = "peer", segs[3]
    return _Served(row, uri, is_dir, display_category(row), pkg, location, scope, peer, lines, held)


def served(row: IndexRow) -> _Served | None:
    """`_served(row)`, cached by URI and checked against the row object (an upsert replaces it)."""
    got = _SERVED.get(row.uri, False)
    if got is not False and (got is None or got.row is row):
        return got
    if len(_SERVED) >= SERVED_CACHE_MAX:
        _SERVED.clear()
    got = _SERVED[row.uri] = _served(row)
    if got is None:  # kept only while the URI's row is this one: a None cannot be checked
        _SERVED.pop(row.uri)
    return got


def warm(rows: Iterable[IndexRow | None]) -> None:
    """Work out how rows are served as they reach the index, while the cache has room: a
    query's first sight of a row (at 100k rows, most of a context request's 150) would
    otherwise pay ~2.6 us for it."""
    for row in rows:
        if len(_SERVED) >= SERVED_CACHE_MAX:
            return
        if row is not None and (got := _served(row)) is not None:
            _SERVED[row.uri] = got


def shape(hits: list[Scored], ident: Identity, excluded: Callable[[str], bool], cooled: Callable[[str], bool],
          package_abstract: Callable[[tuple[str, ...]], str], penalty: dict[str, float]) -> Shaped:
    """Raw scored rows (any order, any number of queries) -> one candidate per served URI, best
    score kept, best first. Pure apart from the package-abstract lookup it is handed."""
    best: dict[str, Candidate] = {}
    out = Shaped([], set(), set())
    for h in hits:
        sv = served(h.row)
        if sv is None:
            continue
        uri = sv.uri
        if excluded is not _nothing and (excluded(uri) or excluded(h.row.uri)):
            out.excluded.add(uri)
            continue
        if cooled is not _nothing and cooled(uri):
            out.cooled.add(uri)
            continue
        org = sv.scope if sv.scope != "peer" else "actor" if sv.peer == ident.peer else "peer"
        keep = 1.0 - penalty.get(sv.category, 0.0) if org == "peer" else 1.0
        score, raw = h.score * keep, round(float(h.raw * keep), 6)
        cur = best.get(uri)
        if cur is None or score > cur.score or (score == cur.score and raw > cur.raw):
            best[uri] = Candidate(uri=uri, category=sv.category, score=round(float(score), 6),  # type: ignore[arg-type]
                                  raw=raw, is_dir=sv.is_dir,
                                  abstract=h.row.abstract if sv.package is None else package_abstract(sv.package),
                                  origin=org, updated_at=h.row.updated_at,  # type: ignore[arg-type]
                                  location=sv.location, lines=sv.lines, page=h.row.page)
        if sv.held >= 0:
            out.held[uri] = sv.held
    out.candidates = sorted(best.values(), key=rank_key)
    return out
