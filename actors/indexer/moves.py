"""Moves and removals (a mixin of the indexer actor): `fs.rm`, `fs.mv` and the removal a forgotten
memory makes. Each reads the row keys of what it takes away before the tree changes, notes the
change with its index job (`store/index_changes.py`), changes the tree, then queues the job. (A
write notes its job too, more cheaply: `Jobs._write_noted`.)"""

from __future__ import annotations

import asyncio

from skald.actors.indexer import file_rows
from skald.actors.indexer.jobs import Jobs
from skald.actors.kit.decl import handles
from skald.actors.kit.request import Ctx
from skald.messages import catalog
from skald.messages import fs as fs_msgs
from skald.messages import ingest as ingest_msgs
from skald.messages.errors import InvalidArgument, NotFound
from skald.store import document_records, treeops
from skald.store.uri import Identity, Namespace, VikingPath


class Moves(Jobs):
    """Needs the indexer's namespace and its write check."""

    ns: Namespace

    def _writable(self, uri: str, ident: Identity, roots: bool = False) -> VikingPath:
        raise NotImplementedError

    def _rows_of(self, vp: VikingPath) -> list[tuple[str, int]]:
        """Every row key a subtree can have, read from the tree before it changes (NOT_FOUND when a
        concurrent writer removed it while it was read)."""
        try:
            return self._row_keys(vp)
        except (FileNotFoundError, NotADirectoryError) as e:
            raise NotFound("no such file or directory", {"uri": vp.uri}) from e

    def _row_keys(self, vp: VikingPath) -> list[tuple[str, int]]:
        out: list[tuple[str, int]] = []
        t = self.ns.tree
        if treeops.is_file(t, vp.key):
            return sorted(file_rows.row_keys(vp.uri, document_records.load(t, vp.key)))
        for d in treeops.walk_dirs_bottom_up(t, vp.key):
            dv = self.ns.from_key(vp.account, d)
            out += [(dv.uri, 0), (dv.uri, 1)]
        files = [f for f, _, _ in treeops.walk_files(t, vp.key)]
        for f, rec in zip(files, document_records.load_many(t, files), strict=True):
            out += sorted(file_rows.row_keys(self.ns.from_key(vp.account, f).uri, rec))
        return out

    @handles(catalog.FS_RM, timeout_s=120.0, journal=True)
    async def fs_rm(self, req: fs_msgs.RmRequest, ctx: Ctx) -> fs_msgs.ChangeResult:
        """`fs.rm`: Remove a file or directory."""
        vp = self._writable(req.uri, ctx.identity)
        if await asyncio.to_thread(self.ns.tree.stat, vp.key) is None:
            raise NotFound("no such file or directory", {"uri": vp.uri})
        keys = await asyncio.to_thread(self._rows_of, vp)
        return await self._remove(vp, keys, req.recursive, req.wait, ctx)

    async def _remove(self, vp: VikingPath, keys: list[tuple[str, int]], recursive: bool, wait: bool,
                      ctx: Ctx) -> fs_msgs.ChangeResult:
        """Remove from the tree, then its rows from the index (and refresh its parent's summaries)."""
        t = self.ns.tree

        def remove() -> None:
            was_file = treeops.is_file(t, vp.key)
            treeops.remove(t, vp.key, recursive)
            if was_file:
                document_records.remove(t, vp.key)

        job = ingest_msgs.IngestJob(job_id=self._job_id(), account=vp.account, remove_rows=tuple(keys),
                                    refresh_dirs=(vp.parent_uri,))
        await self._change(job, vp.key, "", remove)
        done = await self._submit(job, wait, ctx)
        await self._changed(job)
        return fs_msgs.ChangeResult(uri=vp.uri, index_job=job.job_id, indexed=bool(done), removed=len(keys),
                                    index_seq=done.index_seq if done else 0)

    @handles(catalog.FS_MV, timeout_s=120.0, journal=True)
    async def fs_mv(self, req: fs_msgs.MvRequest, ctx: Ctx) -> fs_msgs.ChangeResult:
        """`fs.mv`: Move a file or directory."""
        src = self._writable(req.from_uri, ctx.identity)
        dst = self._writable(req.to_uri, ctx.identity)
        if dst.uri == src.uri or dst.uri.startswith(src.uri + "/"):
            raise InvalidArgument("cannot move a directory into itself", {"uri": dst.uri})
        t = self.ns.tree
        if await asyncio.to_thread(t.stat, src.key) is None:
            raise NotFound("no such file or directory", {"uri": src.uri})
        keys = await asyncio.to_thread(self._rows_of, src)

        def move() -> None:
            was_file = treeops.is_file(t, src.key)
            treeops.move(t, src.key, dst.key)
            if was_file:
                document_records.remove(t, src.key)

        job = ingest_msgs.IngestJob(job_id=self._job_id(), account=src.account, remove_rows=tuple(keys),
                                    index_roots=(dst.uri,), refresh_dirs=(src.parent_uri,))
        await self._change(job, src.key, dst.key, move)
        done = await self._submit(job, req.wait, ctx)
        await self._changed(job)
        return fs_msgs.ChangeResult(uri=dst.uri, index_job=job.job_id, indexed=bool(done), removed=len(keys),
                              index_seq=done.index_seq if done else 0)
