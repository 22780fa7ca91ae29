"""Model servers fail transiently: one POST with bounded retries, for the embedding, chat and
rerank clients alike.

Retried: connection errors and timeouts of one attempt, 429 and 5xx. Not retried: other 4xx (the
request itself is wrong). The wait is the server's `Retry-After` when it sends one, else
exponential backoff with jitter; either way the whole call stays inside its deadline, so a caller's
timeout fuse still means what it says. Built on tenacity (Apache-2.0, the common choice for this).
"""

from __future__ import annotations

import asyncio
import random
import time
from typing import Any

from tenacity import AsyncRetrying, RetryCallState, retry_if_exception, stop_after_attempt, wait_random_exponential

from skald.runtime.models.httpjson import AttemptTimeout, JsonClient, Response, TransportError

RETRY_STATUS = frozenset({429, 500, 502, 503, 504})
ATTEMPTS = 5
BACKOFF_MAX_S = 8.0
MIN_ATTEMPT_S = 0.05  # no retry is started with less time than this left


class Transient(Exception):  # noqa: N818 - a signal for the retry loop, raised only inside it
    """A model server's answer worth retrying (429, 5xx)."""

    def __init__(self, response: Response) -> None:
        super().__init__(f"HTTP {response.status}")
        self.response = response


def retry_after(response: Response | None) -> float | None:
    """Seconds from a `Retry-After` header (delta-seconds form), if any."""
    raw = response.headers.get("retry-after") if response is not None else None
    try:
        return max(0.0, float(raw)) if raw is not None else None
    except ValueError:
        return None  # an HTTP-date: fall back to our own backoff


class Stats:
    """Counts a client's retries (reported in its worker's health)."""

    def __init__(self) -> None:
        self.retries = 0
        self.gave_up = 0


async def post_json(client: JsonClient, url: str, body: Any, deadline_s: float,
                    stats: Stats | None = None, attempts: int = ATTEMPTS) -> Response:
    """POST `body`; the first non-transient answer (raised for an error status), or the last
    transient failure once attempts or the deadline run out."""
    end = time.monotonic() + deadline_s
    answered: list[Transient] = []  # the server's own failing answers, latest last
    backoff = wait_random_exponential(multiplier=0.25, max=BACKOFF_MAX_S)

    def wait(state: RetryCallState) -> float:
        exc = state.outcome.exception() if state.outcome else None
        hinted = retry_after(exc.response) if isinstance(exc, Transient) else None
        pause = hinted if hinted is not None else backoff(state)
        return max(0.0, min(pause, end - time.monotonic()))

    def deadline_left(state: RetryCallState) -> bool:
        return time.monotonic() >= end - MIN_ATTEMPT_S

    def transient(e: BaseException) -> bool:
        return isinstance(e, (Transient, TransportError)) and time.monotonic() < end

    def before_sleep(state: RetryCallState) -> None:
        if stats is not None:
            stats.retries += 1

    async def attempt() -> Response:
        r = await client.post(url, body, max(0.05, end - time.monotonic()))
        if r.status in RETRY_STATUS:
            answered.append(Transient(r))
            raise answered[-1]
        r.raise_for_status(url)
        return r

    try:
        try:
            return await attempt()  # the common case, without building a retry loop
        except (Transient, TransportError) as e:
            if attempts <= 1 or not transient(e):
                raise
            hinted = retry_after(e.response) if isinstance(e, Transient) else None
        if stats is not None:
            stats.retries += 1
        first_pause = hinted if hinted is not None else random.uniform(0.0, 0.25)  # the backoff's first step
        await asyncio.sleep(max(0.0, min(first_pause, end - time.monotonic())))
        retrying = AsyncRetrying(stop=stop_after_attempt(attempts - 1) | deadline_left, wait=wait,
                                 retry=retry_if_exception(transient), before_sleep=before_sleep, reraise=True)
        async for tried in retrying:
            with tried:
                return await attempt()
    except Transient as e:
        if stats is not None:
            stats.gave_up += 1
        e.response.raise_for_status(url)
        raise
    except AttemptTimeout as e:
        if answered:  # the server kept failing and the deadline cut off a retry: report its failure
            if stats is not None:
                stats.gave_up += 1
            answered[-1].response.raise_for_status(url)
        # out of time without an answer: the same error a caller's own fuse raises
        raise TimeoutError(f"no answer from {url} within {deadline_s:.1f}s") from e
    raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises
