"""The context frontier (pure): how far back a session's context read has to look.

Every archive up to the frontier is completed, quarantined, or a failure a later archive rolled
forward, so
`sessions.context` reads only the archives past it, whatever the number of completed ones. The
frontier carries what the context still needs from the archives it folded: the newest overview
and the checkpoints whose turn anchors are still live (an anchor never comes back once archived).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import msgspec

from skald.messages.sessions import Message
from skald.store import archive_state
from skald.store.archive_state import ArchiveListing, ArchiveState
from skald.store.session_meta import Checkpoint, DoneMarker

FRONTIER_ID = "frontier"  # the synthetic archive standing for everything folded


@dataclass(frozen=True, slots=True)
class Frontier:
    """How far a session's archives are final and folded into its context: the newest completed overview and its
    checkpoints."""

    index: int = 0  # every archive <= index is final and folded
    overview: str = ""  # overview of the newest completed archive folded
    checkpoints: tuple[Checkpoint, ...] = field(default=())


def advance(frontier: Frontier, tail: Sequence[ArchiveListing], root: Sequence[Message],
            archive_uri: Callable[[str], str]) -> tuple[Frontier, list[ArchiveState]]:
    """Fold the final archives at the head of `tail` (the archives past the frontier, in order)
    into the frontier; return it with the states a context read needs: one synthetic completed
    state standing for the frontier (when it has moved), then the states past it."""
    states = archive_state.scan(tail)
    live = {m.id for m in root} | {m.id for s in archive_state.uncovered(states) for m in s.listing.messages}
    index, overview, checkpoints = frontier.index, frontier.overview, list(frontier.checkpoints)
    for s in states:
        if not archive_state.final(s):
            break
        index = s.listing.index
        if s.state == "completed":
            overview = s.listing.overview or ""
            uri = archive_uri(s.listing.archive_id)
            checkpoints += [msgspec.structs.replace(cp, archive_uri=uri) for cp in s.listing.checkpoints]
    checkpoints = [cp for cp in checkpoints if cp.turn_anchor_message_id in live]
    moved = Frontier(index, overview, tuple(checkpoints))
    rest = [s for s in states if s.listing.index > index]
    if index == 0:
        return moved, rest
    head = ArchiveState(ArchiveListing(archive_id=FRONTIER_ID, index=index, done=DoneMarker(), overview=overview,
                                       checkpoints=checkpoints), "completed", covered=True)
    return moved, [head, *rest]
