"""Moves and removals whose request died between the tree change and its index job, finished.

Every indexer looks once when it starts and then every `PASS_INTERVAL_S`, and takes only notes
older than the age it is given (by default past the handler's deadline: a younger note may belong
to a request still running in another worker, whose tree change has not happened yet). Two
indexers finishing the same note queue the same job id twice: the work queue's dedup window or
the job's own by-key steps make that harmless. The rules are in `store/index_changes.py`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Protocol

from skald.actors.indexer import jobs
from skald.actors.kit.ports import WorkQueue
from skald.store import index_changes
from skald.store.uri import Namespace

log = logging.getLogger("skald.indexer")

DEFAULT_AGE_S = 180.0  # past fs.mv's and fs.rm's 120 s deadline
PASS_INTERVAL_S = 60.0


class _Queue(WorkQueue, Protocol):
    """The one bus port finishing a change needs."""


async def finish_pending(ns: Namespace, bus: _Queue, older_than_s: float, now: float | None = None) -> int:
    """One pass: every note at least `older_than_s` old either queues its job (the source is gone)
    or is dropped (it still stands). The number of jobs queued."""
    t = ns.tree
    now = time.time() if now is None else now
    queued = 0
    for change in await asyncio.to_thread(index_changes.pending, t):
        if now - change.at < older_than_s:
            continue
        stands = await asyncio.to_thread(t.stat, change.source) is not None
        job = index_changes.to_finish(change, stands)
        if job is not None:
            await jobs.enqueue(bus, job)
            queued += 1
            log.info("finished the index job of a change its request left (%s)", change.source)
        await asyncio.to_thread(index_changes.drop, t, change.job.job_id)
    return queued


async def keep_finishing(ns: Namespace, bus: _Queue, older_than_s: float,
                         interval_s: float = PASS_INTERVAL_S) -> None:
    """`finish_pending` now and every `interval_s` until cancelled; a failed pass (the bus or the
    store away) is logged and tried again at the next."""
    while True:
        try:
            await finish_pending(ns, bus, older_than_s)
        except asyncio.CancelledError:
            raise
        except Exception:  # noqa: BLE001 - the next pass retries; a change's note stays until then
            log.warning("pending index changes not finished this pass", exc_info=True)
        await asyncio.sleep(interval_s)
