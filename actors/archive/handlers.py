"""The archive actor: Phase 2 of each archive, from the `archive` work queue.

Any number of workers share one durable consumer. An archive whose predecessor is still pending
is redelivered later instead of blocking a worker (the cascading hang OpenViking hit). The
model's answer is journaled before it is applied, so a crash after the model answered replays
the journal instead of calling the model again. `.done` is written last; a failure of the model or
of its answer writes `.failed.json` and the raw messages stay visible until a later archive rolls
them forward; a store or bus not answering is waited out (the job comes back), not a failure.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Callable
from typing import Any, Protocol

import msgspec

from skald.actors.archive import phase2, recovery
from skald.actors.kit import clock
from skald.actors.kit.clock import now as clock_now
from skald.actors.kit.decl import RetryLater, consumes
from skald.actors.kit.lease import Leases
from skald.actors.kit.ports import LLM, Events, WorkQueue
from skald.actors.kit.request import Attempt
from skald.actors.text import facts
from skald.messages import catalog
from skald.messages.errors import Unavailable
from skald.messages.ingest import IngestJob, memories_job_id
from skald.messages.sessions import Phase2Job
from skald.store import archive_state, faults, memory_history
from skald.store import sessions as session_store
from skald.store.session_meta import DoneMarker, FailedMarker
from skald.store.sessions import SessionDir, lease_key, session_dir
from skald.store.treeport import StoreUnavailable
from skald.store.uri import Identity, Namespace

log = logging.getLogger("skald.archive")
JOURNAL = ".phase2.journal.json"
PREDECESSOR_WAIT_S = 0.5
STORE_WAIT_S = 2.0  # a store or bus not answering (a leader election takes a few seconds)
# Raw messages of earlier failed archives fed into one Phase 2: a failure that recurs (a context
# overflow, a truncated answer) must not grow every later prompt; 16k tokens leave a 32k-context
# model room for the instructions and the answer.
ROLL_FORWARD_MAX_TOKENS = 16_000


class ArchiveBus(Events, WorkQueue, Protocol):
    """The bus ports the archive actor uses: its events, and re-queued jobs."""


class Archiver:
    """The archive actor: Phase 2 of each archive (overview, checkpoints, memories), failures rolled forward, .done
    last."""

    def __init__(self, ns: Namespace, llm: LLM, bus: ArchiveBus, clock: Callable[[], float] = clock_now,
                 llm_timeout_s: float = 120.0, worker_id: str = "", lease_ttl_s: float = 6.0,
                 quarantine_after: int = 3) -> None:
        self.quarantine_after = max(1, quarantine_after)  # failed Phase 2 runs before an archive is set aside
        self.quarantined = 0
        self.ns = ns
        # One worker runs an archive's Phase 2 at a time (a claim, renewed while it runs), so a
        # chained run and a redelivered job never both call the model.
        self.claims = Leases(bus, worker_id or "archiver", lease_ttl_s, idle_s=3600.0)
        self.llm = llm
        self.bus = bus
        self.clock = clock
        self.llm_timeout_s = llm_timeout_s
        self.model_calls = 0
        self.completed = 0
        self.failed = 0

    async def start(self) -> None:
        self.claims.start()
        await self._start_sweep()

    async def _start_sweep(self) -> None:
        """Pending archives whose Phase 2 job was lost (a crash between archive and enqueue) get one
        again; duplicates are dropped by the stream's dedup window and by `.done` checks."""
        self._sweep = asyncio.create_task(recovery.requeue_pending(self.ns, self.bus))

    async def stop(self) -> None:
        task = getattr(self, "_sweep", None)
        if task is not None:  # waited for once cancelled, so no scan is left pending as the loop closes
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass
            except Exception:  # noqa: BLE001 - best effort, as the scan is; said, not raised at shutdown
                log.warning("the recovery scan failed", exc_info=True)
        await self.claims.stop()

    def health(self) -> dict[str, Any]:
        return {"status": "ok", "model": self.llm.name, "model_calls": self.model_calls,
                "completed": self.completed, "failed": self.failed, "quarantined": self.quarantined}

    @consumes(catalog.ARCHIVE, ack_wait_s=120.0, max_deliver=1000, concurrency=2)
    async def run(self, job: Phase2Job, att: Attempt) -> None:
        """A job of the `archive` work queue."""
        nxt: Phase2Job | None = job
        first = True
        while nxt is not None:
            # Phase 2 stamps with the time its commit was accepted (the archive's own meta): the
            # clock is the request's, not the background worker's, so a replay writes the same.
            sdir = session_dir(self.ns, Identity(account=nxt.account, user=nxt.user), nxt.session_id)
            at = (await asyncio.to_thread(session_store.read_archive_meta, sdir, nxt.archive_id)).created_at
            token = clock.NOW.set(at) if at > 0 else None
            try:
                nxt = await self._one(nxt, chained=not first)
            finally:
                if token is not None:
                    clock.NOW.reset(token)
            first = False

    async def _one(self, job: Phase2Job, chained: bool) -> Phase2Job | None:
        """Phase 2 of one archive; returns the session's next pending archive to chain into."""
        ident = Identity(account=job.account, user=job.user)
        sdir = session_dir(self.ns, ident, job.session_id)
        key = lease_key(job.account, job.user, job.session_id)
        claim = f"a{key}-{job.archive_id}"
        if await self.claims.owner(claim) is not None:
            if chained:
                return None
            raise RetryLater(PREDECESSOR_WAIT_S, "another worker is on this archive")
        try:
            index = int(job.archive_id.rsplit("_", 1)[1])
            own = await asyncio.to_thread(session_store.marker_state, sdir, index)
            if own == "missing":
                return None  # the session was deleted
            if own != "pending":
                await self._finished(key, job, own)
                return None
            # Walk back to the newest completed archive: it rolled forward every failure before it,
            # so only what lies between it and this one matters (no scan of the whole history).
            between: list[int] = []
            i = index - 1
            while i > 0:
                st_i = await asyncio.to_thread(session_store.marker_state, sdir, i)
                if st_i == "completed":
                    break
                # (a quarantined archive is set aside: neither waited for nor rolled forward)
                if st_i == "pending":
                    if chained:
                        return None
                    raise RetryLater(PREDECESSOR_WAIT_S, "waiting for an earlier archive")
                if st_i in ("failed", "invalid"):
                    between.append(i)
                i -= 1
            wanted = (*sorted(between), index)
            listings = await asyncio.to_thread(session_store.read_archives, sdir, list(wanted))
            # Working memory accumulates: this archive's overview starts from the newest completed one.
            previous = "" if i <= 0 else await asyncio.to_thread(
                session_store.read_text, sdir.tree, sdir.akey(session_store.archive_name(i), session_store.OVERVIEW))
            states = archive_state.scan(listings)
            target = states[-1]
            before = states[:-1]
            candidates = [s for s in before if s.state in ("failed", "invalid") and not s.covered]
            rolled, left_out = phase2.bound_roll_forward(candidates, ROLL_FORWARD_MAX_TOKENS)
            for s in left_out:  # no room this time: counts as a failed attempt, so it cannot linger
                await self._failed_again(sdir, s, "roll-forward input over budget")
            memory_job = ""
            try:
                state, memory_job = await self._phase2(sdir, job, ident, target, rolled, previous)
            except (StoreUnavailable, Unavailable, TimeoutError) as e:
                # Not this archive's failure: the store or the bus is not answering for the moment
                # (its model's failures are `_Stage`s). Marked failed, it would wait for the
                # session's next commit; run again, it re-applies its journal and finishes.
                log.warning("phase 2 of %s/%s waits for the store: %s", job.session_id, job.archive_id, e)
                raise RetryLater(STORE_WAIT_S, f"the store is not answering: {type(e).__name__}") from e
            except Exception as e:  # noqa: BLE001 - any other failure is terminal for this archive, reported
                log.warning("phase 2 of %s/%s failed: %s", job.session_id, job.archive_id, e)
                error = f"{type(e).__name__}: {e}"[:2000]
                await asyncio.to_thread(session_store.write_failed, sdir, job.archive_id, FailedMarker(
                    stage=getattr(e, "stage", "phase2"), error=error, time=self.clock()))
                for s in rolled:  # they were part of the input that failed
                    await self._failed_again(sdir, s, error)
                self.failed += 1
                state = "failed"
            await self._finished(key, job, state, memory_job)
            if await asyncio.to_thread(session_store.marker_state, sdir, index + 1) == "pending":
                return Phase2Job(account=job.account, user=job.user, session_id=job.session_id,
                                 archive_id=session_store.archive_name(index + 1))
            return None
        finally:
            await self.claims.release(claim)

    async def _failed_again(self, sdir: SessionDir, s: archive_state.ArchiveState, error: str) -> None:
        """One more failed attempt at covering `s`; past `quarantine_after`, it is set aside."""
        if await asyncio.to_thread(recovery.count_failure, sdir, s, error, self.quarantine_after, self.clock()):
            self.quarantined += 1

    async def _finished(self, key: str, job: Phase2Job, state: str, memory_job: str = "") -> None:
        await self.bus.publish_event(f"archive.finished.{key}.{job.archive_id}",
                                     _Finished(session_id=job.session_id, archive_id=job.archive_id, state=state,
                                               memory_job=memory_job),
                                     f"archive.finished.{key}.{job.archive_id}.{state}")

    async def _phase2(self, sdir: SessionDir, job: Phase2Job, ident: Identity, target: archive_state.ArchiveState,
                      rolled: list[archive_state.ArchiveState], previous: str = "") -> tuple[str, str]:
        """The archive's state, and the id of the job indexing the memories it wrote ("" if none)."""
        sources = [*rolled, target]
        messages = [m for s in sources for m in s.listing.messages]
        requests: list[phase2.Request] = []
        for s in sources:
            meta = session_store.read_archive_meta(sdir, s.listing.archive_id)
            for r in meta.checkpoint_requests:
                requests.append(phase2.Request(index=len(requests), turn_anchor_message_id=r.turn_anchor_message_id,
                                               source_message_ids=list(r.source_message_ids),
                                               budget_tokens=r.budget_tokens,
                                          archive_id=s.listing.archive_id))
        out = await self._model_output(sdir, job.archive_id, messages, requests, previous, ident)
        if len(out.checkpoint_summaries) != len(requests):
            raise _Stage("validate", f"{len(out.checkpoint_summaries)} summaries for {len(requests)} checkpoints")
        records = phase2.checkpoint_records(requests, out.checkpoint_summaries)
        abstract = _abstract(out.overview)
        aid = job.archive_id
        await asyncio.to_thread(sdir.tree.write, sdir.akey(aid, session_store.OVERVIEW), out.overview.encode())
        await asyncio.to_thread(sdir.tree.write, sdir.akey(aid, session_store.ABSTRACT), abstract.encode())
        await asyncio.to_thread(session_store.update_archive_meta, sdir, job.archive_id, checkpoints=records,
                                overview_tokens=phase2.estimate_tokens(out.overview),
                                rolled_forward=[s.listing.archive_id for s in rolled])
        faults.point("archive.after_overview")
        memory_job = await self._memories(job, ident, out, messages)
        faults.point("archive.after_memories")
        coverage = DoneMarker(
            starting_message_id=messages[0].id if messages else None,
            ending_message_id=messages[-1].id if messages else None,
            coverage_start_archive=sources[0].listing.archive_id,
            coverage_end_archive=target.listing.archive_id,
            covered_failed_archives=[s.listing.archive_id for s in rolled],
            completed_at=self.clock())
        await asyncio.to_thread(session_store.write_done, sdir, job.archive_id, coverage)  # last: now covered
        self.completed += 1
        return "completed", memory_job

    async def _model_output(self, sdir: SessionDir, archive_id: str, messages: list[Any],
                            requests: list[phase2.Request], previous: str = "",
                            ident: Identity | None = None) -> phase2.Output:
        """One model call per archive, ever: a journaled answer is re-applied, not re-asked."""
        journal = session_store.read_json(sdir.tree, sdir.akey(archive_id, JOURNAL))
        if journal is None:
            if self.llm.extractive:
                out = phase2.extractive(messages, requests, previous)
                text = msgspec.json.encode({"overview": out.overview, "checkpoint_summaries": out.checkpoint_summaries,
                                            "memories": out.memories}).decode()
                journal = {"text": text, "model": self.llm.name, "usage": {}}
            else:
                existing = await asyncio.to_thread(self._existing_keys, ident) if ident is not None else []
                prompt = phase2.format_input(messages, requests, previous, existing)
                self.model_calls += 1
                try:
                    c = await asyncio.wait_for(self.llm.complete(phase2.SYSTEM, prompt, max_tokens=2000, json=True,
                                                                 timeout_s=self.llm_timeout_s), self.llm_timeout_s)
                except Exception as e:
                    raise _Stage("llm", f"{type(e).__name__}: {e}") from e
                journal = {"text": c.text, "model": c.model, "usage": msgspec.to_builtins(c.usage)}
            await asyncio.to_thread(session_store.write_json, sdir.tree, sdir.akey(archive_id, JOURNAL), journal)
            faults.point("archive.after_journal")
        try:
            return phase2.parse_output(str(journal.get("text", "")), len(requests))
        except ValueError as e:
            raise _Stage("parse", str(e)) from e

    async def _memories(self, job: Phase2Job, ident: Identity, out: phase2.Output, messages: list[Any]) -> str:
        """Long-term memories, named from what they are about: events and transcripts append (named
        from the messages they came from), keyed memories merge into the file of their key (the
        text they replace kept as a version), profile is one document. Replays write the same.
        The id of the job that indexes them ("" when nothing changed)."""
        uris: list[str] = []
        removed: list[tuple[str, int]] = []
        base = self.ns.resolve("viking://~/memories", ident)
        tree, base_key = self.ns.tree, base.key
        src = hashlib.sha1("\x00".join(m.id for m in messages).encode()).hexdigest()[:10]
        # What was said stays findable whatever the model made of it: the verbatim transcript.
        transcript = phase2.transcript_memory(job.session_id, messages)
        at = self.clock()
        ids = [m.id for m in messages]
        for i, mem in enumerate([*out.memories, *([transcript] if transcript else [])]):
            cat = mem["category"]
            merge = mem.get("op") == "merge" and cat in phase2.KEYED  # extractor lines: dated, sourced
            if not merge and (cat != "events" or mem is not transcript):
                mem = {**mem, "content": phase2.with_source(mem["content"], job.session_id, ids)}
            if cat == "profile":
                key, uri = f"{base_key}/profile.md", f"{base.uri}/profile.md"
                existing = session_store.read_text(tree, key)
                fact = phase2.without_source(mem["content"])
                if fact in existing or any(memory_history.same_fact(phase2.without_source(p), fact)
                                           for p in existing.split("\n\n") if p.strip()):
                    continue
                body = (existing.rstrip() + "\n\n" + mem["content"]).strip()
            elif cat in phase2.KEYED:
                name = phase2.memory_name(phase2.key_of(mem))
                key, uri, body = f"{base_key}/{cat}/{name}", f"{base.uri}/{cat}/{name}", mem["content"]
                existing = session_store.read_text(tree, key)
                if mem.get("op") == "delete":
                    if existing:
                        await asyncio.to_thread(memory_history.save_version, tree, key, "delete", at)
                        await asyncio.to_thread(tree.remove, key)
                        removed.append((uri, 2))
                    continue
                if merge:  # the extractor's lines join the memory of their key
                    merged = facts.merged(existing, cat, phase2.key_of(mem), body.splitlines())
                    if merged is None:
                        continue
                    body = merged
                elif existing and memory_history.same_fact(phase2.without_source(existing),
                                                           phase2.without_source(body)):
                    continue  # the same fact again: one memory
                if existing:
                    await asyncio.to_thread(memory_history.save_version, tree, key, "update", at)
                    faults.point("archive.after_history")  # old text kept, new text not yet written
            else:
                name = mem.get("name") or f"{cat}_{job.session_id[:24]}_{src}_{i}.md"
                key, uri, body = f"{base_key}/{cat}/{name}", f"{base.uri}/{cat}/{name}", mem["content"]
            await asyncio.to_thread(tree.write, key, body.encode())
            uris.append(uri)
        if not (uris or removed):
            return ""
        jid = memories_job_id(job.account, job.user, job.session_id, job.archive_id)
        await self.bus.enqueue(catalog.INGEST, IngestJob(
            job_id=jid, account=job.account, index_roots=tuple(dict.fromkeys(uris)), remove_rows=tuple(removed),
            refresh_dirs=tuple({u.rsplit("/", 1)[0] for u, _ in removed})), f"memories-{jid}")
        return jid

    def _existing_keys(self, ident: Identity) -> list[str]:
        """`category/key: first line` of the user's keyed memories, for the model to update."""
        tree, base = self.ns.tree, self.ns.resolve("viking://~/memories", ident).key
        out = []
        for cat in phase2.KEYED:
            try:
                names = sorted(e.name for e in tree.list(f"{base}/{cat}", details=False)
                               if e.name.endswith(".md") and not e.name.startswith("."))
            except (FileNotFoundError, NotADirectoryError):
                continue
            names = names[: phase2.EXISTING_MAX - len(out)]  # read at once (one exchange on JetStream)
            for n, data in zip(names, tree.read_many([f"{base}/{cat}/{n}" for n in names]), strict=True):
                first = (data or b"").decode("utf-8", errors="replace").strip().splitlines()[:1]
                out.append(f"{cat}/{n[:-3]}: {first[0][:120] if first else ''}")
        return out


class _Finished(msgspec.Struct, kw_only=True):
    session_id: str
    archive_id: str
    state: str
    memory_job: str = ""  # the job indexing the memories it wrote: a commit that waits, waits for it too


class _Stage(Exception):  # noqa: N818
    def __init__(self, stage: str, message: str) -> None:
        super().__init__(message)
        self.stage = stage


def _abstract(overview: str) -> str:
    from skald.actors.text import extract

    return extract.cut_sentences(extract.first_paragraph(overview) or overview, extract.ABSTRACT_MAX)

