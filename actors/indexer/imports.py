"""Imports of resources (a mixin of the indexer actor): uploads, and `resources.add` from content,
a server path, a URL or git repository, or an upload. What a folder import takes comes from
`messages/folders.py`, and where a URL, repository or upload comes from, from `sources.py`; this module notes
the ingest job (`store/index_changes.py`), copies into the tree, removes what vanished from a re-added
folder, and queues the job."""

from __future__ import annotations

import asyncio
import tempfile
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import msgspec

from skald.actors.indexer import file_rows, sources
from skald.actors.indexer import rows as rows_mod
from skald.actors.indexer.jobs import Jobs
from skald.actors.kit import lease as lease_mod
from skald.actors.kit.clock import request_id
from skald.actors.kit.decl import handles
from skald.actors.kit.ports import Events, LeaseStore, WorkQueue
from skald.actors.kit.request import Ctx
from skald.actors.text import formats
from skald.messages import catalog, folders
from skald.messages import ingest as ingest_msgs
from skald.messages.errors import InvalidArgument, NotFound, PermissionDenied
from skald.store import document_records, importing, treeops
from skald.store.uri import Identity, Namespace, VikingPath


def import_lease(job_id: str) -> str:
    """The lease a running import holds (`lease.hold`), named in its note."""
    return f"import.{job_id}"


class ImportsBus(Events, WorkQueue, LeaseStore, Protocol):
    """The bus ports an import uses: a job's, and the lease it holds while it runs."""


@dataclass(slots=True)
class Imported:
    """What an import of a folder, repository or upload does: files skipped and why, files gone from the
    source and their rows to remove, files copied."""

    skipped: list[ingest_msgs.Skipped] = field(default_factory=list)
    vanished: list[str] = field(default_factory=list)  # relative paths removed from the target
    remove_rows: list[tuple[str, int]] = field(default_factory=list)
    taken: list[str] = field(default_factory=list)  # relative paths copied from the source


class Imports(Jobs):
    """Needs the indexer's namespace, import roots, per-file limit and its write helper."""

    ns: Namespace
    import_roots: list[Path]
    max_file_bytes: int  # the per-file limit (SKALD_MAX_FILE_MB): a larger file is reported, never stored
    bus: ImportsBus
    lease_ttl_s: float  # how long a dead worker's import lease outlives it

    def _writable(self, uri: str, ident: Identity) -> VikingPath:
        raise NotImplementedError

    @handles(catalog.RESOURCES_UPLOAD, timeout_s=60.0, journal=True)
    async def upload(self, req: ingest_msgs.UploadRequest, ctx: Ctx) -> ingest_msgs.UploadResult:
        """One piece of an uploaded file; the first call names the upload (derived from the
        request, so a replay writes the same upload)."""
        uid = req.upload_id or request_id("upload")
        root = sources.upload_root(ctx.identity.account, uid)
        t = self.ns.tree

        def run() -> int | None:
            sources.check_owner(t, root, ctx.identity.user, create=req.upload_id is None)
            return sources.write_piece(t, root, req.path, req.offset, req.data, self.max_file_bytes, req.size)

        size = await asyncio.to_thread(run)
        if size is None:
            return ingest_msgs.UploadResult(upload_id=uid, path=req.path, size=0, refused="too_large",
                                            max_bytes=self.max_file_bytes)
        return ingest_msgs.UploadResult(upload_id=uid, path=req.path, size=size)

    @handles(catalog.RESOURCES_ADD, timeout_s=600.0, journal=True)
    async def add_resource(self, req: ingest_msgs.AddResourceRequest, ctx: Ctx) -> ingest_msgs.IngestResult:
        """`resources.add`: Ingest a resource (a server path, content, a URL or git repository, or an upload)."""
        given = [x for x in (req.path, req.content, req.url, req.upload_id) if x is not None]
        if len(given) != 1:
            raise InvalidArgument("give exactly one of path, content, url or upload_id")
        tags = rows_mod.check_tags(req.tags)
        base = req.target_uri or "viking://resources"
        if req.content is not None:
            name = req.name or f"{rows_mod.slug(req.content.splitlines()[0] if req.content else '', 'doc')}" \
                                f"-{rows_mod.sha256(req.content.encode())[:8]}.md"
            target = self._writable(f"{base.rstrip('/')}/{name}", ctx.identity)
            self._check_resource_space(target)
            job = ingest_msgs.IngestJob(job_id=self._job_id(), account=target.account, index_roots=(target.uri,),
                                        tags=tags)
            content = req.content.encode()
            await self._write_noted(job, target.key, lambda: treeops.write(self.ns.tree, target.key, content))
            return self._result(job, target.uri, await self._submit(job, req.wait, ctx))
        job_id = self._job_id()
        key = import_lease(job_id)
        async with lease_mod.hold(self.bus, key, job_id, self.lease_ttl_s) as leased:
            job, target, got = await self._import_source(req, ctx, job_id, tags, base, key if leased else "")
            if req.upload_id is not None:
                await self._drop_upload(req.upload_id, ctx)
            res = self._result(job, target.uri, await self._submit(job, req.wait, ctx))
            await self._changed(job)
        return msgspec.structs.replace(res, removed=len(got.vanished), skipped=[*got.skipped, *res.skipped])

    async def _import_source(self, req: ingest_msgs.AddResourceRequest, ctx: Ctx, job_id: str, tags: tuple[str, ...],
                             base: str, lease: str) -> tuple[ingest_msgs.IngestJob, VikingPath, Imported]:
        """The source fetched into scratch space and copied into the tree, noted first: killed part
        way, or before its job is queued, a retry would no longer see the files it removed, and no
        client resends an import by itself. The note names the lease the import holds, so a pass
        finishes it soon after the worker dies rather than after the request's deadline."""
        scratch = self.ns.data_dir / "tmp"
        scratch.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=scratch, prefix="import-") as tmp:
            src = await self._source(req, ctx, Path(tmp))
            target = self._writable(f"{base.rstrip('/')}/{req.name or src.name}", ctx.identity)
            self._check_resource_space(target)
            got = await asyncio.to_thread(self._plan_import, src, target, req)
            job = ingest_msgs.IngestJob(job_id=job_id, account=target.account, index_roots=(target.uri,),
                                        remove_rows=tuple(got.remove_rows), tags=tags)
            await self._change(job, "", target.key, lambda: self._import(src, target, got),
                               until=time.time() + ctx.remaining(), lease=lease)
            if req.upload_id is not None:
                got.skipped += await asyncio.to_thread(self._refused, req.upload_id, ctx, src, target)
        return job, target, got

    async def _source(self, req: ingest_msgs.AddResourceRequest, ctx: Ctx, tmp: Path) -> Path:
        """The local file or folder an import copies from (fetched or cloned into `tmp`)."""
        if req.path is not None:
            src = self._importable(req.path, ctx)
            if src.is_symlink():
                raise InvalidArgument("symlinks are not imported", {"path": req.path})
            return src
        if req.url is not None:
            if ctx.identity.role in ("user", "worker"):
                raise PermissionDenied("URLs are fetched by the server with a root or admin key; upload the "
                                       "files instead", {"url": req.url})
            if sources.is_git_url(req.url):
                return await sources.clone_git(req.url, tmp)
            if not req.url.startswith(("http://", "https://")):
                raise InvalidArgument("only http(s) URLs and git repositories are fetched", {"url": req.url})
            return await sources.fetch_url(req.url, tmp)
        return await self._uploaded(req.upload_id or "", req.name, ctx, tmp)

    async def _uploaded(self, upload_id: str, name: str | None, ctx: Ctx, tmp: Path, folder: bool = False) -> Path:
        """What an upload holds: its one file (a zip unpacked into `tmp` unless it is named as a
        .zip to keep; always when `folder`), or its folder of files."""
        root = sources.upload_root(ctx.identity.account, upload_id)
        await asyncio.to_thread(sources.check_owner, self.ns.tree, root, ctx.identity.user, False)
        files = await asyncio.to_thread(sources.materialise, self.ns.tree, root, tmp / ".upload")
        top = sorted(files.iterdir())
        if not top:
            if big := await asyncio.to_thread(sources.refused, self.ns.tree, root):
                rel, size = big[0]
                raise sources.too_large(rel, size, self.max_file_bytes)
            raise InvalidArgument("the upload holds no file", {"upload_id": upload_id})
        if len(top) > 1:
            return files
        one = top[0]
        keep = not folder and (name or one.name).lower().endswith(".zip")
        if one.is_file() and not keep and zipfile.is_zipfile(one):
            # A folder sent as one archive (OpenViking's clients zip directories): unpacked.
            return await asyncio.to_thread(sources.unzip, one, tmp / (name or one.stem))
        return one

    def _refused(self, upload_id: str, ctx: Ctx, src: Path, target: VikingPath) -> list[ingest_msgs.Skipped]:
        """The upload's files refused as too large, as skipped files of the target (a folder's
        files are sent under the folder's name, which the target already carries)."""
        out = []
        for rel, size in sources.refused(self.ns.tree, sources.upload_root(ctx.identity.account, upload_id)):
            head, _, rest = rel.partition("/")
            under = rest if src.is_dir() and head == src.name and rest else rel
            out.append(sources.too_large_skip(f"{target.uri}/{under}", size, self.max_file_bytes))
        return out

    async def _drop_upload(self, upload_id: str, ctx: Ctx) -> None:
        await asyncio.to_thread(self.ns.tree.remove, sources.upload_root(ctx.identity.account, upload_id),
                                recursive=True)

    def _plan_import(self, src: Path, target: VikingPath, req: ingest_msgs.AddResourceRequest) -> Imported:
        """What the import takes, read before the tree changes: binaries of a folder are reported,
        not copied; files that vanished from a re-added folder go (with their rows) unless kept."""
        out = Imported()
        t = self.ns.tree
        rels = folders.select(src, req.include, req.exclude)
        if src.is_file() and (size := src.stat().st_size) > self.max_file_bytes:
            raise sources.too_large(src.name, size, self.max_file_bytes)
        if src.is_dir():
            kept = []
            for rel in rels:
                if (size := (src / rel).stat().st_size) > self.max_file_bytes:
                    out.skipped.append(sources.too_large_skip(f"{target.uri}/{rel}", size, self.max_file_bytes))
                    continue
                with (src / rel).open("rb") as f:
                    kind = formats.sniff(rel, f.read(formats.SNIFF_BYTES * 4))
                if kind.startswith("binary:"):
                    out.skipped.append(ingest_msgs.Skipped(uri=f"{target.uri}/{rel}", reason="unsupported_type",
                                                           detail=f"{kind.removeprefix('binary:')}; not imported"))
                else:
                    kept.append(rel)
            rels = kept
            if treeops.is_dir(t, target.key) and not req.keep_missing:
                out.vanished = sorted(set(importing.existing_files(t, target.key)) - set(rels))
        for rel in out.vanished:
            key = f"{target.key}/{rel}"
            out.remove_rows += sorted(file_rows.row_keys(self.ns.from_key(target.account, key).uri,
                                                         document_records.load(t, key)))
        out.taken = list(rels)
        return out

    def _import(self, src: Path, target: VikingPath, got: Imported) -> None:
        """The planned import made: the vanished files removed, the rest copied."""
        t = self.ns.tree
        for rel in got.vanished:
            key = f"{target.key}/{rel}"
            treeops.remove(t, key, False)
            document_records.remove(t, key)
        importing.copy_selected(t, src, got.taken, target.key)

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
