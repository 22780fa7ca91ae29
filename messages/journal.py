"""The write journal: one event per accepted write (`<prefix>.evt.write.<op>`), enough to
replay it into another deployment."""

from __future__ import annotations

from typing import Any

import msgspec


class JournalEntry(msgspec.Struct, kw_only=True, omit_defaults=True):
    op: str
    account: str
    user: str
    agent: str = "default"
    peer: str | None = None
    at: float  # when the original was accepted; a replay sends it as `Skald-Clock`
    body: Any  # the request as applied (JSON)
    ids: dict[str, str] = {}  # ids the original assigned (a message's id), pinned on replay
