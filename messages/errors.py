"""Typed errors, each knowing its wire code.

    SkaldError
    ├── InvalidArgument      INVALID_ARGUMENT
    ├── Unauthenticated      UNAUTHENTICATED
    ├── PermissionDenied     PERMISSION_DENIED
    ├── NotFound             NOT_FOUND
    ├── Conflict             CONFLICT
    ├── DeadlineExceeded     DEADLINE_EXCEEDED
    ├── Unavailable          UNAVAILABLE
    └── Internal             INTERNAL

Handlers raise these; the actor host turns them into the error envelope and clients turn the
envelope back into the same class, so both ends share one hierarchy.
"""

from __future__ import annotations

from typing import Any, ClassVar

CODES = (
    "INVALID_ARGUMENT",
    "UNAUTHENTICATED",
    "PERMISSION_DENIED",
    "NOT_FOUND",
    "CONFLICT",
    "DEADLINE_EXCEEDED",
    "UNAVAILABLE",
    "INTERNAL",
)


class SkaldError(Exception):
    """Any typed error of the API; `code` is the wire code, `details` says what was wrong."""

    code: ClassVar[str] = "INTERNAL"

    def __init__(self, message: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.details = details or {}


class InvalidArgument(SkaldError):
    """The request is wrong (a field, a value, a path); retrying it unchanged fails again."""

    code = "INVALID_ARGUMENT"


class Unauthenticated(SkaldError):
    """No valid API key (or worker secret) came with a request that needs one."""

    code = "UNAUTHENTICATED"


class PermissionDenied(SkaldError):
    """The caller's key may not do this (another account, user, or a root-only operation)."""

    code = "PERMISSION_DENIED"


class NotFound(SkaldError):
    """What the request names does not exist."""

    code = "NOT_FOUND"


class Conflict(SkaldError):
    """The request collides with the current state (a file in the way, a concurrent change); read again,
    then retry."""

    code = "CONFLICT"


class DeadlineExceeded(SkaldError):
    """No answer within the request's deadline; a write may or may not have happened (retry with its id)."""

    code = "DEADLINE_EXCEEDED"


class Unavailable(SkaldError):
    """No worker can serve this right now (none running, at capacity, the bus or the disk); retry later."""

    code = "UNAVAILABLE"


class Internal(SkaldError):
    """A bug on the server side; the message says what failed."""

    code = "INTERNAL"


BY_CODE: dict[str, type[SkaldError]] = {
    cls.code: cls
    for cls in (
        InvalidArgument,
        Unauthenticated,
        PermissionDenied,
        NotFound,
        Conflict,
        DeadlineExceeded,
        Unavailable,
        Internal,
    )
}


def from_wire(code: str, message: str, details: dict[str, Any] | None = None) -> SkaldError:
    """Rebuild the typed error a reply carried (unknown codes become Internal)."""
    return BY_CODE.get(code, Internal)(message, details)
