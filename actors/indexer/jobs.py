"""What becomes of an ingest job (a mixin of the indexer actor): noted before the write it follows,
queued on the work queue and, when the caller waits, its outcome awaited; a job handed back
unfinished put on record; and `resources.job`, which answers for a job later from the events
stream."""

from __future__ import annotations

import asyncio
import errno
import logging
import time
from collections.abc import Callable
from typing import TypeVar

import msgspec

from skald.actors.kit import clock
from skald.actors.kit.clock import request_id
from skald.actors.kit.decl import handles
from skald.actors.kit.ports import Events, Summarizer, WorkQueue
from skald.actors.kit.request import Ctx
from skald.messages import catalog, subjects
from skald.messages import ingest as ingest_msgs
from skald.messages.errors import Conflict, InvalidArgument, NotFound
from skald.store import faults, index_changes
from skald.store.uri import Namespace

T = TypeVar("T")

log = logging.getLogger("skald.indexer")

# A job's removals past this many bytes go in jobs of their own: the work stream takes messages of
# up to 8 MB, and a removal or move of a directory of 100,000 rows (its row keys, as JSON) passes it.
MAX_REMOVALS_BYTES = 4 * 1024 * 1024


def parts(job: ingest_msgs.IngestJob, max_bytes: int | None = None) -> list[ingest_msgs.IngestJob]:
    """`job`, or, when its removals pass `max_bytes` (MAX_REMOVALS_BYTES), jobs of removals alone
    (`<id>-1`, `<id>-2`...) and then `job` with the first of them and everything else it does
    (pure). Each part is by key, so their order does not matter; the caller waits for `job`'s id,
    which the last part keeps."""
    def size(row: tuple[str, int]) -> int:
        return len(row[0].encode()) + 16  # the URI, its level and the JSON around them

    limit = MAX_REMOVALS_BYTES if max_bytes is None else max_bytes
    rows = job.remove_rows
    if sum(size(r) for r in rows) <= limit:
        return [job]
    chunks: list[list[tuple[str, int]]] = [[]]
    used = 0
    for r in rows:
        if chunks[-1] and used + size(r) > limit:
            chunks.append([])
            used = 0
        chunks[-1].append(r)
        used += size(r)
    extra = [ingest_msgs.IngestJob(job_id=f"{job.job_id}-{i}", account=job.account, remove_rows=tuple(c))
             for i, c in enumerate(chunks[1:], 1)]
    return [*extra, msgspec.structs.replace(job, remove_rows=tuple(chunks[0]))]


async def enqueue(bus: WorkQueue, job: ingest_msgs.IngestJob) -> None:
    """Queue a job in as many parts as its size needs (`parts`), stamped with the request's clock:
    a file's rows take their times from it when the file's own is later (a replayed or restored
    request writes its files now, at the clock of the original)."""
    if not job.at:
        job = msgspec.structs.replace(job, at=clock.now())
    for part in parts(job):
        await bus.enqueue(catalog.INGEST, part, part.job_id)


class JobsBus(Events, WorkQueue):
    """The bus ports a job's life uses."""


class Jobs:
    """Needs the indexer's namespace, bus and summarizer (whose name a queued result carries)."""

    ns: Namespace
    bus: JobsBus
    summarizer: Summarizer

    async def _write_noted(self, job: ingest_msgs.IngestJob, key: str, write: Callable[[], T]) -> T:
        """`write` of the file (or a skill's folder) at `key`, noted first with the job that
        indexes it (fs.write, memories.write and .update, resources.add of content, skills.add): a
        worker dying after the write and before the job is queued leaves a file the tree serves and
        the index would never hold (a client does not resend a write by itself). The note is
        unsynced (it has to outlive the worker, not the host: a power cut may lose it) and never
        removed one by one (`index_changes.note_write`), so it costs a write one put, not a move's
        synced note and removal. A refused write (CONFLICT, INVALID_ARGUMENT, NOT_FOUND) changed
        nothing and its note goes; after any other failure it stays, and a pass indexes the file
        as it stands, if it stands, which is right either way."""
        noted = index_changes.PendingChange(source="", destination=key, at=time.time(), job=job)

        def noted_then_written() -> T:  # one hop off the event loop for both
            index_changes.note_write(self.ns.tree, noted)
            return write()

        try:
            return await asyncio.to_thread(noted_then_written)
        except (Conflict, InvalidArgument, NotFound):
            await asyncio.to_thread(index_changes.drop_write, self.ns.tree, noted)
            raise

    async def _change(self, job: ingest_msgs.IngestJob, source: str, destination: str,
                      change: Callable[[], None], until: float = 0.0, lease: str = "") -> None:
        """A move, removal or import changing the tree, noted first with the job that follows it, so
        a worker dying before that job is queued leaves the index a way to catch up
        (`store/index_changes.py`). An import has no source (the node it watches is its
        destination) and may run past the age a pass waits for: `until`, its deadline, keeps a
        pass off its note till then, unless `lease`, which the import holds while it runs, has
        lapsed (its worker died)."""
        t = self.ns.tree
        noted = index_changes.PendingChange(source=source, destination=destination, at=time.time(), job=job,
                                            until=until, lease=lease)
        try:
            await asyncio.to_thread(index_changes.note, t, noted)
        except OSError as e:  # a full disk: a removal is how space comes back, so it goes on unnoted
            if e.errno not in (errno.ENOSPC, errno.EDQUOT):
                raise
            log.warning("no space for the note of index job %s; the change goes on without it", job.job_id)
        faults.point("index.change_noted")  # noted, the tree not changed yet
        try:
            await asyncio.to_thread(change)
        except Exception:
            # Refused (NOT_FOUND, CONFLICT) a move's source stands and the note goes; if the tree
            # changed before the failure (an import's may have, part way), the note stays for a
            # pass to finish.
            if source and await asyncio.to_thread(t.stat, source) is not None:
                await asyncio.to_thread(index_changes.drop, t, job.job_id)
            raise

    async def _changed(self, job: ingest_msgs.IngestJob) -> None:
        """The job queued: its note dropped (one left behind is finished again later, harmlessly)."""
        try:
            await asyncio.to_thread(index_changes.drop, self.ns.tree, job.job_id)
        except Exception:  # noqa: BLE001 - the change and its job stand; only the note is late to go
            log.warning("the note of index job %s is left for a later pass", job.job_id, exc_info=True)

    async def _submit(self, job: ingest_msgs.IngestJob, wait: bool, ctx: Ctx) -> ingest_msgs.IngestResult | None:
        """Queue a job; with `wait`, return its outcome (None if the deadline comes first)."""
        faults.point("ingest.before_enqueue")  # the file is on disk; no job yet
        if not wait:
            await enqueue(self.bus, job)
            faults.point("ingest.after_enqueue")
            await self._queued(job)
            return None
        async with self.bus.waiter(subjects.ingest_done(job.account, job.job_id)) as w:
            await enqueue(self.bus, job)
            faults.point("ingest.after_enqueue")  # queued, not answered
            raw = await w.wait(max(0.0, ctx.remaining() - 0.05))
        if not raw:
            await self._queued(job)  # the caller gets its id to follow it with
        return msgspec.json.decode(raw, type=ingest_msgs.IngestResult) if raw else None

    async def _queued(self, job: ingest_msgs.IngestJob) -> None:
        """A job handed back unfinished is on record, so `resources.job` can tell it from an id never given."""
        await self.bus.publish_event(subjects.ingest_queued(job.account, job.job_id), ingest_msgs.IngestResult(
            job_id=job.job_id, root_uri=",".join(job.index_roots), status="queued"), f"ingest.queued.{job.job_id}")

    @staticmethod
    def _job_id() -> str:
        """Derived from the request and its clock: a replay queues the same jobs."""
        return request_id("ingest")

    def _result(self, job: ingest_msgs.IngestJob, root: str,
                done: ingest_msgs.IngestResult | None) -> ingest_msgs.IngestResult:
        if done is None:
            return ingest_msgs.IngestResult(job_id=job.job_id, root_uri=root, status="queued",
                                            generator=self.summarizer.name)
        return msgspec.structs.replace(done, root_uri=root)

    @handles(catalog.RESOURCES_JOB, timeout_s=600.0)
    async def job(self, req: ingest_msgs.JobRef, ctx: Ctx) -> ingest_msgs.IngestResult:
        """An ingest job's outcome from its `ingest.done` event (kept in the events stream, so a
        caller that missed it, cut off or gone, still learns it); `queued` while the job runs (a job
        handed back unfinished is on record as such); NOT_FOUND for an id never given. Only the
        caller's own account's jobs are visible."""
        name = subjects.ingest_done(ctx.identity.account, req.job_id)
        async with self.bus.waiter(name) as w:  # open before the look, so an end between is not missed
            raw = await self.bus.last_event(name)
            if raw is None:
                queued = await self.bus.last_event(subjects.ingest_queued(ctx.identity.account, req.job_id))
                if queued is None:  # never handed back unfinished, never done: not a job of this account
                    raise NotFound("no such ingest job", {"job_id": req.job_id})
                raw = await w.wait(max(0.0, ctx.remaining() - 0.05)) if req.wait else None
                if raw is None:
                    return msgspec.json.decode(queued, type=ingest_msgs.IngestResult)
        return msgspec.json.decode(raw, type=ingest_msgs.IngestResult)
