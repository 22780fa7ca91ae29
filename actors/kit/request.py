"""The per-request context handed to handlers: who asks, until when, what they have seen."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from skald.store.uri import Identity


@dataclass(slots=True)
class Ctx:
    """What a handler knows of its request beyond the body: who asks, by when, what they have seen written."""

    identity: Identity
    deadline: float  # time.monotonic() by which the reply must leave
    index_seq: int = 0  # read-your-writes: the index sequence the caller has seen acknowledged
    deprecated: list[str] = field(default_factory=list)  # aliases used; the host adds `Deprecation: true`
    forwarded: bool = False  # sent on by another worker to the owner of what it touches
    relayed: bool = False  # this worker sent the request on; the worker that did the work journals it
    # Called by a handler once its write can no longer fail to happen (a commit's archive is
    # durable): the host journals it from then on, beside the handler's remaining steps.
    decided: Callable[[], None] = lambda: None

    def remaining(self) -> float:
        return max(0.0, self.deadline - time.monotonic())

    @classmethod
    def local(cls, identity: Identity | None = None, timeout_s: float = 30.0) -> Ctx:
        """A context for calling a handler in-process (tests, benchmarks)."""
        return cls(identity or Identity(), time.monotonic() + timeout_s)


@dataclass(slots=True)
class Attempt:
    """A work-queue delivery: which try this is, so a job can tell a retry from a first run."""

    delivered: int
    queue: str
