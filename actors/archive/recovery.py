"""The archive side of crash recovery (the session side is `actors/session/recovery.py`; the rules
are docs/design/sessions.md): archives a crash left without a Phase 2 job get one again, and an
archive whose Phase 2 keeps failing is counted, then set aside (quarantined) so it stops blocking
the archives after it. State is read from markers only; every step here is safe to repeat."""

from __future__ import annotations

import asyncio
import logging
from typing import Protocol

import msgspec

from skald.actors.kit.overlap import in_threads
from skald.actors.kit.ports import WorkQueue
from skald.messages import catalog
from skald.messages.sessions import Phase2Job
from skald.store import archive_state, faults, treeops
from skald.store import sessions as session_store
from skald.store.session_meta import FailedMarker, QuarantineMarker
from skald.store.sessions import SessionDir, session_dir
from skald.store.uri import Identity, Namespace

log = logging.getLogger("skald.archive")


class _Queue(WorkQueue, Protocol):
    """The one bus port re-queueing needs."""


SCAN_AT_ONCE = 4  # sessions whose archives the scan reads side by side


def every_session(ns: Namespace) -> list[tuple[str, str, str]]:
    """(account, user, session id) of every session in the tree."""
    t = ns.tree
    return [(a.name, u.name, s.name)
            for a in treeops.listdir(t, "accounts", missing_ok=True, details=False)
            for u in treeops.listdir(t, f"accounts/{a.name}/user", missing_ok=True, details=False)
            for s in treeops.listdir(t, f"accounts/{a.name}/user/{u.name}/sessions", missing_ok=True, details=False)]


def pending_in(ns: Namespace, session: tuple[str, str, str]) -> list[tuple[str, str, str, str]]:
    """(account, user, session id, archive id) of each of the session's archives whose markers
    say pending."""
    account, user, sid = session
    sdir = session_dir(ns, Identity(account=account, user=user), sid)
    indexes = session_store.archive_indexes(sdir)
    return [(account, user, sid, session_store.archive_name(i))
            for i, state in zip(indexes, session_store.marker_states(sdir, indexes), strict=True) if state == "pending"]


async def pending_archives(ns: Namespace) -> list[tuple[str, str, str, str]]:
    """Every archive whose markers say pending, SCAN_AT_ONCE sessions read side by side (each a
    listing and one read of its markers: round trips on the JetStream tree)."""
    sessions = await asyncio.to_thread(every_session, ns)
    found = await in_threads(lambda s: pending_in(ns, s), sessions, SCAN_AT_ONCE)
    return [p for ps in found for p in ps]


async def requeue_pending(ns: Namespace, bus: _Queue) -> None:
    """Pending archives whose Phase 2 job was lost (a crash between archive and enqueue) get one
    again; duplicates are dropped by the stream's dedup window and by `.done` checks."""
    found = await pending_archives(ns)
    for account, user, sid, name in found:
        uri = session_dir(ns, Identity(account=account, user=user), sid).archive_uri(name)
        try:
            await bus.enqueue(catalog.ARCHIVE, Phase2Job(account=account, user=user, session_id=sid,
                                                        archive_id=name), uri)
        except Exception:  # noqa: BLE001 - best effort; the session owner re-enqueues on load too
            log.warning("could not re-enqueue %s", uri, exc_info=True)


def count_failure(sdir: SessionDir, s: archive_state.ArchiveState, error: str, quarantine_after: int,
                  now: float) -> bool:
    """One more failed attempt at covering a failed archive, in its `.failed.json`; past
    `quarantine_after` attempts it is quarantined. True when this call quarantined it."""
    if s.state != "failed":
        return False
    aid = s.listing.archive_id
    prev = s.listing.failed or FailedMarker()
    marker = msgspec.structs.replace(prev, attempts=prev.attempts + 1, time=now)
    session_store.write_failed(sdir, aid, marker)
    faults.point("archive.after_attempt")  # the attempt counted, the quarantine not yet written
    if marker.attempts < quarantine_after:
        return False
    reason = f"failed {marker.attempts} times; last: {error}"[:2000]
    session_store.write_quarantined(sdir, aid, QuarantineMarker(reason=reason, attempts=marker.attempts, time=now))
    log.warning("archive %s quarantined: %s", sdir.archive_uri(aid), reason)
    return True
