"""The typed metadata of a session directory (docs/design/sessions.md): what `.meta.json`, `.done` and
`.failed.json` hold. Decoding is lenient on purpose (no forbidden fields, a default for every
field): a directory written by an older build still reads, and what a newer one adds survives a
read-modify-write because Phase 2 only ever adds fields.
"""

from __future__ import annotations

from typing import Any

import msgspec

from skald.messages.sessions import AutoCommit


class SessionMeta(msgspec.Struct, kw_only=True):
    """`{session}/.meta.json`. `total_message_count` only grows: it is the session's clock."""

    session_id: str = ""
    created_at: float = 0.0
    total_message_count: int = 0
    commit_count: int = 0
    auto_commit: AutoCommit | None = None


class CheckpointRequest(msgspec.Struct, kw_only=True):
    """Phase 1 asks Phase 2 to summarise the archived steps of a Turn whose user anchor stays live."""

    index: int = 0
    turn_anchor_message_id: str | None = None
    source_message_ids: list[str] = []
    budget_tokens: int = 400


class Checkpoint(msgspec.Struct, kw_only=True, omit_defaults=True):
    """A written checkpoint: the summary that stands for `source_message_ids` after its anchor."""

    turn_anchor_message_id: str | None = None
    source_message_ids: list[str] = []
    abstract: str = ""
    estimated_tokens: int = 0
    archive_id: str = ""
    archive_uri: str = ""  # set when the context frontier folds its archive away


class ArchiveMeta(msgspec.Struct, kw_only=True, omit_defaults=True):
    """`history/archive_NNN/.meta.json`: Phase 1 writes the plan, Phase 2 adds what it produced."""

    archive_id: str = ""
    session_id: str = ""
    created_at: float = 0.0  # the commit's acceptance time; Phase 2 stamps with it (replays match)
    retention_plan: dict[str, Any] = {}
    checkpoint_requests: list[CheckpointRequest] = []
    checkpoints: list[Checkpoint] = []
    overview_tokens: int | None = None
    rolled_forward: list[str] = []


class DoneMarker(msgspec.Struct, kw_only=True):
    """`.done`, written last: what the completed archive covers, including earlier failed archives
    it rolled forward. An old empty marker decodes to all defaults."""

    starting_message_id: str | None = None
    ending_message_id: str | None = None
    coverage_start_archive: str | None = None
    coverage_end_archive: str | None = None
    covered_failed_archives: list[str] = []
    completed_at: float | None = None


class FailedMarker(msgspec.Struct, kw_only=True):
    """`.failed.json`: Phase 2 failed at `stage`; the raw messages stay in the session's context
    until a later archive rolls them forward. `attempts` counts the Phase 2 runs that tried to
    cover this archive and failed (or left it out for room)."""

    stage: str = "phase2"
    error: str = ""
    time: float = 0.0
    attempts: int = 1


class QuarantineMarker(msgspec.Struct, kw_only=True):
    """`.quarantined.json`: an archive that failed too often leaves the live context (its raw stays
    in its directory, readable) and is no longer rolled forward, until `sessions.retry_archive`."""

    reason: str = ""
    attempts: int = 0
    time: float = 0.0
