"""A session's archives as its owner reads them: the tail past the context frontier (advancing it
over archives that became final), every listing with the completed ones cached, and one archive's
state as the API reports it. State comes from markers only (docs/design/sessions.md)."""

from __future__ import annotations

import msgspec

from skald.actors.session import frontier
from skald.actors.session.state import State
from skald.messages import sessions as session_msgs
from skald.store import sessions as session_store
from skald.store.archive_state import ArchiveListing, ArchiveState
from skald.store.sessions import SessionDir


def tail_states(st: State) -> list[ArchiveState]:
    """The archives past the frontier, read from disk; the frontier advances over final ones."""
    sdir = st.sdir
    tail = session_store.read_archives(sdir, list(range(st.frontier.index + 1, st.max_index + 1)))
    tail = [a for a in tail if a.messages or a.done is not None or a.failed is not None
            or sdir.tree.stat(sdir.akey(a.archive_id)) is not None]
    st.frontier, states = frontier.advance(st.frontier, tail, st.root, sdir.archive_uri)
    return states

def listings(st: State) -> list[ArchiveListing]:
    """Every archive of a session, a completed one read once and kept (completed is terminal)."""
    indexes = session_store.archive_indexes(st.sdir)
    read = {a.index: a for a in session_store.read_archives(st.sdir, [i for i in indexes if i not in st.archives])}
    for i, listing in read.items():
        if listing.done is not None and listing.overview is not None:
            st.archives[i] = listing  # completed is terminal: never read again
    return [read.get(i) or st.archives[i] for i in indexes]


def archive_info(sdir: SessionDir, s: ArchiveState) -> session_msgs.ArchiveInfo:
    """One archive as `sessions.archives` and `retry_archive` report it."""
    a = s.listing
    return session_msgs.ArchiveInfo(
        archive_id=a.archive_id, uri=sdir.archive_uri(a.archive_id), state=s.state,  # type: ignore[arg-type]
        coverage=msgspec.to_builtins(a.done) if a.done is not None else None,
        failure=msgspec.to_builtins(a.failed) if a.failed is not None else None,
        quarantine=msgspec.to_builtins(a.quarantined) if a.quarantined is not None else None,
        message_count=len(a.messages))
