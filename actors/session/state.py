"""The owner's view of one session: what it holds in memory between requests (loading it from
disk, and repairing what a crash left, is `recovery.py`)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from skald.actors.session.frontier import Frontier
from skald.actors.session.turns import message_tokens
from skald.messages.sessions import AutoCommit, Message
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
