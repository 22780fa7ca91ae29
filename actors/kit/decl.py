"""Declaring what an actor serves, without importing the bus.

    class Retriever:
        @handles(catalog.SEARCH_FIND)
        async def find(self, req: FindRequest, ctx: Ctx) -> FindResult: ...

        @consumes(catalog.INGEST)
        async def run_job(self, job: IngestJob, att: Attempt) -> None: ...

The operation (its name, request Struct, public or internal) comes from `messages/catalog.py`,
so a handler cannot drift from the table the client and the gateway read.

The runtime's actor host reads these marks and binds them to subjects, queue groups and
JetStream consumers; the actor stays plain Python that a unit test can call directly.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from skald.messages.catalog import Op, Queue

_MARK = "__skald_decl__"


class RetryLater(Exception):  # noqa: N818 - a signal, not an error
    """Raised by a job that is not ready yet (e.g. waiting for its predecessor): the work queue
    redelivers it after `delay_s` without holding a worker, and it is not a failure."""

    def __init__(self, delay_s: float, reason: str = "") -> None:
        super().__init__(reason)
        self.delay_s = delay_s


@dataclass(frozen=True, slots=True)
class Handles:
    """A handler's declaration: the operation it serves and how the host runs it (deadline, concurrency, journal)."""

    op: str
    request: type
    timeout_s: float = 30.0
    # Requests of this handler running at once in one worker (None: only the worker-wide cap).
    # Past it the host answers UNAVAILABLE, like the worker-wide cap, instead of queueing.
    concurrency: int | None = None
    internal: bool = False  # served on `{prefix}.internal.{op}`: actor to actor, not part of the public API
    journal: bool = False  # an accepted request is a state change: published as a write-journal event
    # The handler builds its result anew on every call and keeps no reference to it: a caller in
    # the same process may take it as it is, with no copy (`call_local(into=...)`).
    fresh_result: bool = False


@dataclass(frozen=True, slots=True)
class Consumes:
    """A work-queue consumer's declaration: the queue, its job type and its delivery rules."""

    queue: str
    job: type
    ack_wait_s: float = 60.0
    max_deliver: int = 8
    concurrency: int = 2


def handles(op: Op, *, timeout_s: float = 30.0, concurrency: int | None = None,
            journal: bool = False, fresh_result: bool = False) -> Callable[[Any], Any]:
    def mark(fn: Any) -> Any:
        setattr(fn, _MARK, Handles(op.name, op.request, timeout_s, concurrency, internal=op.internal,
                                   journal=journal, fresh_result=fresh_result))
        return fn

    return mark


def consumes(queue: Queue, *, ack_wait_s: float = 60.0, max_deliver: int = 8,
             concurrency: int = 2) -> Callable[[Any], Any]:
    def mark(fn: Any) -> Any:
        setattr(fn, _MARK, Consumes(queue.name, queue.job, ack_wait_s, max_deliver, concurrency))
        return fn

    return mark


def declarations(actor: object) -> list[tuple[Handles | Consumes, Callable[..., Any]]]:
    out = []
    for name in dir(type(actor)):
        fn = getattr(type(actor), name, None)
        decl = getattr(fn, _MARK, None)
        if decl is not None:
            out.append((decl, getattr(actor, name)))
    return out
