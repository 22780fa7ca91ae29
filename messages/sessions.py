"""Sessions (docs/design/sessions.md): messages with typed parts, the session subjects, the Phase 2 job."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta

SessionId = Annotated[str, Meta(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.@-]{0,127}$")]
MessageId = Annotated[str, Meta(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_.:@-]+$")]
MessageKind = Literal["user_query", "assistant_step", "tool_transport", "checkpoint"]
MAX_PARTS = 256


class TextPart(msgspec.Struct, tag="text", kw_only=True, forbid_unknown_fields=True):
    """A message part of plain text."""

    text: str


class ContextPart(msgspec.Struct, tag="context", kw_only=True, forbid_unknown_fields=True):
    """A message part that points at context the agent was given (a URI and what it held)."""

    uri: str = ""
    abstract: str = ""
    context_type: str = "memory"


class ToolPart(msgspec.Struct, tag="tool", kw_only=True, forbid_unknown_fields=True, omit_defaults=True):
    """A tool call with its input, and its output once it came (large outputs move to a file, leaving a preview and its
    URI)."""

    tool_id: str = ""
    tool_name: str = ""
    tool_input: Any = None
    tool_output: str = ""
    tool_status: str = ""
    # Set when the output was externalised to `tool-results/` (the Turn was over its budget).
    tool_output_uri: str | None = None
    tool_output_chars: int | None = None
    tool_output_truncated: bool = False


Part = TextPart | ContextPart | ToolPart


class Message(msgspec.Struct, kw_only=True, omit_defaults=True):
    """One message of a session: its id, role, parts and the turn it belongs to."""

    id: str
    role: Literal["user", "assistant"]
    parts: list[Part]
    created_at: float = 0.0
    turn_id: str | None = None
    message_kind: MessageKind | None = None
    source_message_ids: list[str] | None = None
    request_id: str | None = None  # the caller's idempotency key, kept so a retry finds its message


class _Req(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, frozen=True):
    pass


class AutoCommit(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, frozen=True, omit_defaults=True):
    """A session's opt-in commit policy: the session actor commits by itself (Phase 2 in the
    background, default retention) once any set limit is reached. Unset: only explicit commits."""

    pending_messages: Annotated[int, Meta(ge=1, le=100_000)] | None = None  # live messages
    pending_tokens: Annotated[int, Meta(ge=64, le=10_000_000)] | None = None  # their estimated tokens
    idle_s: Annotated[float, Meta(ge=1.0, le=30 * 86_400.0)] | None = None  # since the last message


class CreateRequest(_Req, frozen=True):
    """The request of `sessions.create`: create a session."""

    session_id: SessionId | None = None
    # Set (or replace, on an existing session) the session's auto-commit policy.
    auto_commit: AutoCommit | None = None


class SessionRef(_Req, frozen=True):
    """The request of `sessions.get`, `sessions.delete`, `sessions.archives`: a session's counters."""

    session_id: SessionId


class RetryArchiveRequest(_Req, frozen=True):
    """The request of `sessions.retry_archive`: run Phase 2 of a failed or quarantined archive again."""

    session_id: SessionId
    archive_id: Annotated[str, Meta(pattern=r"^archive_\d{3,9}$")]


class ListRequest(_Req, frozen=True):
    """The request of `sessions.list`: list sessions."""

    limit: Annotated[int, Meta(ge=1, le=10_000)] = 100


class AddMessageRequest(_Req, frozen=True):
    """The request of `sessions.add_message`: append a message to a session."""

    session_id: SessionId
    role: Literal["user", "assistant"]
    parts: Annotated[list[Part], Meta(min_length=1, max_length=MAX_PARTS)]
    id: MessageId | None = None
    turn_id: Annotated[str, Meta(max_length=128)] | None = None
    message_kind: MessageKind | None = None
    source_message_ids: list[str] | None = None
    # An idempotency key for adds without an `id`: a retry with the same key is answered with the
    # message the first attempt stored (`duplicate: true`) instead of storing it again.
    request_id: Annotated[str, Meta(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_.:-]+$")] | None = None


class CommitRequest(_Req, frozen=True):
    """The request of `sessions.commit`: commit a session (archive, summarise)."""

    session_id: SessionId
    keep_recent_count: Annotated[int, Meta(ge=0, le=100_000)] | None = None
    retention_mode: Literal["turn_budget"] | None = None
    keep_recent_turn_count: Annotated[int, Meta(ge=0, le=10_000)] | None = None
    retained_message_token_budget: Annotated[int, Meta(ge=0, le=10_000_000)] | None = None
    min_raw_tail_steps: Annotated[int, Meta(ge=0, le=1_000)] | None = None
    wait: bool = False


class UsedRequest(_Req, frozen=True):
    """What the agent used of what it was given (OpenViking's `session.used`): each node's use
    count (`active_count`, which hotness ranks by) goes up by one."""

    session_id: SessionId
    uris: Annotated[list[Annotated[str, Meta(min_length=1, max_length=4096)]], Meta(min_length=1, max_length=100)]
    # A retry with the same key counts nothing twice (within JetStream's duplicate window).
    request_id: Annotated[str, Meta(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_.:-]+$")] | None = None


class UsedResult(msgspec.Struct, kw_only=True):
    """The reply of `sessions.used`."""

    session_id: str
    counted: list[str]  # the nodes counted, canonical (a level suffix or `~` resolved)


class ContextRequest(_Req, frozen=True):
    """The request of `sessions.context`: a session's context: overview + live messages."""

    session_id: SessionId
    # Fit the live messages (after the overview) to this many tokens, newest first, never splitting
    # an assistant step from its tool results; None: every live message.
    max_tokens: Annotated[int, Meta(ge=64, le=1_000_000)] | None = None


class SessionInfo(msgspec.Struct, kw_only=True):
    """The reply of `sessions.create`, `sessions.get`."""

    session_id: str
    uri: str
    created_at: float = 0.0
    message_count: int = 0
    total_message_count: int = 0
    commit_count: int = 0
    archives: int = 0
    auto_commit: AutoCommit | None = None


class SessionList(msgspec.Struct, kw_only=True):
    """The reply of `sessions.list`."""

    sessions: list[SessionInfo]


class AddMessageResult(msgspec.Struct, kw_only=True):
    """The reply of `sessions.add_message`."""

    session_id: str
    message_id: str
    message_count: int
    total_message_count: int
    duplicate: bool = False


class CommitResult(msgspec.Struct, kw_only=True, omit_defaults=True):
    """The reply of `sessions.commit`."""

    session_id: str
    status: Literal["accepted", "skipped"]
    archive_uri: str | None = None
    archive_id: str | None = None
    archived_messages: int = 0
    retained_messages: int = 0
    reason: str | None = None
    plan: dict[str, Any] | None = None
    phase2: str | None = None  # with wait: completed | failed | pending
    # With wait, once Phase 2 completed: whether its memories are findable yet (indexed | failed |
    # none | pending), and the index sequence a later search waits for (the client sends it on).
    memories: str | None = None
    index_seq: int = 0


class ContextStats(msgspec.Struct, kw_only=True):
    """What the session context served: messages trimmed to the budget, archives by state, tokens."""

    archives: int = 0
    completed: int = 0
    pending: int = 0
    failed: int = 0
    invalid: int = 0
    uncovered_messages: int = 0
    root_messages: int = 0
    checkpoints: int = 0
    estimated_tokens: int = 0
    trimmed_messages: int = 0  # live messages left out to fit `max_tokens`


class ContextResult(msgspec.Struct, kw_only=True):
    """The reply of `search.recall`, `sessions.context`, `assemble.context`."""

    session_id: str
    latest_archive_overview: str
    messages: list[Message]
    stats: ContextStats


class ArchiveInfo(msgspec.Struct, kw_only=True, omit_defaults=True):
    """The reply of `sessions.retry_archive`."""

    archive_id: str
    uri: str
    state: Literal["pending", "completed", "failed", "invalid", "quarantined"]
    coverage: dict[str, Any] | None = None
    failure: dict[str, Any] | None = None
    quarantine: dict[str, Any] | None = None  # why it left the live context; `sessions.retry_archive` brings it back
    message_count: int = 0


class ArchivesResult(msgspec.Struct, kw_only=True):
    """The reply of `sessions.archives`."""

    session_id: str
    archives: list[ArchiveInfo]


class Phase2Job(msgspec.Struct, kw_only=True, frozen=True):
    """The archive actor's work: summarise one archive (and roll forward earlier failed ones)."""

    account: str
    user: str
    session_id: str
    archive_id: str


class AddedEntry(msgspec.Struct, kw_only=True, omit_defaults=True):
    """A stored message's journal line: the message and where it was added."""

    session_key: str
    session_id: str
    message: Message
    account: str = "default"
    user: str = "default"
    agent: str = "default"
    peer: str | None = None


class MessagesAdded(msgspec.Struct, kw_only=True):
    """`<prefix>.evt.session.messages_added.<session key>`: one session's share of a batch of
    durable appends, in order; also the journal entry of each message for replays."""

    entries: list[AddedEntry]


class DeleteResult(msgspec.Struct, kw_only=True):
    """The reply of `sessions.delete`."""

    session_id: str
    deleted: bool
