"""The indexer actor: tree writes, ingest of resources / skills / memories, and the ingest work queue.

Writes land on disk first (atomically), then an `IngestJob` goes to the JetStream work queue;
the job (`pipeline.py`) generates abstracts and overviews, embeds, and publishes index rows to
the index log. A worker that dies mid-job leaves the job unacknowledged, so another worker redoes
it; every step of a job is an upsert or a delete by key, so redoing it is harmless.
"""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

import msgspec

from skald.actors.indexer import changes, memories
from skald.actors.indexer import rows as rows_mod
from skald.actors.indexer.imports import Imports
from skald.actors.indexer.moves import Moves
from skald.actors.indexer.pipeline import MAX_FILE_BYTES, IngestPipeline
from skald.actors.kit.clock import now as clock_now
from skald.actors.kit.decl import consumes, handles
from skald.actors.kit.ports import Embedder, Events, IndexLog, LeaseStore, Summarizer, WorkQueue
from skald.actors.kit.request import Attempt, Ctx
from skald.messages import catalog, folders, subjects
from skald.messages import fs as fs_msgs
from skald.messages import ingest as ingest_msgs
from skald.messages.errors import Conflict, InvalidArgument, NotFound, PermissionDenied
from skald.store import faults, importing, memory_history, sidecar, treeops
from skald.store.treeport import parent
from skald.store.uri import Identity, Namespace, VikingPath


class IndexerBus(Events, WorkQueue, IndexLog, LeaseStore, Protocol):
    """The bus ports the indexer uses."""


class Indexer(Imports, Moves):
    """The indexer actor: resources, skills and memories taken in (converted, split, summarised, embedded) and
    published as index rows; the tree's writes (fs.write, mkdir, rm, mv, tags)."""

    def __init__(self, ns: Namespace, embedder: Embedder, summarizer: Summarizer, bus: IndexerBus,
                 clock: Callable[[], float] = clock_now, import_roots: list[Path] | None = None,
                 max_file_bytes: int = MAX_FILE_BYTES, change_recovery_age_s: float = changes.DEFAULT_AGE_S,
                 lease_ttl_s: float = 6.0) -> None:
        self.ns = ns
        self.change_recovery_age_s = change_recovery_age_s
        self.lease_ttl_s = lease_ttl_s
        self.import_roots = [p.resolve() for p in import_roots or []]
        self.max_file_bytes = max_file_bytes
        self.embedder = embedder
        self.summarizer = summarizer
        self.pipeline = IngestPipeline(ns, embedder, summarizer, bus, max_file_bytes)
        self.bus = bus
        self.clock = clock
        self.jobs_done = 0
        self.jobs_failed = 0

    async def start(self) -> None:
        self._finishing = asyncio.create_task(changes.keep_finishing(self.ns, self.bus, self.change_recovery_age_s),
                                              name="index-changes")

    async def stop(self) -> None:
        task = getattr(self, "_finishing", None)
        if task is not None:
            task.cancel()
        await self.pipeline.close()

    def health(self) -> dict[str, object]:
        return {"status": "ok", "jobs_done": self.jobs_done, "summarizer": self.summarizer.name,
                "embedder": self.embedder.name,
                "passages_embedded": getattr(self.embedder, "passage_misses", None),
                "passages_reused": getattr(self.embedder, "passage_hits", None),
                "wide_dir_refreshes_deferred": self.pipeline.wide.deferred}

    # ----- requests ---------------------------------------------------------------------

    def _writable(self, uri: str, ident: Identity, roots: bool = False) -> VikingPath:
        """`uri` resolved for a write; a space root only with `roots` (a reindex writes summaries)."""
        vp = self.ns.resolve(uri, ident)
        if not roots and (len(vp.segments) < 2 or (vp.segments[0] == "user" and len(vp.segments) < 3)):
            raise InvalidArgument("cannot write a space root", {"uri": vp.uri})
        if any(s.startswith(".") for s in vp.segments):
            raise InvalidArgument("names starting with '.' are reserved", {"uri": vp.uri})
        return vp

    @handles(catalog.FS_WRITE, timeout_s=120.0, journal=True)
    async def fs_write(self, req: fs_msgs.WriteRequest, ctx: Ctx) -> fs_msgs.WriteResult:
        """`fs.write`: Write a file (replace, append or create) and index it."""
        vp = self._writable(req.uri, ctx.identity)
        t = self.ns.tree

        def write() -> tuple[bool, bytes]:
            data = req.content.encode()
            if req.mode == "create":
                try:
                    created = t.create(vp.key, data)
                except IsADirectoryError as e:
                    raise InvalidArgument("is a directory", {"uri": vp.uri}) from e
                except NotADirectoryError as e:
                    raise InvalidArgument("a file is in the way", {"uri": vp.uri}) from e
                if not created:
                    raise Conflict("already exists", {"uri": vp.uri})
                return False, data
            if req.mode == "append":
                st = t.stat(vp.key)
                if st is not None and not st.is_dir:
                    data = treeops.read_bytes(t, vp.key) + data
            try:
                return treeops.write(t, vp.key, data), data
            except InvalidArgument as e:
                raise InvalidArgument(e.message, {"uri": vp.uri}) from e

        job = ingest_msgs.IngestJob(job_id=self._job_id(), account=vp.account, index_roots=(vp.uri,))
        existed, data = await self._write_noted(job, vp.key, write)
        done = await self._submit(job, req.wait, ctx)
        return fs_msgs.WriteResult(uri=vp.uri, size=len(data), created=not existed, index_job=job.job_id,
                             indexed=bool(done and done.status == "done"), index_seq=done.index_seq if done else 0)

    @handles(catalog.FS_MKDIR, journal=True)
    async def fs_mkdir(self, req: fs_msgs.MkdirRequest, ctx: Ctx) -> fs_msgs.ChangeResult:
        """`fs.mkdir`: Create a directory."""
        vp = self._writable(req.uri, ctx.identity)
        tree_, key = self.ns.tree, vp.key

        def make() -> None:
            if not req.parents:
                above = tree_.stat(parent(key))
                if above is None or not above.is_dir:
                    raise NotFound("parent directory does not exist", {"uri": vp.parent_uri})
            try:
                tree_.mkdir(key)
            except (FileExistsError, NotADirectoryError) as e:
                raise Conflict("a file has that name", {"uri": vp.uri}) from e

        await asyncio.to_thread(make)
        return fs_msgs.ChangeResult(uri=vp.uri)

    @handles(catalog.SKILLS_ADD, timeout_s=600.0, journal=True)
    async def add_skill(self, req: ingest_msgs.AddSkillRequest, ctx: Ctx) -> ingest_msgs.IngestResult:
        """`skills.add`: Add a skill (SKILL.md with name and description)."""
        if len([x for x in (req.path, req.content, req.upload_id) if x is not None]) != 1:
            raise InvalidArgument("give exactly one of path, content or upload_id")
        tags = rows_mod.check_tags(req.tags)
        scratch = self.ns.data_dir / "tmp"
        scratch.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=scratch, prefix="skill-") as tmp:
            src_dir: Path | None = None
            if req.content is not None:
                skill_text = req.content
            else:
                src = (self._importable(req.path, ctx) if req.path is not None
                       else await self._uploaded(req.upload_id or "", None, ctx, Path(tmp), folder=True))
                skill_md = src / "SKILL.md" if src.is_dir() else src
                if skill_md.name != "SKILL.md" or not skill_md.is_file():
                    raise InvalidArgument("a skill package is a directory holding SKILL.md",
                                          {"path": req.path or req.upload_id})
                skill_text = skill_md.read_text("utf-8", errors="replace")
                src_dir = src if src.is_dir() else None
            name, _ = rows_mod.parse_skill(skill_text)
            root = "viking://agent/skills" if req.scope == "agent" else "viking://~/skills"
            target = self._writable(f"{root}/{name}", ctx.identity)
            if req.dry_run:
                return ingest_msgs.IngestResult(job_id="", root_uri=target.uri, status="checked",
                                                generator=self.summarizer.name)
            job = ingest_msgs.IngestJob(job_id=self._job_id(), account=target.account, index_roots=(target.uri,),
                                        tags=tags)
            if src_dir is not None:
                folder = src_dir
                await self._write_noted(job, target.key, lambda: importing.copy_selected(
                    self.ns.tree, folder, folders.select(folder), target.key))
            else:
                await self._write_noted(job, target.key, lambda: treeops.write(
                    self.ns.tree, f"{target.key}/SKILL.md", skill_text.encode()))
        if req.upload_id is not None:
            await self._drop_upload(req.upload_id, ctx)
        return self._result(job, target.uri, await self._submit(job, req.wait, ctx))

    @handles(catalog.CONTENT_REINDEX, timeout_s=600.0, journal=True)
    async def reindex(self, req: ingest_msgs.ReindexRequest, ctx: Ctx) -> ingest_msgs.ReindexResult:
        """An index job over the subtree as it is on disk: each file's rows are planned again for
        the current embedder (vectors it already has for a text are reused, the others made), and
        its directories summarised and embedded again. A space root (`viking://resources`) may be
        given: nothing is written under it but summaries."""
        ident = ctx.identity
        vp = self._writable(req.uri, ident, roots=True)
        if vp.segments in ((), ("user",)) and ident.role == "user":
            raise PermissionDenied("this holds every user's space: a user key reindexes its own (viking://~) "
                                   "and the shared ones (viking://resources)", {"uri": vp.uri})
        st = await asyncio.to_thread(self.ns.tree.stat, vp.key)
        if st is None:
            raise NotFound("nothing at this URI", {"uri": vp.uri})
        if req.recursive or not st.is_dir:
            job = ingest_msgs.IngestJob(job_id=self._job_id(), account=vp.account, index_roots=(vp.uri,))
        else:
            job = ingest_msgs.IngestJob(job_id=self._job_id(), account=vp.account, refresh_dirs=(vp.uri,))
        done = await self._submit(job, req.wait, ctx)
        return ingest_msgs.ReindexResult(uri=vp.uri, index_job=job.job_id, indexed=bool(done),
                                         rows=done.rows if done else 0, index_seq=done.index_seq if done else 0)

    @handles(catalog.CONTENT_SET_TAGS, timeout_s=120.0, journal=True)
    async def set_tags(self, req: ingest_msgs.SetTagsRequest, ctx: Ctx) -> ingest_msgs.SetTagsResult:
        """The file's tags live in its directory's `.index.json`; the re-index carries them to every
        row of the file (a long document's node and sections too)."""
        vp = self._writable(req.uri, ctx.identity)
        t = self.ns.tree
        st = await asyncio.to_thread(t.stat, vp.key)
        if st is None or st.is_dir:
            raise (InvalidArgument("tags belong to files, not directories", {"uri": vp.uri}) if st is not None
                   else NotFound("no such file", {"uri": vp.uri}))
        given = rows_mod.check_tags(req.tags)

        def update() -> tuple[str, ...]:
            facts = sidecar.load(t, parent(vp.key))
            old = facts.get(vp.name)
            if old is None:
                raise Conflict("the file is not indexed yet; set its tags once it is", {"uri": vp.uri})
            if req.mode == "replace":
                new = given
            elif req.mode == "add":
                new = rows_mod.check_tags((*old.tags, *given))
            else:
                new = tuple(t for t in old.tags if t not in given)
            facts[vp.name] = msgspec.structs.replace(old, tags=new)
            sidecar.save(t, parent(vp.key), facts)
            return new

        tags = await asyncio.to_thread(update)
        job = ingest_msgs.IngestJob(job_id=self._job_id(), account=vp.account, index_roots=(vp.uri,))
        done = await self._submit(job, req.wait, ctx)
        return ingest_msgs.SetTagsResult(uri=vp.uri, tags=list(tags), index_job=job.job_id, indexed=bool(done),
                                         index_seq=done.index_seq if done else 0)

    @handles(catalog.MEMORIES_WRITE, timeout_s=120.0, journal=True)
    async def write_memory(self, req: ingest_msgs.WriteMemoryRequest, ctx: Ctx) -> ingest_msgs.IngestResult:
        """`memories.write`: Write an explicit memory."""
        tags = rows_mod.check_tags(req.tags)
        ident = ctx.identity
        space = f"viking://~/peers/{ident.peer}/memories" if ident.peer else "viking://~/memories"
        # Content-derived name: writing the same memory twice is one memory; a fact already said in
        # other words merges into the memory that says it (the old wording kept as a version).
        name = req.name or f"mem_{rows_mod.sha256(req.content.encode())[:16]}.md"
        vp = self._writable(f"{space}/{req.category}/{name}", ident)
        t = self.ns.tree
        if (req.name is None and req.category not in memories.APPEND_ONLY
                and await asyncio.to_thread(t.stat, vp.key) is None):
            same = await asyncio.to_thread(memories.same_fact_in, t, parent(vp.key), req.content)
            if same is not None:
                vp = self.ns.child(self.ns.resolve(vp.parent_uri, ident), same)
                await asyncio.to_thread(memory_history.save_version, self.ns.tree, vp.key, "merge",
                                        clock_now())
        job = ingest_msgs.IngestJob(job_id=self._job_id(), account=vp.account, index_roots=(vp.uri,),
                                    tags=(*tags, f"memory_type={req.category}"))
        await self._write_noted(job, vp.key, lambda: treeops.write(t, vp.key, req.content.encode()))
        return self._result(job, vp.uri, await self._submit(job, req.wait, ctx))

    def _memory(self, uri: str, ident: Identity, existing: bool = False) -> VikingPath:
        vp = self._writable(uri, ident)
        if not memories.is_memory_file(vp):
            raise InvalidArgument("not a memory: memories live at .../memories/<category>/<name>", {"uri": vp.uri})
        if existing and not treeops.is_file(self.ns.tree, vp.key):
            raise NotFound("no such memory", {"uri": vp.uri})
        return vp

    @handles(catalog.MEMORIES_UPDATE, timeout_s=120.0, journal=True)
    async def update_memory(self, req: ingest_msgs.UpdateMemoryRequest, ctx: Ctx) -> ingest_msgs.IngestResult:
        """`memories.update`: Replace a memory's text (the old text is kept as a version)."""
        vp = self._memory(req.uri, ctx.identity, existing=True)
        await asyncio.to_thread(memory_history.save_version, self.ns.tree, vp.key, "update", clock_now())
        job = ingest_msgs.IngestJob(job_id=self._job_id(), account=vp.account, index_roots=(vp.uri,))
        await self._write_noted(job, vp.key, lambda: treeops.write(self.ns.tree, vp.key, req.content.encode()))
        return self._result(job, vp.uri, await self._submit(job, req.wait, ctx))

    @handles(catalog.MEMORIES_DELETE, timeout_s=120.0, journal=True)
    async def delete_memory(self, req: ingest_msgs.MemoryRef, ctx: Ctx) -> fs_msgs.ChangeResult:
        """Forget: the memory leaves the tree and the index; its text stays in its history."""
        vp = self._memory(req.uri, ctx.identity, existing=True)
        await asyncio.to_thread(memory_history.save_version, self.ns.tree, vp.key, "delete", clock_now())
        return await self._remove(vp, [(vp.uri, 2)], False, req.wait, ctx)

    @handles(catalog.MEMORIES_HISTORY)
    async def memory_history(self, req: ingest_msgs.MemoryRef, ctx: Ctx) -> ingest_msgs.MemoryHistory:
        """`memories.history`: A memory's text now and every earlier version."""
        vp = self._memory(req.uri, ctx.identity)
        versions = await asyncio.to_thread(memory_history.versions, self.ns.tree, vp.key)
        current = await asyncio.to_thread(treeops.read_text, self.ns.tree, vp.key)
        if current is None and not versions:
            raise NotFound("no such memory", {"uri": vp.uri})
        return ingest_msgs.MemoryHistory(uri=vp.uri, current=current, versions=[
            ingest_msgs.MemoryVersion(version=v.version, at=v.at, reason=v.reason, content=v.content)
            for v in versions])

    # ----- the work queue ---------------------------------------------------------------

    @consumes(catalog.INGEST, ack_wait_s=60.0, max_deliver=6, concurrency=2)
    async def run_job(self, job: ingest_msgs.IngestJob, att: Attempt) -> None:
        """A job of the `ingest` work queue."""
        try:
            done = await self.pipeline.process(job)
        except Exception as e:
            if att.delivered >= 6:
                self.jobs_failed += 1
                await self.bus.publish_event(subjects.ingest_done(job.account, job.job_id), ingest_msgs.IngestResult(
                    job_id=job.job_id, root_uri=",".join(job.index_roots), status="failed", error=str(e)),
                    f"ingest.done.{job.job_id}")
            raise
        self.jobs_done += 1
        await self.bus.publish_event(subjects.ingest_done(job.account, job.job_id), done,
                                     f"ingest.done.{job.job_id}")
        faults.point("ingest.after_done")  # done announced, the work-queue message not yet acknowledged
