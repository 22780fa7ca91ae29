"""The reply envelope every subject answers with, and the identity headers requests carry."""

from __future__ import annotations

from typing import Any, Literal

import msgspec

H_API_KEY = "Skald-Api-Key"
H_ACCOUNT = "Skald-Account"
H_USER = "Skald-User"
H_AGENT = "Skald-Agent"
H_PEER = "Skald-Actor-Peer"
H_STATUS = "Skald-Status"
H_TIMEOUT_MS = "Skald-Timeout-Ms"
# Read-your-writes token: the index sequence a client has seen acknowledged by a write.
H_INDEX_SEQ = "Skald-Index-Seq"
H_DEPRECATION = "Deprecation"
# Replays: the time the original request was accepted (seconds since the epoch).
H_CLOCK = "Skald-Clock"
# Actor-to-actor hops (internal and direct subjects): the workers' shared secret, and whether the
# original caller held the root key. Trusted only together.
H_WORKER = "Skald-Worker-Token"
H_ROOT = "Skald-Root"
CONTENT_TYPE = "Content-Type"
MSGPACK = "application/msgpack"


class ErrorBody(msgspec.Struct, kw_only=True):
    """A typed error as the wire carries it: code, message, details."""

    code: str
    message: str
    details: dict[str, Any] = {}


class Reply(msgspec.Struct, kw_only=True, omit_defaults=True):
    """`{"status": "ok", "result": ...}` or `{"status": "error", "error": {...}}`."""

    status: Literal["ok", "error"]
    result: Any = None
    error: ErrorBody | None = None
