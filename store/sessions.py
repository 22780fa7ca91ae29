"""The session directory on disk (docs/design/sessions.md). Every write is atomic or an fsync'd append.

    {session}/messages.jsonl              live (root) messages, one JSON object per line
    {session}/.meta.json                  SessionMeta: created_at, auto_commit; counters as of its last write
                                          (the live ones are derived at load: every id, every archive)
    {session}/tool-results/               externalised tool outputs
    {session}/history/archive_NNN/        messages.jsonl, .meta.json (ArchiveMeta), .overview.md, .abstract.md,
                                          .done (DoneMarker, written last), .failed.json (FailedMarker)

`SessionDir` is the one place a session's paths and URIs are built. The session actor (owner of
the live messages), the archive actor (Phase 2), the assembler (dedup ledger, continuity) and the
retriever (intent context) all go through it; none spells a path of its own.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from dataclasses import dataclass
from typing import Any, TypeVar

import msgspec

from skald.messages.sessions import Message
from skald.store.archive_state import ArchiveListing
from skald.store.message_lines import decode_lines, encode_lines, read_messages_at
from skald.store.session_meta import ArchiveMeta, DoneMarker, FailedMarker, QuarantineMarker, SessionMeta
from skald.store.treeport import Tree, join
from skald.store.uri import Identity, Namespace, VikingPath

log = logging.getLogger("skald.store.sessions")
ARCHIVE_RE = re.compile(r"^archive_(\d+)$")
SESSIONS_URI = "viking://~/sessions"
MESSAGES = "messages.jsonl"
META = ".meta.json"
HISTORY = "history"
TOOL_RESULTS = "tool-results"
OVERVIEW = ".overview.md"
ABSTRACT = ".abstract.md"
DONE = ".done"
FAILED = ".failed.json"
QUARANTINED = ".quarantined.json"
S = TypeVar("S", bound=msgspec.Struct)


@dataclass(frozen=True, slots=True)
class SessionDir:
    """Where one session lives: its resolved URI and its key in the tree (the Tree port every file of
    the session goes through), and the keys of its layout."""

    vp: VikingPath
    tree: Tree
    key: str

    def akey(self, archive_id: str, name: str = "") -> str:
        """The key of an archive's directory, or of a file in it."""
        return join(self.key, HISTORY, archive_id, name)

    def fkey(self, name: str) -> str:
        """The key of a file at the session's top level (`messages.jsonl`, `.meta.json`, the ledger)."""
        return join(self.key, name)

    def tool_result_key(self, filename: str) -> str:
        return join(self.key, TOOL_RESULTS, filename)

    def alive(self) -> bool:
        """Whether the session's directory exists."""
        st = self.tree.stat(self.key)
        return st is not None and st.is_dir

    @property
    def uri(self) -> str:
        return self.vp.uri

    @property
    def session_id(self) -> str:
        return self.vp.name

    def exists(self) -> bool:
        """Whether the session was ever written: its meta or its live log is in the tree."""
        return self.tree.stat(self.fkey(META)) is not None or self.tree.stat(self.fkey(MESSAGES)) is not None

    def archive_uri(self, archive_id: str) -> str:
        return f"{self.vp.uri}/{HISTORY}/{archive_id}"

    def tool_result_uri(self, filename: str) -> str:
        return f"{self.vp.uri}/{TOOL_RESULTS}/{filename}"


def session_dir(ns: Namespace, ident: Identity, session_id: str) -> SessionDir:
    """The caller's session `session_id` (resolved, tenancy-checked, no symlink on the way)."""
    return session_at(ns, ns.resolve(f"{SESSIONS_URI}/{session_id}", ident))


def session_at(ns: Namespace, vp: VikingPath) -> SessionDir:
    """The session directory at a resolved path."""
    return SessionDir(vp, ns.tree, vp.key)


def sessions_root(ns: Namespace, ident: Identity) -> VikingPath:
    return ns.resolve(SESSIONS_URI, ident)


def lease_key(account: str, user: str, session_id: str) -> str:
    """The session's name in the lease bucket and in event subjects (NATS-safe)."""
    return "s" + hashlib.sha1(f"{account}\x00{user}\x00{session_id}".encode()).hexdigest()


def archive_name(index: int) -> str:
    return f"archive_{index:03d}"


# ----- typed metadata -------------------------------------------------------------------


def load(tree: Tree, key: str, typ: type[S]) -> tuple[S | None, str]:
    """A metadata file as its Struct: (value, "ok"), (None, "missing") or (None, "corrupt").
    Corrupt is reported, never silently read as empty: each caller chooses its recovery."""
    try:
        data = tree.read(key)
    except (FileNotFoundError, NotADirectoryError):
        return None, "missing"
    return decoded(data, typ)


def decoded(data: bytes | None, typ: type[S]) -> tuple[S | None, str]:
    """`load` of bytes already read (None: no file; an empty file as `{}`)."""
    if data is None:
        return None, "missing"
    try:
        return msgspec.json.decode(data or b"{}", type=typ), "ok"
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None, "corrupt"


def save(tree: Tree, key: str, value: msgspec.Struct, durable: bool = True) -> None:
    tree.write(key, msgspec.json.encode(value), durable=durable)


def read_session_meta(session: SessionDir) -> tuple[SessionMeta | None, str]:
    return load(session.tree, join(session.key, META), SessionMeta)


def save_session_meta(session: SessionDir, meta: SessionMeta, durable: bool = True) -> None:
    save(session.tree, join(session.key, META), meta, durable)


def read_archive_meta(session: SessionDir, archive_id: str) -> ArchiveMeta:
    """An archive's meta; a corrupt one is logged and read as defaults (no checkpoints, no stamp):
    Phase 2 still summarises the archive's messages, which are in their own file."""
    return _archive_meta(session, archive_id, *load(session.tree, session.akey(archive_id, META), ArchiveMeta))


def _archive_meta(session: SessionDir, archive_id: str, meta: ArchiveMeta | None, status: str) -> ArchiveMeta:
    if status == "corrupt":
        log.warning("corrupt archive meta %s: read as empty", session.akey(archive_id, META))
    return meta or ArchiveMeta()


def update_archive_meta(session: SessionDir, archive_id: str, **changes: Any) -> ArchiveMeta:
    """Read-modify-write: Phase 2 adds fields, never drops Phase 1's."""
    meta = msgspec.structs.replace(read_archive_meta(session, archive_id), **changes)
    save(session.tree, session.akey(archive_id, META), meta)
    return meta


def write_failed(session: SessionDir, archive_id: str, marker: FailedMarker) -> None:
    save(session.tree, session.akey(archive_id, FAILED), marker)


def read_failed(session: SessionDir, archive_id: str) -> FailedMarker | None:
    return _failed(*load(session.tree, session.akey(archive_id, FAILED), FailedMarker))


def _failed(marker: FailedMarker | None, status: str) -> FailedMarker | None:
    """An unreadable `.failed.json` still says the archive failed."""
    return FailedMarker(stage="unknown", error="unreadable .failed.json") if status == "corrupt" else marker


def write_quarantined(session: SessionDir, archive_id: str, marker: QuarantineMarker) -> None:
    save(session.tree, session.akey(archive_id, QUARANTINED), marker)


def clear_failure(session: SessionDir, archive_id: str) -> None:
    """A retry: the quarantine goes first, then the failure (a crash between leaves it failed,
    which the next roll-forward or retry handles); the archive is pending again."""
    for name in (QUARANTINED, FAILED):
        session.tree.remove(session.akey(archive_id, name))


def write_done(session: SessionDir, archive_id: str, marker: DoneMarker) -> None:
    """Written last: from here on the archive is completed and covers what it lists."""
    save(session.tree, session.akey(archive_id, DONE), marker)


# ----- messages -------------------------------------------------------------------------


def write_live(session: SessionDir, messages: list[Message]) -> None:
    """Replace the live log atomically (a commit's retained messages, outputs moved to files)."""
    session.tree.write(session.fkey(MESSAGES), encode_lines(messages))


def read_live(session: SessionDir) -> list[Message]:
    """The live log's messages (a torn last line skipped)."""
    return read_messages_at(session.tree, session.fkey(MESSAGES))


def meta_and_live(session: SessionDir) -> tuple[SessionMeta | None, str, list[Message]]:
    """`read_session_meta` and `read_live` in one read of both files (one exchange on the
    JetStream tree): (meta, its status, the live log's messages)."""
    meta_b, live_b = session.tree.read_many([session.fkey(META), session.fkey(MESSAGES)])
    meta, status = decoded(meta_b, SessionMeta)
    return meta, status, decode_lines(live_b) if live_b else []


def write_bytes(tree: Tree, key: str, data: bytes) -> None:
    tree.write(key, data)


def read_text(tree: Tree, key: str) -> str:
    """A text file of a session, "" when it is missing."""
    try:
        return tree.read(key).decode("utf-8", errors="replace")
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
        return ""


def read_json(tree: Tree, key: str) -> dict[str, Any] | None:
    """A free-form JSON file of a session (the dedup ledger, the Phase 2 journal); None when it is
    missing or unreadable. Their readers validate what they use."""
    try:
        data = json.loads(tree.read(key) or b"{}")
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
        return None
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def write_json(tree: Tree, key: str, data: dict[str, Any]) -> None:
    tree.write(key, json.dumps(data, ensure_ascii=False, sort_keys=True).encode())


# ----- archives -------------------------------------------------------------------------


def archive_indexes(session: SessionDir) -> list[int]:
    try:
        names = [e.name for e in session.tree.list(join(session.key, HISTORY), details=False)]
    except (FileNotFoundError, NotADirectoryError):
        return []
    return sorted(int(m.group(1)) for n in names if (m := ARCHIVE_RE.match(n)))


def text_of(data: bytes | None) -> str | None:
    """Bytes as UTF-8 text, None when absent or not text."""
    try:
        return None if data is None else data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def read_archive(session: SessionDir, index: int) -> ArchiveListing:
    """One archive as its files say (`read_archives` of one)."""
    return read_archives(session, [index])[0]


ARCHIVE_FILES = (DONE, OVERVIEW, FAILED, QUARANTINED, META, MESSAGES)  # what a listing is read from
ARCHIVES_READ_AT_ONCE = 64  # archives whose files one `read_many` asks for: bounds the bytes held at once


def read_archives(session: SessionDir, indexes: list[int]) -> list[ArchiveListing]:
    """Each archive's listing, the files of many archives read in one call (`Tree.read_many`: on
    the JetStream tree one exchange, where a file at a time took a round trip each, six an archive:
    a session of 200 archives loaded in 1,200 of them). A missing file reads as before: no marker,
    no overview, no messages; a corrupt marker as `load` reports it."""
    out: list[ArchiveListing] = []
    n = len(ARCHIVE_FILES)
    for at in range(0, len(indexes), ARCHIVES_READ_AT_ONCE):
        part = indexes[at:at + ARCHIVES_READ_AT_ONCE]
        got = session.tree.read_many([session.akey(archive_name(i), f) for i in part for f in ARCHIVE_FILES])
        out += [_listing(session, i, got[k * n:(k + 1) * n]) for k, i in enumerate(part)]
    return out


def _listing(session: SessionDir, index: int, files: list[bytes | None]) -> ArchiveListing:
    """An archive's listing from its `ARCHIVE_FILES`' bytes (None: no such file)."""
    done_b, overview_b, failed_b, quarantined_b, meta_b, messages_b = files
    aid = archive_name(index)
    done, done_status = decoded(done_b, DoneMarker)
    text = text_of(overview_b)
    quarantine, q_status = decoded(quarantined_b, QuarantineMarker)
    if q_status == "corrupt":  # the marker exists: the archive is quarantined, whatever it says
        quarantine = QuarantineMarker(reason="unreadable .quarantined.json")
    return ArchiveListing(archive_id=aid, index=index, done=done, done_unreadable=done_status == "corrupt",
                          overview=text if text and text.strip() else None,
                          failed=_failed(*decoded(failed_b, FailedMarker)), quarantined=quarantine,
                          messages=decode_lines(messages_b) if messages_b else [],
                          checkpoints=list(_archive_meta(session, aid, *decoded(meta_b, ArchiveMeta)).checkpoints))


def marker_state(session: SessionDir, index: int) -> str:
    """An archive's state from its markers alone, without reading its messages:
    completed | invalid | quarantined | failed | pending | missing."""
    return marker_states(session, [index])[0]


MARKERS = (DONE, OVERVIEW, QUARANTINED, FAILED)  # what an archive's state is read from, at once


def marker_states(session: SessionDir, indexes: list[int]) -> list[str]:
    """`marker_state` of each archive, every marker of all of them read in one call
    (`Tree.read_many`: one exchange on the JetStream tree, where reading them in turn took a round
    trip each); the archives without a marker are looked at again, their directories' stats asked
    together. `.done` decides (completed, or invalid when it does not decode or the overview is
    empty), then `.quarantined.json`, then `.failed.json`."""
    tree = session.tree
    aids = [archive_name(i) for i in indexes]
    got = tree.read_many([session.akey(aid, m) for aid in aids for m in MARKERS])
    out: list[str] = []
    unmarked: list[int] = []  # places in `out` of archives with no marker
    for n in range(len(aids)):
        done, overview, quarantined, failed = got[n * len(MARKERS):(n + 1) * len(MARKERS)]
        if done is not None:
            out.append("completed" if _completed(done, overview) else "invalid")
        elif quarantined is not None:
            out.append("quarantined")
        elif failed is not None:
            out.append("failed")
        else:
            unmarked.append(n)
            out.append("missing")
    for n, d in zip(unmarked, tree.stat_many([session.akey(aids[n]) for n in unmarked]), strict=True):
        if d is not None and d.is_dir:
            out[n] = "pending"
    return out


def _completed(done: bytes, overview: bytes | None) -> bool:
    """What makes an archive completed: a `.done` that decodes and an overview with text."""
    return decoded(done, DoneMarker)[1] == "ok" and bool((text_of(overview) or "").strip())


def create_archive(session: SessionDir, index: int, messages: list[Message], meta: ArchiveMeta) -> str:
    """All or nothing: the archive appears whole (its messages and meta) or not at all; its key."""
    aid = archive_name(index)
    session.tree.write_dir(session.akey(aid), {MESSAGES: encode_lines(messages), META: msgspec.json.encode(meta)})
    return session.akey(aid)


LATEST_WINDOW = 8  # archives, newest first, whose `.done` and overview one read asks for


def latest_completed(session: SessionDir) -> tuple[str, str] | None:
    """(archive id, overview) of the newest completed archive (state from markers only: a `.done`
    that decodes and an overview with text), the markers and the overview read together, the
    newest LATEST_WINDOW archives at a time (the newest is nearly always the one)."""
    indexes = archive_indexes(session)
    for end in range(len(indexes), 0, -LATEST_WINDOW):
        window = indexes[max(0, end - LATEST_WINDOW):end]
        got = session.tree.read_many([session.akey(archive_name(i), m) for i in window for m in (DONE, OVERVIEW)])
        for k in reversed(range(len(window))):
            done, overview = got[2 * k], got[2 * k + 1]
            if done is not None and _completed(done, overview):
                return archive_name(window[k]), text_of(overview) or ""
    return None


def latest_overview(session: SessionDir) -> str:
    """The overview of the newest completed archive, or ''."""
    found = latest_completed(session)
    return found[1] if found else ""


def message_text(m: Message) -> str:
    return "\n".join(getattr(p, "text", "") for p in m.parts if getattr(p, "text", None))


def recent_messages(session: SessionDir, n: int) -> list[tuple[str, str]]:
    """The last `n` live messages that carry text, as (role, text)."""
    out: list[tuple[str, str]] = [(m.role, t) for m in read_live(session) if (t := message_text(m)).strip()]
    return out[-n:]
