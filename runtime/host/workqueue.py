"""Work-queue consumption: a pull consumer per declared queue, one job at a time per loop, kept
alive while it runs, acknowledged only when it finished. A job that is not ready yet
(`RetryLater`) is redelivered later without counting as a failure; a failing one is retried
with back-off until `max_deliver`, then terminated; undecodable bytes are dropped at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any

import msgspec
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.errors import TimeoutError as NatsTimeout
from nats.js import api

from skald.actors.kit.decl import Consumes, RetryLater
from skald.actors.kit.request import Attempt
from skald.messages import subjects
from skald.runtime.bus.streams import stream_name
from skald.runtime.client import tracing
from skald.runtime.host.config import Config
from skald.runtime.host.metrics import Metrics

log = logging.getLogger("skald.host")
NAK_DELAYS_S = (1.0, 2.0, 5.0, 10.0, 30.0, 60.0)
# A job is redelivered when its worker died under it as much as when it failed. Failures (an
# exception) are bounded by the queue's `max_deliver`, in `run_job`; the consumer itself has no
# limit, because JetStream stops delivering past its limit yet keeps the message in a work-queue
# stream for ever: a job whose workers were killed eight times would be stuck, neither done nor
# failed. Only a job that takes its worker down this many times running is given up, and logged.
CRASH_LOOP_DELIVERIES = 50
ACK_TIMEOUT_S = 10.0
FETCH_FAILURES_RESUBSCRIBE = 5  # fetches failing in a row (not timing out) before subscribing again


async def consume(nc: NATS, cfg: Config, stopping: asyncio.Event, decl: Consumes, fn: Callable[..., Any],
                  metrics: Metrics | None = None) -> None:
    js = nc.jetstream(timeout=10.0)
    ack_wait = cfg.work_ack_wait_s or decl.ack_wait_s
    consumer = api.ConsumerConfig(
        durable_name=decl.queue, ack_policy=api.AckPolicy.EXPLICIT, ack_wait=ack_wait,
        max_deliver=-1, max_ack_pending=256, max_waiting=512,
        filter_subject=subjects.work(cfg.prefix, decl.queue),
    )
    dec = msgspec.json.Decoder(decl.job)
    while not stopping.is_set():
        psub = None
        while psub is None and not stopping.is_set():
            try:
                psub = await js.pull_subscribe(subjects.work(cfg.prefix, decl.queue), durable=decl.queue,
                                               stream=stream_name(cfg.prefix, "work"), config=consumer)
            except Exception:  # noqa: BLE001 - another worker may be creating it at the same moment
                log.warning("pull_subscribe %s failed; retrying", decl.queue, exc_info=True)
                await asyncio.sleep(0.5)
        if psub is None:
            return
        with contextlib.suppress(Exception):  # what a start inherits: jobs a stopped worker held come back
            info = await psub.consumer_info()
            if info.num_ack_pending:
                log.info("%s queue: %d jobs held by workers, any of them stopped comes back within %.0fs; "
                         "%d waiting", decl.queue, info.num_ack_pending, ack_wait, info.num_pending or 0)
        try:
            await _pull(psub, stopping, decl, fn, dec, ack_wait, metrics)
        finally:
            with contextlib.suppress(Exception):
                await psub.unsubscribe()


async def _pull(psub: Any, stopping: asyncio.Event, decl: Consumes, fn: Callable[..., Any], dec: Any,
                ack_wait: float, metrics: Metrics | None) -> None:
    """Fetch and run jobs until stopping, or until fetching keeps failing (the consumer deleted,
    the stream recreated): the caller then subscribes again. A job whose acknowledgement fails is
    logged and left to redelivery (jobs are idempotent); it never ends the loop."""
    failures = 0
    while not stopping.is_set():
        try:
            msgs = await psub.fetch(1, timeout=1.0)
        except (NatsTimeout, TimeoutError):
            failures = 0
            continue
        except Exception:  # noqa: BLE001 - connection hiccups: back off and fetch again
            if stopping.is_set():
                return
            failures += 1
            if failures >= FETCH_FAILURES_RESUBSCRIBE:
                log.warning("fetching %s failed %d times in a row; subscribing again", decl.queue, failures,
                            exc_info=True)
                return
            await asyncio.sleep(0.5)
            continue
        failures = 0
        for m in msgs:
            t0 = time.perf_counter()
            try:
                outcome = await run_job(m, decl, fn, dec, ack_wait)
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - the ack, nak or term itself failed: redelivery decides
                log.exception("job on %s: its acknowledgement failed; it will be delivered again", decl.queue)
                outcome = "unacknowledged"
            if metrics is not None:
                metrics.jobs.labels(decl.queue, outcome).inc()
                metrics.job_seconds.labels(decl.queue).observe(time.perf_counter() - t0)


async def run_job(m: Msg, decl: Consumes, fn: Callable[..., Any], dec: Any, ack_wait: float) -> str:
    """One delivery to the end; its outcome: done, retry_later, failed, terminated or poison."""
    delivered = m.metadata.num_delivered
    if delivered > CRASH_LOOP_DELIVERIES:
        log.error("job on %s given up after %d deliveries (it keeps taking its worker down): %r", decl.queue,
                  delivered - 1, m.data[:200])
        await m.term()
        return "terminated"
    try:
        job = dec.decode(m.data)
    except (msgspec.ValidationError, msgspec.DecodeError):
        log.error("poison job on %s dropped: %r", decl.queue, m.data[:200])
        await m.term()
        return "poison"

    async def keep_alive() -> None:
        while True:
            await asyncio.sleep(ack_wait / 3)
            with contextlib.suppress(Exception):
                await m.in_progress()

    if delivered > 1:  # a worker stopped (or timed out) in this job: said, since the wait before it was long
        log.info("job on %s delivered again (attempt %d): the worker that had it stopped before it finished; "
                 "it runs again from the start (every step is idempotent)", decl.queue, delivered)
    beat = asyncio.create_task(keep_alive())
    try:
        with tracing.job(decl.queue, m.headers, queue=decl.queue, delivered=delivered):
            await fn(job, Attempt(delivered=delivered, queue=decl.queue))
    except asyncio.CancelledError:
        raise
    except RetryLater as r:
        await m.nak(delay=r.delay_s)
        return "retry_later"
    except Exception:
        log.exception("job on %s failed (delivery %d)", decl.queue, delivered)
        if delivered >= decl.max_deliver:
            await m.term()
            return "terminated"
        await m.nak(delay=NAK_DELAYS_S[min(delivered - 1, len(NAK_DELAYS_S) - 1)])
        return "failed"
    finally:
        beat.cancel()
    # nats-py waits 1 s by default; JetStream busy storing a large index publish takes longer, and a
    # job whose ack times out is run again (harmless, but a 40k-row ingest twice).
    await m.ack_sync(timeout=ACK_TIMEOUT_S)
    return "done"
