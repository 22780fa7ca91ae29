"""Skald's JetStream streams (work, index, events) and what counts as a transient bus failure.

Every worker declares the streams on start; the declaration waits for a cluster still electing
its JetStream leader and never lowers the replicas a deployment already has.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from nats.errors import (
    ConnectionClosedError,
    ConnectionDrainingError,
    ConnectionReconnectingError,
    FlushTimeoutError,
    NoRespondersError,
    OutboundBufferLimitError,
    StaleConnectionError,
)
from nats.errors import TimeoutError as NatsTimeout
from nats.js import api
from nats.js.errors import (
    BadRequestError,
    NoStreamResponseError,
    NotFoundError,
    ServerError,
    ServiceUnavailableError,
)
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception_type, stop_after_delay, wait_exponential

log = logging.getLogger("skald.bus")
DUPLICATE_WINDOW_S = 120.0


def stream_name(prefix: str, kind: str) -> str:
    return f"{prefix}_{kind}".upper().replace(".", "_").replace("-", "_")


# Failures that say "the bus or JetStream is busy right now" (no responders, a stream electing a
# leader, a reconnect, a request that timed out): worth a retry, never INTERNAL.
TRANSIENT: tuple[type[BaseException], ...] = (
    NoRespondersError, NoStreamResponseError, ServiceUnavailableError, ServerError, NatsTimeout,
    ConnectionClosedError, ConnectionReconnectingError, ConnectionDrainingError, FlushTimeoutError,
    OutboundBufferLimitError, StaleConnectionError,
)
RETRY_AFTER_MS = 500  # the hint given with a transient failure; a leader election takes a few seconds


def stream_configs(prefix: str, replicas: int, events_max_age_s: float = 0.0) -> list[api.StreamConfig]:
    """The streams' configurations. The index and event streams are logs kept for replay, read
    front to back by a replica catching up or a replay, and written in full text: the server
    stores their sealed blocks S2-compressed (a section row on the index stream 2,685 -> about
    1,170 bytes on disk with Zipf text; the block being written stays plain, so following the
    tail costs nothing more). A stream created before is switched by the update every start does."""
    return [
        api.StreamConfig(
            name=stream_name(prefix, "work"), subjects=[f"{prefix}.work.>"],
            retention=api.RetentionPolicy.WORK_QUEUE, storage=api.StorageType.FILE,
            duplicate_window=DUPLICATE_WINDOW_S, max_msg_size=8 * 1024 * 1024, num_replicas=replicas,
        ),
        api.StreamConfig(
            # One message kept per row subject: the stream *is* the latest state of the index.
            name=stream_name(prefix, "index"), subjects=[f"{prefix}.index.row.>"],
            retention=api.RetentionPolicy.LIMITS, storage=api.StorageType.FILE,
            max_msgs_per_subject=1, duplicate_window=DUPLICATE_WINDOW_S, num_replicas=replicas,
            compression=api.StoreCompression.S2,
        ),
        api.StreamConfig(
            # Use counts (active_count): a JetStream counter per node (`Nats-Incr`), one message
            # kept per subject, holding the total; replicas read the totals and follow changes.
            name=stream_name(prefix, "usage"), subjects=[f"{prefix}.usage.>"],
            retention=api.RetentionPolicy.LIMITS, storage=api.StorageType.FILE, allow_msg_counter=True,
            max_msgs_per_subject=1, duplicate_window=DUPLICATE_WINDOW_S, num_replicas=replicas,
        ),
        api.StreamConfig(
            name=stream_name(prefix, "events"), subjects=[f"{prefix}.evt.>"],
            retention=api.RetentionPolicy.LIMITS, storage=api.StorageType.FILE,
            duplicate_window=DUPLICATE_WINDOW_S, num_replicas=replicas,
            max_age=events_max_age_s or None, compression=api.StoreCompression.S2,
        ),
    ]


async def ensure_streams(js: Any, prefix: str, replicas: int = 1, ready_timeout_s: float = 60.0,
                         events_max_age_s: float = 0.0) -> None:
    """Create or update Skald's three streams (idempotent; every worker calls it on start).

    `replicas` is 3 on a 3-node cluster (R3): a stream survives the loss of one server. A worker
    never lowers what the deployment has: a stream (or the lease bucket) already at more replicas
    keeps them, with a warning naming both numbers. A cluster still electing its JetStream leader
    is waited for with bounded backoff (`ready_timeout_s`), not taken as a fatal error."""
    deadline = time.monotonic() + ready_timeout_s

    async def ready(step: Callable[[], Awaitable[None]], what: str) -> None:
        def give_up(e: Exception) -> Exception:
            return RuntimeError(f"JetStream did not answer for {what} in time ({type(e).__name__}); "
                                "is the cluster up and does it have a JetStream leader?")
        await retry_transient(step, max(0.0, deadline - time.monotonic()), give_up, 0.1, 2.0, what)

    for cfg in stream_configs(prefix, replicas, events_max_age_s):
        await ready(lambda c=cfg: _ensure_stream(js, c), f"stream {cfg.name}")
    kv = "KV_" + stream_name(prefix, "leases")
    await ready(lambda: _raise_replicas(js, kv, replicas), f"stream {kv}")


async def retry_transient(op: Callable[[], Awaitable[Any]], seconds: float, give_up: Callable[[Exception], Exception],
                          first_pause: float = 0.05, max_pause: float = 1.0, what: str = "") -> Any:
    """One JetStream step, retried with exponential backoff (tenacity) while it fails transiently
    (no leader yet, no responders, a timeout) for up to `seconds`; then `give_up(last error)` is
    raised. With `what`, each retry is logged. Callers must be safe to repeat (a `Nats-Msg-Id`, a
    subject that keeps only its latest message, or a read)."""
    def note(state: RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome else None
        log.warning("JetStream not ready for %s (%s); retrying", what, type(exc).__name__)

    try:
        return await op()  # the common case, without building a retry loop
    except TRANSIENT as e:
        if what:
            log.warning("JetStream not ready for %s (%s); retrying", what, type(e).__name__)
    try:
        async for attempt in AsyncRetrying(retry=retry_if_exception_type(TRANSIENT), stop=stop_after_delay(seconds),
                                           wait=wait_exponential(multiplier=first_pause, max=max_pause),
                                           before_sleep=note if what else None, reraise=True):
            with attempt:
                return await op()
    except TRANSIENT as e:
        raise give_up(e) from e
    raise AssertionError("unreachable")  # pragma: no cover


async def _ensure_stream(js: Any, cfg: api.StreamConfig) -> None:
    try:
        info = await js.stream_info(cfg.name)
    except NotFoundError:
        try:
            await js.add_stream(config=cfg)
            return
        except BadRequestError:  # another worker created it a moment ago
            info = await js.stream_info(cfg.name)
    have = int(info.config.num_replicas or 1)
    if have > (cfg.num_replicas or 1):
        log.warning("stream %s has %d replicas and this worker is configured for %d "
                    "(SKALD_STREAM_REPLICAS): keeping %d", cfg.name, have, cfg.num_replicas, have)
        cfg = dataclasses.replace(cfg, num_replicas=have)
    await js.update_stream(config=cfg)


async def _raise_replicas(js: Any, name: str, replicas: int) -> None:
    """A stream created elsewhere (the lease bucket) is scaled up to `replicas`, never down."""
    try:
        info = await js.stream_info(name)
    except NotFoundError:
        return
    have = int(info.config.num_replicas or 1)
    if have < replicas:
        await js.update_stream(config=dataclasses.replace(info.config, num_replicas=replicas))
    elif have > replicas:
        log.warning("stream %s has %d replicas and this worker is configured for %d: keeping %d",
                    name, have, replicas, have)
