"""The owner's view of one session, loaded from disk, and the crash recovery done on load.

Loading finishes whatever a crash interrupted: a Phase 1 that died after its archive was durable
but before root was rewritten has the archived ids dropped from root; archives without a marker
are listed for their Phase 2 job to be queued again; a corrupt `.meta.json` is rebuilt from the
messages and archives on disk (logged), never read as zero counters.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from skald.actors.session.frontier import Frontier
from skald.actors.session.turns import message_tokens
from skald.messages.sessions import AutoCommit, Message
from skald.store import sessions as session_store
from skald.store.archive_state import ArchiveListing
from skald.store.session_meta import SessionMeta
from skald.store.sessions import SessionDir
from skald.store.uri import Identity

log = logging.getLogger("skald.session")


@dataclass(slots=True)
class State:
    """Dropped when ownership is lost; the next owner loads it again from disk."""

    sdir: SessionDir
    root: list[Message]
    ids: set[str]
    total: int
    commit_count: int
    created_at: float
    archives: dict[int, ArchiveListing] = field(default_factory=dict)  # only immutable (completed) ones
    pending_recovery: list[int] = field(default_factory=list)  # pending archives found on load
    max_index: int = 0
    frontier: Frontier = field(default_factory=Frontier)
    recovered_meta: bool = False
    requests: dict[str, str] = field(default_factory=dict)  # idempotency key -> message id
    journal_unchecked: bool = True  # the stream's journal not yet compared with the live messages
    auto_commit: AutoCommit | None = None  # the session's opt-in commit policy (kept in its meta)
    last_add: float = 0.0  # monotonic time of the last message, for the idle policy
    auto_running: bool = False  # an auto-commit is in flight
    ident: Identity | None = None  # who last wrote: an idle auto-commit runs as them


def recovered_meta(sdir: SessionDir, ids: set[str], archives: int) -> SessionMeta:
    """Counters from what is on disk: every message id accepted is in root or an archive, and
    every commit made one archive."""
    try:
        created = sdir.path.stat().st_mtime
    except OSError:
        created = 0.0
    return SessionMeta(session_id=sdir.session_id, created_at=created, total_message_count=len(ids),
                       commit_count=archives)


def load(sdir: SessionDir, fence: Callable[[], None]) -> State:
    """Read one session (in a worker thread); `fence` is called before any repair is written."""
    meta, status = session_store.read_session_meta(sdir)
    root = session_store.read_messages(sdir.messages)
    archived: set[str] = set()
    requests: dict[str, str] = {}
    pending: list[int] = []
    indexes = session_store.archive_indexes(sdir)
    for i in indexes:
        listing = session_store.read_archive(sdir, i)
        archived.update(m.id for m in listing.messages)
        requests.update((m.request_id, m.id) for m in listing.messages if m.request_id)
        if listing.done is None and listing.failed is None:
            pending.append(i)
    if any(m.id in archived for m in root):
        # Phase 1 died after the archive was durable but before root was rewritten: finish it.
        fence()
        root = [m for m in root if m.id not in archived]
        session_store.write_atomic_lines(sdir.messages, root)
    ids = archived | {m.id for m in root}
    repaired = False
    if status == "corrupt" or (status == "missing" and ids):  # torn, or lost (written without fsync)
        meta = recovered_meta(sdir, ids, len(indexes))
        log.warning("%s %s: counters rebuilt from disk (total_message_count=%d, commit_count=%d)",
                    status, sdir.meta, meta.total_message_count, meta.commit_count)
        fence()
        session_store.save_session_meta(sdir, meta)
        repaired = True
    meta = meta or SessionMeta(session_id=sdir.session_id)
    return State(sdir=sdir, root=root, ids=ids, total=max(meta.total_message_count, len(ids)),
                 commit_count=max(meta.commit_count, len(indexes)), created_at=meta.created_at,
                 max_index=max(indexes, default=0),
                 pending_recovery=pending, recovered_meta=repaired, auto_commit=meta.auto_commit,
                 requests=requests | {m.request_id: m.id for m in root if m.request_id})


def meta_of(st: State) -> SessionMeta:
    return SessionMeta(session_id=st.sdir.session_id, created_at=st.created_at, total_message_count=st.total,
                       commit_count=st.commit_count, auto_commit=st.auto_commit)


def auto_commit_due(policy: AutoCommit | None, root: list[Message], idle_s: float) -> str | None:
    """Which limit of the session's auto-commit policy its live messages have reached (pure), or
    None. `idle_s`: seconds since the last message."""
    if policy is None or not root:
        return None
    if policy.pending_messages is not None and len(root) >= policy.pending_messages:
        return "pending_messages"
    if policy.pending_tokens is not None and sum(message_tokens(m) for m in root) >= policy.pending_tokens:
        return "pending_tokens"
    if policy.idle_s is not None and idle_s >= policy.idle_s:
        return "idle"
    return None
