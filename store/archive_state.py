"""Archive state from directory markers only, and the session context built from it. Pure.

    no .done, no .failed.json         pending    raw returned
    .done and a readable overview     completed  overview returned, covered raw not
    .failed.json, not covered later   failed     raw returned
    .quarantined.json                 quarantined raw left out (it failed too often; readable, retryable)
    .done but overview unreadable     invalid    raw returned, reported

A completed archive's `.done` records its coverage, including earlier failed archives it rolled
forward; those are covered too. `commit_count` plays no part.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from skald.messages.sessions import ContextPart, Message
from skald.store.session_meta import Checkpoint, DoneMarker, FailedMarker, QuarantineMarker


@dataclass(slots=True)
class ArchiveListing:
    """What the disk says about one archive directory."""

    archive_id: str  # archive_001
    index: int
    done: DoneMarker | None = None  # parsed .done (all defaults for an old empty marker)
    done_unreadable: bool = False
    overview: str | None = None  # None when missing or unreadable
    failed: FailedMarker | None = None
    quarantined: QuarantineMarker | None = None
    messages: list[Message] = field(default_factory=list)
    checkpoints: list[Checkpoint] = field(default_factory=list)


@dataclass(slots=True)
class ArchiveState:
    """One archive's state as its markers say, and whether a completed overview covers its messages."""

    listing: ArchiveListing
    state: str  # pending | completed | failed | invalid | quarantined
    covered: bool = False  # raw summarised by a completed archive (itself or a later roll-forward)


def scan(listings: Sequence[ArchiveListing]) -> list[ArchiveState]:
    ordered = sorted(listings, key=lambda a: a.index)
    states: list[ArchiveState] = []
    rolled: set[str] = set()
    for a in ordered:
        if a.done is not None and not a.done_unreadable and a.overview is not None:
            st = ArchiveState(a, "completed", covered=True)
            rolled.update(a.done.covered_failed_archives)
        elif a.done is not None or a.done_unreadable:
            st = ArchiveState(a, "invalid")
        elif a.quarantined is not None:
            st = ArchiveState(a, "quarantined")
        elif a.failed is not None:
            st = ArchiveState(a, "failed")
        else:
            st = ArchiveState(a, "pending")
        states.append(st)
    for st in states:
        if st.state == "failed" and st.listing.archive_id in rolled:
            st.covered = True
    return states


def uncovered(states: Sequence[ArchiveState]) -> list[ArchiveState]:
    """Archives whose raw messages belong in the live context (a quarantined one's do not)."""
    return [s for s in states if not s.covered and s.state != "quarantined"]


def final(s: ArchiveState) -> bool:
    """Nothing will change this archive's part in the context until someone acts on it."""
    return s.state in ("completed", "quarantined") or s.covered


def latest_completed(states: Sequence[ArchiveState]) -> ArchiveState | None:
    done = [s for s in states if s.state == "completed"]
    return done[-1] if done else None


def checkpoint_message(archive_uri: str, cp: Checkpoint) -> Message:
    if cp.archive_uri:
        archive_uri = cp.archive_uri
    return Message(id=f"checkpoint:{cp.turn_anchor_message_id}:{archive_uri.rsplit('/', 1)[-1]}",
                   role="assistant", message_kind="checkpoint", source_message_ids=list(cp.source_message_ids),
                   parts=[ContextPart(uri=archive_uri, abstract=cp.abstract, context_type="memory")])


def assemble(states: Sequence[ArchiveState], root: Sequence[Message],
             archive_uri: dict[str, str]) -> tuple[str, list[Message], int]:
    """(latest completed overview, messages, checkpoints inserted).

    Messages: uncovered pending / failed / invalid raw in archive order, then root, stably
    deduplicated by id and kept in acceptance order; a checkpoint follows its user anchor while
    that anchor is live.
    """
    latest = latest_completed(states)
    overview = latest.listing.overview or "" if latest else ""
    seen: set[str] = set()
    live: list[Message] = []
    for st in uncovered(states):
        for m in st.listing.messages:
            if m.id not in seen:
                seen.add(m.id)
                live.append(m)
    for m in root:
        if m.id not in seen:
            seen.add(m.id)
            live.append(m)
    # An oversized Turn archives its early steps while its user anchor stays in root: put every
    # message back in the order it was accepted (the single writer stamps created_at; stable sort).
    live.sort(key=lambda m: m.created_at)
    anchors: dict[str, list[Message]] = {}
    for st in states:
        if st.state != "completed":
            continue
        for cp in st.listing.checkpoints:
            anchor = cp.turn_anchor_message_id
            if anchor:
                uri = archive_uri.get(st.listing.archive_id, "")
                anchors.setdefault(anchor, []).append(checkpoint_message(uri, cp))
    out: list[Message] = []
    inserted = 0
    for m in live:
        out.append(m)
        for checkpoint in anchors.get(m.id, []):
            out.append(checkpoint)
            inserted += 1
    return overview, out, inserted
