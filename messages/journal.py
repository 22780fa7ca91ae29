"""The write journal: one event per accepted write (`<prefix>.evt.write.<op>`), enough to
replay it into another deployment."""

from __future__ import annotations

from typing import Any

import msgspec


class JournalEntry(msgspec.Struct, kw_only=True, omit_defaults=True):
    """One accepted write as the journal keeps it: the request as applied, who made it and when."""

    op: str
    account: str
    user: str
    agent: str = "default"
    peer: str | None = None
    at: float  # when the original was accepted; a replay sends it as `Skald-Clock`
    body: Any  # the request as applied (JSON)
    ids: dict[str, str] = {}  # ids the original assigned (a message's id), pinned on replay


class ModelOutput(msgspec.Struct, kw_only=True, omit_defaults=True):
    """A model's answer, logged as `<prefix>.evt.model.output.<key>` before anything built from it is
    written. `key` is the hash of everything the answer depends on (model, prompts, limits), so a
    replay that reaches the same inputs finds the same answer without asking a model."""

    key: str
    model: str  # the configured model the call went to
    answered_by: str  # the model name the server gave back
    text: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    at: float = 0.0
