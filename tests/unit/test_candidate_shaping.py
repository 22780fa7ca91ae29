"""The retriever's candidate shaping (`actors/retriever/candidates.py`), pure: skills collapse to
their package, scope directories and profiles drop, peers' entries are penalised, exclusions and
cooled URIs leave, and how a row is served is worked out once and again when it is replaced.

Seed 003's review bug 6 (category from the bucket, not the URI) is pinned here:
test_shape_collapses_skills_drops_scope_dirs_and_profile_and_penalises_peers.
"""

from __future__ import annotations

import msgspec
import pytest

from skald.actors.retriever import candidates
from skald.messages.index import IndexRow
from skald.store.uri import Identity


def row(uri: str, level: int = 2, ctype: str = "memory", cat: str = "", abstract: str = "a") -> IndexRow:
    return IndexRow(account="acc", uri=uri, level=level, parent_uri=uri.rsplit("/", 1)[0], context_type=ctype,
                    category=cat, abstract=abstract)


def test_shape_collapses_skills_drops_scope_dirs_and_profile_and_penalises_peers() -> None:
    ident = Identity(user="u")
    hits = [candidates.Scored(row("viking://user/u/memories/profile.md", cat="profile.md"), 0.99),
            candidates.Scored(row("viking://user/u/memories", 0, cat=""), 0.98),
            candidates.Scored(row("viking://user/u/memories/events", 1, cat="events"), 0.97),
            candidates.Scored(row("viking://agent/skills/pdf/scripts/x.py", ctype="skill"), 0.9),
            candidates.Scored(row("viking://agent/skills/pdf", 0, ctype="skill"), 0.5),
            candidates.Scored(row("viking://resources/backup/memories/events/log.md", ctype="resource", cat="events"),
                              0.8),
            candidates.Scored(row("viking://user/u/peers/bob/memories/preferences/p.md", cat="preferences"), 0.7),
            candidates.Scored(row("viking://user/u/memories/events/2026", 0, cat="events"), 0.6)]
    out = candidates.shape(hits, ident, candidates.excluder([], []), candidates.excluder([], []),
                           lambda pkg: "pdf: read PDFs",
                  {"preferences": 0.5})
    by = {c.uri: c for c in out.candidates}
    assert set(by) == {"viking://agent/skills/pdf/SKILL.md", "viking://resources/backup/memories/events/log.md",
                       "viking://user/u/peers/bob/memories/preferences/p.md",
                       "viking://user/u/memories/events/2026/.overview.md"}
    skill = by["viking://agent/skills/pdf/SKILL.md"]
    assert (skill.score, skill.abstract, skill.category) == (0.9, "pdf: read PDFs", "skills")
    # docs/design/context-assembly.md, finding 6
    assert by["viking://resources/backup/memories/events/log.md"].category == "resources"
    peer = by["viking://user/u/peers/bob/memories/preferences/p.md"]
    assert (peer.origin, peer.score) == ("peer", 0.35)
    assert by["viking://user/u/memories/events/2026/.overview.md"].is_dir


def test_shape_excludes_subtrees_and_cools_exact_uris_and_packages() -> None:
    ident = Identity(user="u")
    hits = [candidates.Scored(row("viking://resources/docs/a.md", ctype="resource"), 0.9),
            candidates.Scored(row("viking://resources/other.md", ctype="resource"), 0.8),
            candidates.Scored(row("viking://agent/skills/pdf/x.py", ctype="skill"), 0.7),
            candidates.Scored(row("viking://resources/keep.md", ctype="resource"), 0.6)]
    out = candidates.shape(hits, ident, candidates.excluder(["viking://resources/docs"], ["viking://resources/docs"]),
                  candidates.excluder(["viking://resources/other.md"], ["viking://agent/skills/pdf"]), lambda p: "", {})
    assert [c.uri for c in out.candidates] == ["viking://resources/keep.md"]
    assert out.excluded == {"viking://resources/docs/a.md"}
    assert out.cooled == {"viking://resources/other.md", "viking://agent/skills/pdf/SKILL.md"}


def test_shaping_works_a_row_out_again_when_the_index_replaces_it() -> None:
    """What a row is served as is cached by URI, but an upsert (a new row object for the same URI)
    is worked out again: a file that became a long document is served as one. A peer named like a
    scope word is still a peer."""
    ident = Identity(account="a", user="u", peer="alice")

    def uris(r: IndexRow) -> list[tuple[str, bool, str]]:
        out = candidates.shape([candidates.Scored(r, 0.5)], ident, candidates.excluder([], []),
                               candidates.excluder([], []), lambda p: "", {"preferences": 0.5})
        return [(c.uri, c.is_dir, c.origin) for c in out.candidates]

    uri = "viking://resources/guide.md"
    assert uris(row(uri, ctype="resource")) == [(uri, False, "global")]
    doc = msgspec.structs.replace(row(uri, 1, ctype="resource"), kind="document", text="# Guide\n- a\n- b")
    assert uris(doc) == [(uri, True, "global")]
    # Its table of contents is read for it once kept (the index holds it out of the row).
    shaped = candidates.shape([candidates.Scored(doc, 0.5)], ident, candidates.excluder([], []),
                              candidates.excluder([], []), lambda p: "", {})
    assert shaped.held == {uri: 1} and shaped.candidates[0].text == ""
    top = msgspec.structs.replace(doc, level=0)
    assert candidates.shape([candidates.Scored(top, 0.5)], ident, candidates.excluder([], []),
                            candidates.excluder([], []), lambda p: "", {}).held == {}
    assert uris(row(uri, ctype="resource")) == [(uri, False, "global")]
    odd = "viking://user/u/peers/self/memories/preferences/p.md"
    assert uris(row(odd, cat="preferences")) == [(odd, False, "peer")]


def test_warming_works_rows_out_ahead_within_the_cache_and_an_upsert_still_wins(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The replica warms the serving cache as rows arrive: a warmed row is served from it, a row
    never served (a profile) is not kept, a full cache takes no more, and a later row object for
    the same URI is still worked out again."""
    monkeypatch.setattr(candidates, "_SERVED", {})
    monkeypatch.setattr(candidates, "SERVED_CACHE_MAX", 3)
    a, b = row("viking://resources/a.md", ctype="resource"), row("viking://resources/b.md", ctype="resource")
    prof = row("viking://user/u/memories/profile.md", cat="profile.md")
    candidates.warm([a, prof, None, b])
    assert set(candidates._SERVED) == {a.uri, b.uri}
    assert candidates.served(a) is candidates._SERVED[a.uri] and candidates.served(a).row is a
    candidates.warm([row(f"viking://resources/{i}.md", ctype="resource") for i in range(5)])
    assert len(candidates._SERVED) == 3  # filled to the cap, never cleared by warming
    doc = msgspec.structs.replace(row(a.uri, 1, ctype="resource"), kind="document", text="# A\n- x")
    got = candidates.served(doc)
    assert got is not None and got.row is doc and got.is_dir
