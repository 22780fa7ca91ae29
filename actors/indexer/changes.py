"""Writes, imports, moves and removals whose request died between the tree change and its index
job, finished.

Every indexer looks once when it starts and then every `PASS_INTERVAL_S`, or sooner when a note
it skipped ripens (at most once a `MIN_WAKE_S`), and takes only notes older than the age it is
given (by default past the handler's deadline: a younger note may belong to a request still
running in another worker, whose tree change has not happened yet). Two indexers finishing the
same note queue the same job id twice: the work queue's dedup window or the job's own by-key
steps make that harmless. The rules are in `store/index_changes.py`.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from typing import Protocol

import msgspec

from skald.actors.indexer import jobs
from skald.actors.kit.ports import Events, LeaseStore, WorkQueue
from skald.messages import subjects
from skald.store import index_changes
from skald.store.treeport import Tree
from skald.store.uri import Namespace

log = logging.getLogger("skald.indexer")

DEFAULT_AGE_S = 180.0  # past the 120 s deadline of every request that notes (writes, moves, removals)
PASS_INTERVAL_S = 60.0
MIN_WAKE_S = 1.0  # a pass woken early by a note about to ripen runs at most this often
LEASE_CHECK_S = 5.0  # how often a pass asks whether a running import's lease has lapsed


class Pass(msgspec.Struct, frozen=True):
    """What a pass did: the jobs it queued, and when the first note it left for being too young
    ripens (wall clock; inf when none). A write group counts by its first minute only, so a stream
    of writes does not wake a pass every second."""

    queued: int
    next_ripe: float = math.inf


class _Queue(WorkQueue, Events, LeaseStore, Protocol):
    """The bus ports finishing a change needs: the work queue, the events that say a job is done,
    and the leases running imports hold."""


async def finish_pending(ns: Namespace, bus: _Queue, older_than_s: float, now: float | None = None,
                         settled: dict[str, set[str]] | None = None) -> Pass:
    """One pass: every note of a move, removal or import at least `older_than_s` old (an import's
    counted from its deadline, or at once when the lease it held has lapsed: its worker died) whose
    job did not finish either queues its job (the change may have happened) or is dropped (it did
    not); every write noted that long ago whose job did not finish is queued again, and a minute's
    group of write notes is dropped once the whole minute is that old. `settled`, kept between an
    indexer's passes: by group, the writes whose job a pass found done or queued again, not asked
    about again (a group lives a few passes, and a pass woken early for an import runs every few
    seconds)."""
    t = ns.tree
    now = time.time() if now is None else now
    settled = {} if settled is None else settled
    queued, next_ripe = 0, math.inf
    for change in await asyncio.to_thread(index_changes.pending, t):
        if not change.ripe(now, older_than_s):
            if not change.lease or await bus.lease_get(change.lease) is not None:  # running, or may be
                ask_again = now + LEASE_CHECK_S if change.lease else math.inf
                next_ripe = min(next_ripe, change.ripe_at(older_than_s), ask_again)
                continue
        if not await _done(bus, change):
            queued += await _finish(t, bus, change)
        await asyncio.to_thread(index_changes.drop, t, change.job.job_id)
    groups = await asyncio.to_thread(index_changes.write_groups, t)
    for gone in settled.keys() - {group for _, group in groups}:  # dropped, by this indexer or another
        del settled[gone]
    for began, group in groups:
        if now - began < older_than_s:
            next_ripe = min(next_ripe, began + older_than_s)
            break
        queued += await _finish_writes(t, bus, group, now, older_than_s, settled.setdefault(group, set()))
        if now - (began + index_changes.WRITE_GROUP_S) >= older_than_s:  # no request still running put a note there
            await asyncio.to_thread(index_changes.drop_group, t, group)
            settled.pop(group, None)
    return Pass(queued, next_ripe)


async def _finish_writes(t: Tree, bus: _Queue, group: str, now: float, older_than_s: float,
                         settled: set[str]) -> int:
    """The jobs of a group's writes old enough (`PendingChange.ripe`) whose job is not done and whose file
    stands, queued again (a running one's too: a job queued twice does no harm). Nearly every job
    is done, so that is asked first: one read of the events stream a note, once (`settled`: a job
    found done, or queued again, is the work queue's from there)."""
    queued = 0
    for change in await asyncio.to_thread(index_changes.writes_in, t, group):
        job_id = change.job.job_id
        if job_id in settled or not change.ripe(now, older_than_s):
            continue
        if not await _done(bus, change):
            queued += await _finish(t, bus, change)
        settled.add(job_id)
    return queued


async def _done(bus: _Queue, change: index_changes.PendingChange) -> bool:
    """Whether the noted job ran to its end (one read of the events stream): it was queued after the
    change, so the index holds it and the note needs nothing more (a request killed after queueing
    its job and before dropping its note, or one whose caller's deadline came while it waited)."""
    return await bus.last_event(subjects.ingest_done(change.job.account, change.job.job_id)) is not None


async def _finish(t: Tree, bus: _Queue, change: index_changes.PendingChange) -> int:
    """The job a note still owes the index queued, by whether the node it watches stands: 1, or 0."""
    stands = await asyncio.to_thread(t.stat, change.watched) is not None
    job = index_changes.to_finish(change, stands)
    if job is None:
        return 0
    await jobs.enqueue(bus, job)
    log.info("queued again the index job of a change its request left (%s)", change.watched)
    return 1


async def keep_finishing(ns: Namespace, bus: _Queue, older_than_s: float,
                         interval_s: float = PASS_INTERVAL_S) -> None:
    """`finish_pending` now and every `interval_s` until cancelled, or as soon as a note it left
    for being too young ripens: an import killed early (its note counts from its deadline) is
    finished when its deadline's age has passed, not up to a whole interval later. A failed pass
    (the bus or the store away) is logged and tried again at the next."""
    settled: dict[str, set[str]] = {}
    while True:
        wait = interval_s
        try:
            done = await finish_pending(ns, bus, older_than_s, settled=settled)
            wait = min(interval_s, max(MIN_WAKE_S, done.next_ripe - time.time()))
        except asyncio.CancelledError:
            raise
        except Exception:  # noqa: BLE001 - the next pass retries; a change's note stays until then
            log.warning("pending index changes not finished this pass", exc_info=True)
        await asyncio.sleep(wait)
