"""What becomes of an ingest job (a mixin of the indexer actor): queued on the work queue and,
when the caller waits, its outcome awaited; a job handed back unfinished put on record; and
`resources.job`, which answers for a job later from the events stream."""

from __future__ import annotations

import msgspec

from skald.actors.kit.clock import request_id
from skald.actors.kit.decl import handles
from skald.actors.kit.ports import Events, Summarizer, WorkQueue
from skald.actors.kit.request import Ctx
from skald.messages import catalog, subjects
from skald.messages import ingest as ingest_msgs
from skald.messages.errors import NotFound
from skald.store import faults


class JobsBus(Events, WorkQueue):
    """The bus ports a job's life uses."""


class Jobs:
    """Needs the indexer's bus and summarizer (whose name a queued result carries)."""

    bus: JobsBus
    summarizer: Summarizer

    async def _submit(self, job: ingest_msgs.IngestJob, wait: bool, ctx: Ctx) -> ingest_msgs.IngestResult | None:
        """Queue a job; with `wait`, return its outcome (None if the deadline comes first)."""
        faults.point("ingest.before_enqueue")  # the file is on disk; no job yet
        if not wait:
            await self.bus.enqueue(catalog.INGEST, job, job.job_id)
            faults.point("ingest.after_enqueue")
            await self._queued(job)
            return None
        async with self.bus.waiter(subjects.ingest_done(job.account, job.job_id)) as w:
            await self.bus.enqueue(catalog.INGEST, job, job.job_id)
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
