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
    code: ClassVar[str] = "INTERNAL"

    def __init__(self, message: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.details = details or {}


class InvalidArgument(SkaldError):
    code = "INVALID_ARGUMENT"


class Unauthenticated(SkaldError):
    code = "UNAUTHENTICATED"


class PermissionDenied(SkaldError):
    code = "PERMISSION_DENIED"


class NotFound(SkaldError):
    code = "NOT_FOUND"


class Conflict(SkaldError):
    code = "CONFLICT"


class DeadlineExceeded(SkaldError):
    code = "DEADLINE_EXCEEDED"


class Unavailable(SkaldError):
    code = "UNAVAILABLE"


class Internal(SkaldError):
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
