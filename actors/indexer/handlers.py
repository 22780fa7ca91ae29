"""The indexer actor: tree writes, ingest of resources / skills / memories, and the ingest work queue.

Writes land on disk first (atomically), then an `IngestJob` goes to the JetStream work queue;
the job generates abstracts and overviews, embeds, and publishes index rows to the index log.
A worker that dies mid-job leaves the job unacknowledged, so another worker redoes it; every
step of a job is an upsert or a delete by key, so redoing it is harmless.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from pathlib import Path

import msgspec
import numpy as np

from skald.actors.indexer import rows as R
from skald.actors.kit.clock import now as clock_now
from skald.actors.kit.clock import request_id
from skald.actors.kit.decl import consumes, handles
from skald.actors.kit.ports import Bus, Embedder, Summarizer
from skald.actors.kit.request import Attempt, Ctx
from skald.messages import fs as F
from skald.messages import ingest as I
from skald.messages import subjects as S
from skald.messages.errors import Conflict, InvalidArgument, NotFound, PermissionDenied
from skald.messages.index import IndexChange, IndexDelete, IndexRow
from skald.store import faults, sidecar
from skald.store import tree as T
from skald.store.index import row_subject_token
from skald.store.uri import Identity, Namespace, VikingPath, join_uri

INGEST_QUEUE = "ingest"
EMBED_BATCH = 32
MAX_FILE_BYTES = 16 * 1024 * 1024


class Indexer:
    def __init__(self, ns: Namespace, embedder: Embedder, summarizer: Summarizer, bus: Bus,
                 clock: Callable[[], float] = clock_now, import_roots: list[Path] | None = None) -> None:
        self.ns = ns
        self.import_roots = [p.resolve() for p in import_roots or []]
        self.embedder = embedder
        self.summarizer = summarizer
        self.bus = bus
        self.clock = clock
        self.jobs_done = 0
        self.jobs_failed = 0

    def health(self) -> dict[str, object]:
        return {"status": "ok", "jobs_done": self.jobs_done, "summarizer": self.summarizer.name,
                "embedder": self.embedder.name}

    # ----- requests ---------------------------------------------------------------------

    def _writable(self, uri: str, ident: Identity) -> VikingPath:
        vp = self.ns.resolve(uri, ident)
        if len(vp.segments) < 2 or (vp.segments[0] == "user" and len(vp.segments) < 3):
            raise InvalidArgument("cannot write a space root", {"uri": vp.uri})
        if any(s.startswith(".") for s in vp.segments):
            raise InvalidArgument("names starting with '.' are reserved", {"uri": vp.uri})
        return vp

    async def _submit(self, job: I.IngestJob, wait: bool, ctx: Ctx) -> I.IngestResult | None:
        """Queue a job; with `wait`, return its outcome (None if the deadline comes first)."""
        faults.point("ingest.before_enqueue")  # the file is on disk; no job yet
        if not wait:
            await self.bus.enqueue(INGEST_QUEUE, job, job.job_id)
            faults.point("ingest.after_enqueue")
            return None
        async with self.bus.waiter(f"ingest.done.{job.job_id}") as w:
            await self.bus.enqueue(INGEST_QUEUE, job, job.job_id)
            faults.point("ingest.after_enqueue")  # queued, not answered
            raw = await w.wait(max(0.0, ctx.remaining() - 0.05))
        return msgspec.json.decode(raw, type=I.IngestResult) if raw else None

    @staticmethod
    def _job_id() -> str:
        """Derived from the request and its clock: a replay queues the same jobs."""
        return request_id("ingest")

    @handles(S.FS_WRITE, F.WriteRequest, timeout_s=120.0, journal=True)
    async def fs_write(self, req: F.WriteRequest, ctx: Ctx) -> F.WriteResult:
        vp = self._writable(req.uri, ctx.identity)
        if vp.path.is_dir():
            raise InvalidArgument("is a directory", {"uri": vp.uri})
        existed = vp.path.exists()
        data = req.content.encode()
        if req.mode == "create":
            await T.write_atomic(vp.path, data, exclusive=True)
        elif req.mode == "append" and existed:
            data = await T.read_bytes(vp.path) + data
            await T.write_atomic(vp.path, data)
        else:
            await T.write_atomic(vp.path, data)
        job = I.IngestJob(job_id=self._job_id(), account=vp.account, index_roots=(vp.uri,))
        done = await self._submit(job, req.wait, ctx)
        return F.WriteResult(uri=vp.uri, size=len(data), created=not existed, index_job=job.job_id,
                             indexed=bool(done and done.status == "done"), index_seq=done.index_seq if done else 0)

    @handles(S.FS_MKDIR, F.MkdirRequest, journal=True)
    async def fs_mkdir(self, req: F.MkdirRequest, ctx: Ctx) -> F.ChangeResult:
        vp = self._writable(req.uri, ctx.identity)
        if vp.path.exists() and not vp.path.is_dir():
            raise Conflict("a file has that name", {"uri": vp.uri})
        if not req.parents and not vp.path.parent.is_dir():
            raise NotFound("parent directory does not exist", {"uri": vp.parent_uri})
        await asyncio.to_thread(vp.path.mkdir, parents=True, exist_ok=True)
        return F.ChangeResult(uri=vp.uri)

    def _rows_of(self, vp: VikingPath) -> list[tuple[str, int]]:
        """Every row key a subtree can have, read from the tree before it changes."""
        out: list[tuple[str, int]] = []
        if vp.path.is_file():
            return [(vp.uri, 2)]
        for d in T.walk_dirs_bottom_up(vp.path):
            dv = self.ns.from_path(vp.account, d)
            out += [(dv.uri, 0), (dv.uri, 1)]
        for f, _ in T.walk_files(vp.path):
            out.append((self.ns.from_path(vp.account, f).uri, 2))
        return out

    @handles(S.FS_RM, F.RmRequest, timeout_s=120.0, journal=True)
    async def fs_rm(self, req: F.RmRequest, ctx: Ctx) -> F.ChangeResult:
        vp = self._writable(req.uri, ctx.identity)
        if not vp.path.exists():
            raise NotFound("no such file or directory", {"uri": vp.uri})
        keys = await asyncio.to_thread(self._rows_of, vp)
        await asyncio.to_thread(T.remove_sync, vp.path, req.recursive)
        job = I.IngestJob(job_id=self._job_id(), account=vp.account, remove_rows=tuple(keys),
                          refresh_dirs=(vp.parent_uri,))
        done = await self._submit(job, req.wait, ctx)
        return F.ChangeResult(uri=vp.uri, index_job=job.job_id, indexed=bool(done), removed=len(keys),
                              index_seq=done.index_seq if done else 0)

    @handles(S.FS_MV, F.MvRequest, timeout_s=120.0, journal=True)
    async def fs_mv(self, req: F.MvRequest, ctx: Ctx) -> F.ChangeResult:
        src = self._writable(req.from_uri, ctx.identity)
        dst = self._writable(req.to_uri, ctx.identity)
        if dst.uri == src.uri or dst.uri.startswith(src.uri + "/"):
            raise InvalidArgument("cannot move a directory into itself", {"uri": dst.uri})
        if not src.path.exists():
            raise NotFound("no such file or directory", {"uri": src.uri})
        keys = await asyncio.to_thread(self._rows_of, src)
        await asyncio.to_thread(T.move_sync, src.path, dst.path)
        job = I.IngestJob(job_id=self._job_id(), account=src.account, remove_rows=tuple(keys),
                          index_roots=(dst.uri,), refresh_dirs=(src.parent_uri,))
        done = await self._submit(job, req.wait, ctx)
        return F.ChangeResult(uri=dst.uri, index_job=job.job_id, indexed=bool(done), removed=len(keys),
                              index_seq=done.index_seq if done else 0)

    def _result(self, job: I.IngestJob, root: str, done: I.IngestResult | None) -> I.IngestResult:
        if done is None:
            return I.IngestResult(job_id=job.job_id, root_uri=root, status="queued", generator=self.summarizer.name)
        return msgspec.structs.replace(done, root_uri=root)

    @handles(S.RESOURCES_ADD, I.AddResourceRequest, timeout_s=600.0, journal=True)
    async def add_resource(self, req: I.AddResourceRequest, ctx: Ctx) -> I.IngestResult:
        if (req.path is None) == (req.content is None):
            raise InvalidArgument("give exactly one of path or content")
        base = req.target_uri or "viking://resources"
        if req.content is not None:
            name = req.name or f"{R.slug(req.content.splitlines()[0] if req.content else '', 'doc')}" \
                                f"-{R.sha256(req.content.encode())[:8]}.md"
            target = self._writable(f"{base.rstrip('/')}/{name}", ctx.identity)
            self._check_resource_space(target)
            await T.write_atomic(target.path, req.content.encode())
        else:
            src = self._importable(req.path or "", ctx)
            if src.is_symlink():
                raise InvalidArgument("symlinks are not imported", {"path": req.path})
            target = self._writable(f"{base.rstrip('/')}/{req.name or src.name}", ctx.identity)
            self._check_resource_space(target)
            await asyncio.to_thread(_copy_tree, src, target.path)
        job = I.IngestJob(job_id=self._job_id(), account=target.account, index_roots=(target.uri,))
        return self._result(job, target.uri, await self._submit(job, req.wait, ctx))

    def _importable(self, raw: str, ctx: Ctx) -> Path:
        """A server-side path the caller may import: never for a user key (it would read files
        the server can read and the user cannot), and inside SKALD_IMPORT_ROOTS when set."""
        if ctx.identity.role in ("user", "worker"):
            raise PermissionDenied("server paths are imported with a root or admin key; send content instead",
                                   {"path": raw})
        src = Path(raw)
        if not src.is_absolute() or not src.exists():
            raise NotFound("no such local path on the server", {"path": raw})
        if self.import_roots:
            real = src.resolve()
            if not any(real == r or r in real.parents for r in self.import_roots):
                raise PermissionDenied("path is outside the import roots", {"path": raw})
        return src

    @staticmethod
    def _check_resource_space(vp: VikingPath) -> None:
        s = vp.segments
        if not (s[0] == "resources" or (s[0] == "user" and len(s) > 3 and s[2] == "resources")):
            raise InvalidArgument("resources live under viking://resources or viking://~/resources",
                                  {"uri": vp.uri})

    @handles(S.SKILLS_ADD, I.AddSkillRequest, timeout_s=600.0, journal=True)
    async def add_skill(self, req: I.AddSkillRequest, ctx: Ctx) -> I.IngestResult:
        if (req.path is None) == (req.content is None):
            raise InvalidArgument("give exactly one of path or content")
        if req.content is not None:
            name, _ = R.parse_skill(req.content)
            src_dir, skill_text = None, req.content
        else:
            src = self._importable(req.path or "", ctx)
            skill_md = src / "SKILL.md" if src.is_dir() else src
            if skill_md.name != "SKILL.md" or not skill_md.is_file():
                raise InvalidArgument("a skill package is a directory holding SKILL.md", {"path": req.path})
            skill_text = skill_md.read_text("utf-8", errors="replace")
            name, _ = R.parse_skill(skill_text)
            src_dir = src if src.is_dir() else None
        root = "viking://agent/skills" if req.scope == "agent" else "viking://~/skills"
        target = self._writable(f"{root}/{name}", ctx.identity)
        if src_dir is not None:
            await asyncio.to_thread(_copy_tree, src_dir, target.path)
        else:
            await T.write_atomic(target.path / "SKILL.md", skill_text.encode())
        job = I.IngestJob(job_id=self._job_id(), account=target.account, index_roots=(target.uri,))
        return self._result(job, target.uri, await self._submit(job, req.wait, ctx))

    @handles(S.MEMORIES_WRITE, I.WriteMemoryRequest, timeout_s=120.0, journal=True)
    async def write_memory(self, req: I.WriteMemoryRequest, ctx: Ctx) -> I.IngestResult:
        tags = R.check_tags(req.tags)
        ident = ctx.identity
        space = f"viking://~/peers/{ident.peer}/memories" if ident.peer else "viking://~/memories"
        # Content-derived name: writing the same memory twice is one memory.
        name = req.name or f"mem_{R.sha256(req.content.encode())[:16]}.md"
        vp = self._writable(f"{space}/{req.category}/{name}", ident)
        await T.write_atomic(vp.path, req.content.encode())
        job = I.IngestJob(job_id=self._job_id(), account=vp.account, index_roots=(vp.uri,),
                          tags=(*tags, f"memory_type={req.category}"))
        return self._result(job, vp.uri, await self._submit(job, req.wait, ctx))

    # ----- the work queue ---------------------------------------------------------------

    @consumes(INGEST_QUEUE, I.IngestJob, ack_wait_s=60.0, max_deliver=6, concurrency=2)
    async def run_job(self, job: I.IngestJob, att: Attempt) -> None:
        try:
            done = await self.process(job)
        except Exception as e:
            if att.delivered >= 6:
                self.jobs_failed += 1
                await self.bus.publish_event(f"ingest.done.{job.job_id}", I.IngestResult(
                    job_id=job.job_id, root_uri=",".join(job.index_roots), status="failed", error=str(e)),
                    f"ingest.done.{job.job_id}")
            raise
        self.jobs_done += 1
        await self.bus.publish_event(f"ingest.done.{job.job_id}", done, f"ingest.done.{job.job_id}")
        faults.point("ingest.after_done")  # done announced, the work-queue message not yet acknowledged

    async def process(self, job: I.IngestJob) -> I.IngestResult:
        """Run one job to the end: deletes, file rows, directory summaries bottom-up, publish."""
        ident = Identity(account=job.account, is_root=True)
        changes: list[tuple[str, IndexChange]] = []
        for uri, level in job.remove_rows:
            changes.append((row_subject_token(job.account, uri, level),
                            IndexChange(delete=IndexDelete(account=job.account, uri=uri, level=level))))
        files: list[VikingPath] = []
        dirs: list[VikingPath] = []
        for root in job.index_roots:
            vp = self.ns.resolve(root, ident)
            if vp.path.is_file():
                files.append(vp)
            elif vp.path.is_dir():
                found = await asyncio.to_thread(lambda p=vp.path: (list(T.walk_files(p)), T.walk_dirs_bottom_up(p)))
                files += [self.ns.from_path(vp.account, f) for f, _ in found[0]]
                dirs += [self.ns.from_path(vp.account, d) for d in found[1]]
        files = [f for f in files if R.file_is_indexed(f.segments)]
        total = len(files) + len(dirs)
        file_rows = await self._file_rows(job, files, total)
        changes += file_rows
        # Directories inside the job bottom-up, then every ancestor of what changed.
        refresh: dict[str, VikingPath] = {}
        for d in dirs:
            refresh.setdefault(d.uri, d)
        for uri in (*job.index_roots, *job.refresh_dirs):
            vp = self.ns.resolve(uri, ident)
            segs = vp.segments if vp.path.is_dir() and uri in job.refresh_dirs else vp.segments[:-1]
            while len(segs) >= 2:
                p = self.ns.resolve(join_uri(segs), ident)
                refresh.setdefault(p.uri, p)
                segs = segs[:-1]
        ordered = sorted(refresh.values(), key=lambda v: len(v.segments), reverse=True)
        dir_changes = await self._dir_rows(job, ordered)
        changes += dir_changes
        faults.point("ingest.before_publish")  # summaries and sidecars written, rows not published
        seq = await self.bus.publish_index(changes)
        faults.point("ingest.after_publish")  # rows published, job not acknowledged
        return I.IngestResult(job_id=job.job_id, root_uri=",".join(job.index_roots), status="done",
                            files=len(files), directories=len(ordered), rows=len(changes), index_seq=seq,
                            generator=self.summarizer.name)

    async def _file_rows(self, job: I.IngestJob, files: list[VikingPath], total: int) -> list[tuple[str, IndexChange]]:
        out: list[tuple[str, IndexChange]] = []
        by_dir: dict[Path, dict[str, sidecar.FileFacts]] = {}
        for i in range(0, len(files), EMBED_BATCH):
            batch = files[i : i + EMBED_BATCH]
            pending: list[tuple[VikingPath, str, tuple[str, ...], os.stat_result, str, str, str]] = []
            for vp in batch:
                try:
                    st = vp.path.stat()
                    if st.st_size > MAX_FILE_BYTES:
                        continue
                    data = await T.read_bytes(vp.path)
                except (NotFound, InvalidArgument, OSError):
                    continue
                if not R.is_text(data):
                    continue
                facts = by_dir.setdefault(vp.path.parent, sidecar.load(vp.path.parent))
                sha = R.sha256(data)
                old = facts.get(vp.name)
                text = data.decode("utf-8", errors="replace")
                if old and old.sha == sha and old.summarizer == self.summarizer.name:
                    summary = old.abstract
                else:
                    summary = await self.summarizer.file_abstract(vp.name, text)
                tags = R.check_tags((*(old.tags if old else ()), *job.tags)) if (old or job.tags) else ()
                abstract, embed_text = R.file_texts(vp.segments, text, summary)
                facts[vp.name] = sidecar.FileFacts(mtime_ns=st.st_mtime_ns, size=st.st_size, sha=sha,
                                                   abstract=summary, tags=tags, summarizer=self.summarizer.name)
                pending.append((vp, abstract, tags, st, embed_text, sha, text))
            if not pending:
                continue
            vecs = await self.embedder.embed_passages([p[4] for p in pending])
            for (vp, abstract, tags, st, _, sha, body), vec in zip(pending, vecs, strict=True):
                row = R.make_row(vp.account, vp.segments, 2, abstract, tags=tags,
                                 created_at=min(st.st_ctime, st.st_mtime), updated_at=st.st_mtime,
                                 content_hash=sha, model=self.embedder.name, vector=vec,
                                 owner=R.owner_of(vp.segments), text=f"{vp.name}\n{body}")
                out.append((row_subject_token(vp.account, vp.uri, 2), IndexChange(upsert=row)))
            await self.bus.notify(f"ingest.progress.{job.job_id}", I.IngestProgress(
                job_id=job.job_id, done=min(i + EMBED_BATCH, len(files)), total=total, stage="files"))
        for d, facts in by_dir.items():
            await asyncio.to_thread(sidecar.save, d, facts)
        return out

    async def _dir_rows(self, job: I.IngestJob, dirs: list[VikingPath]) -> list[tuple[str, IndexChange]]:
        rows: list[tuple[IndexRow, str]] = []
        for vp in dirs:
            if not vp.path.is_dir() or not R.dir_has_rows(vp.segments):
                continue
            children = await self._children(vp)
            readme = None
            skill = vp.path / "SKILL.md"
            for cand in ("README.md", "readme.md", "README"):
                if (vp.path / cand).is_file():
                    readme = T.read_text_sync(vp.path / cand)
                    break
            overview = await self.summarizer.dir_overview(vp.name, children, readme)
            abstract = await self.summarizer.dir_abstract(vp.name, overview)
            if skill.is_file():
                try:
                    sname, desc = R.parse_skill(T.read_text_sync(skill) or "")
                    abstract = f"{sname}: {desc}"[:256]
                except InvalidArgument:
                    pass
            await T.write_atomic(vp.path / T.OVERVIEW, overview.encode())
            await T.write_atomic(vp.path / T.ABSTRACT, abstract.encode())
            st = vp.path.stat()
            now = st.st_mtime
            for level, text in ((0, abstract), (1, overview)):
                rows.append((R.make_row(vp.account, vp.segments, level, abstract,
                                        tags=(), created_at=min(st.st_ctime, now), updated_at=now,
                                        content_hash=R.sha256(text.encode()), model=self.embedder.name,
                                        vector=np.zeros(1), owner=R.owner_of(vp.segments),
                                        text=f"{vp.name}\n{text}"), text))
        if not rows:
            return []
        vecs = await self.embedder.embed_passages([t for _, t in rows])
        out = []
        for (row, _), vec in zip(rows, vecs, strict=True):
            row = msgspec.structs.replace(row, vector=R.vec_bytes(vec))
            out.append((row_subject_token(row.account, row.uri, row.level), IndexChange(upsert=row)))
        return out

    async def _children(self, vp: VikingPath) -> list[tuple[str, bool, str]]:
        facts = sidecar.load(vp.path)
        out: list[tuple[str, bool, str]] = []
        changed = False
        for e in T.listdir_sorted(vp.path):
            if e.is_dir(follow_symlinks=False):
                out.append((e.name, True, T.read_text_sync(Path(e.path) / T.ABSTRACT, "") or ""))
            elif e.is_file(follow_symlinks=False):
                st = e.stat()
                f = facts.get(e.name)
                if f is None or f.mtime_ns != st.st_mtime_ns or f.size != st.st_size:
                    data = Path(e.path).read_bytes() if st.st_size <= MAX_FILE_BYTES else b""
                    if not R.is_text(data):
                        out.append((e.name, False, ""))
                        continue
                    summary = await self.summarizer.file_abstract(e.name, data.decode("utf-8", errors="replace"))
                    f = sidecar.FileFacts(mtime_ns=st.st_mtime_ns, size=st.st_size, sha=R.sha256(data),
                                          abstract=summary, tags=f.tags if f else (), summarizer=self.summarizer.name)
                    facts[e.name] = f
                    changed = True
                out.append((e.name, False, f.abstract))
        if changed:
            await asyncio.to_thread(sidecar.save, vp.path, facts)
        return out


def _copy_tree(src: Path, dst: Path) -> None:
    """Copy a file or a directory into the tree, file by file atomically; no symlinks, no hidden files."""
    if src.is_file():
        T.write_atomic_sync(dst, src.read_bytes())
        return
    for dirpath, dirnames, filenames in os.walk(src, followlinks=False):
        dirnames[:] = [d for d in dirnames if not d.startswith(".")]
        rel = Path(dirpath).relative_to(src)
        for fn in filenames:
            p = Path(dirpath) / fn
            if fn.startswith(".") or p.is_symlink():
                continue
            T.write_atomic_sync(dst / rel / fn, p.read_bytes())
    dst.mkdir(parents=True, exist_ok=True)
