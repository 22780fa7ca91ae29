"""A session loaded from disk after whatever came before, a crash included: the session side of
crash recovery (the archive side is `actors/archive/recovery.py`; the rules are docs/design/sessions.md).

Loading finishes what a crash interrupted: a Phase 1 that died after its archive was durable but
before the live log was rewritten has the archived ids dropped from the log; archives without a
marker are listed so their Phase 2 job is queued again; a corrupt or lost `.meta.json` is rebuilt
from the messages and archives on disk (logged), never read as zero counters. Archive state is read
from markers only.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Protocol

from skald.actors.kit.ports import WorkQueue
from skald.actors.session.state import State
from skald.messages import catalog
from skald.messages import sessions as session_msgs
from skald.store import sessions as session_store
from skald.store.session_meta import SessionMeta
from skald.store.sessions import SessionDir
from skald.store.uri import Identity

log = logging.getLogger("skald.session")


def recovered_meta(sdir: SessionDir, ids: set[str], archives: int) -> SessionMeta:
    """Counters from what is on disk: every message id accepted is in root or an archive, and
    every commit made one archive."""
    st = sdir.tree.stat(sdir.key)
    created = st.mtime if st is not None else 0.0
    return SessionMeta(session_id=sdir.session_id, created_at=created, total_message_count=len(ids),
                       commit_count=archives)


def counted(sdir: SessionDir) -> tuple[SessionMeta, int, int, int]:
    """A session not loaded here, counted from what is stored: (its meta, live messages, every
    message accepted, archives). Its meta is not rewritten per message, so it cannot say this
    itself. The meta and the live log are read together, the archives many at once."""
    stored, _, live = session_store.meta_and_live(sdir)
    meta = stored or SessionMeta()
    indexes = session_store.archive_indexes(sdir)
    ids = {m.id for m in live}
    for listing in session_store.read_archives(sdir, indexes):
        ids.update(m.id for m in listing.messages)
    return meta, len(live), max(meta.total_message_count, len(ids)), len(indexes)


def load(sdir: SessionDir, fence: Callable[[], None]) -> State:
    """Read one session (in a worker thread); `fence` is called before any repair is written."""
    meta, status, root = session_store.meta_and_live(sdir)
    archived: set[str] = set()
    requests: dict[str, str] = {}
    pending: list[int] = []
    indexes = session_store.archive_indexes(sdir)
    for listing in session_store.read_archives(sdir, indexes):
        archived.update(m.id for m in listing.messages)
        requests.update((m.request_id, m.id) for m in listing.messages if m.request_id)
        if listing.done is None and listing.failed is None:
            pending.append(listing.index)
    if any(m.id in archived for m in root):
        # Phase 1 died after the archive was durable but before root was rewritten: finish it.
        fence()
        root = [m for m in root if m.id not in archived]
        session_store.write_live(sdir, root)
    ids = archived | {m.id for m in root}
    repaired = False
    if status == "corrupt" or (status == "missing" and ids):  # torn, or lost (written without fsync)
        meta = recovered_meta(sdir, ids, len(indexes))
        log.warning("%s %s: counters rebuilt from disk (total_message_count=%d, commit_count=%d)",
                    status, sdir.fkey(session_store.META), meta.total_message_count, meta.commit_count)
        fence()
        session_store.save_session_meta(sdir, meta)
        repaired = True
    meta = meta or SessionMeta(session_id=sdir.session_id)
    return State(sdir=sdir, root=root, ids=ids, total=max(meta.total_message_count, len(ids)),
                 commit_count=max(meta.commit_count, len(indexes)), created_at=meta.created_at,
                 max_index=max(indexes, default=0),
                 pending_recovery=pending, recovered_meta=repaired, auto_commit=meta.auto_commit,
                 requests=requests | {m.request_id: m.id for m in root if m.request_id})


class _Queue(WorkQueue, Protocol):
    """The one bus port re-queueing needs."""


async def requeue_pending(bus: _Queue, st: State, ident: Identity) -> None:
    """Pending archives found on load get their Phase 2 job again (deduplicated by the archive's
    URI as message id, and Phase 2 is idempotent)."""
    for i in st.pending_recovery:
        name = session_store.archive_name(i)
        await bus.enqueue(catalog.ARCHIVE, session_msgs.Phase2Job(
            account=ident.account, user=ident.user, session_id=st.sdir.session_id, archive_id=name),
            st.sdir.archive_uri(name))
    st.pending_recovery = []
