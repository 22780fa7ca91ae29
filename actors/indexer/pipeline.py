"""The ingest pipeline: one job from the work queue run to the end. Deletes first, then file rows
(bytes -> text through the format registry, abstract, embedding), then directory overviews and
abstracts bottom-up over every directory the job touched and their ancestors, then one publish
of every row change to the index log, and deletes of the rows whose file went meanwhile. The
directory rows are `dir_rows.py`'s.

Every step is an upsert or a delete by key, so a job redone after a crash writes the same rows.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

from skald.actors.indexer import file_rows
from skald.actors.indexer import rows as rows_mod
from skald.actors.indexer.dir_rows import DirRows
from skald.actors.indexer.wide import WideDirs
from skald.actors.kit.ports import Embedder, Events, IndexLog, Summarizer
from skald.actors.text import formats
from skald.actors.text.textfile import Unconvertible
from skald.messages import ingest as ingest_msgs
from skald.messages import subjects
from skald.messages.errors import InvalidArgument, NotFound
from skald.messages.index import IndexChange, IndexDelete
from skald.store import document_records, faults, sidecar, treeops
from skald.store.index import row_subject_token
from skald.store.language import languages_of_parts
from skald.store.treeport import Entry, StoreUnavailable, parent
from skald.store.uri import Identity, Namespace, VikingPath, join_uri

log = logging.getLogger("skald.indexer")

EMBED_BATCH = 32
PROGRESS_EVERY_S = 0.25  # the converting notes' pace
MAX_FILE_BYTES = 16 * 1024 * 1024  # the per-file limit's default (SKALD_MAX_FILE_MB)


class PipelineBus(Events, IndexLog, Protocol):
    """The bus ports the ingest pipeline uses: progress notes and the index log."""


@dataclass(slots=True)
class FileRows:
    """One file's index changes as published, and what it took: sections, skipped parts, passages embedded."""

    changes: list[tuple[str, IndexChange]]
    sections: int
    skipped: list[ingest_msgs.Skipped]
    embedded: int


class IngestPipeline(DirRows):
    """Files into index rows: conversion, sections, abstracts and overviews, embedding, publishing, and the
    directories above them refreshed."""

    def __init__(self, ns: Namespace, embedder: Embedder, summarizer: Summarizer, bus: PipelineBus,
                 max_file_bytes: int = MAX_FILE_BYTES) -> None:
        self.ns = ns
        self.max_file_bytes = max_file_bytes
        self._noted = 0.0  # when the last converting note went
        self.embedder = embedder
        self.summarizer = summarizer
        self.bus = bus
        self.wide = WideDirs()
        self._waiting: dict[str, VikingPath] = {}
        self._later: asyncio.Task[None] | None = None

    async def process(self, job: ingest_msgs.IngestJob) -> ingest_msgs.IngestResult:
        """Run one job to the end: deletes, file rows, directory summaries bottom-up, publish."""
        ident = Identity(account=job.account, is_root=True)
        changes: list[tuple[str, IndexChange]] = []
        for uri, level in job.remove_rows:
            changes.append((row_subject_token(job.account, uri, level),
                            IndexChange(delete=IndexDelete(account=job.account, uri=uri, level=level))))
        files: list[tuple[VikingPath, Entry]] = []  # with what the walk saw of each (size, time)
        dirs: list[VikingPath] = []
        t = self.ns.tree
        for root in job.index_roots:
            vp = self.ns.resolve(root, ident)
            st = await asyncio.to_thread(t.stat, vp.key)
            if st is not None and not st.is_dir:
                files.append((vp, st))
            elif st is not None:
                found = await asyncio.to_thread(lambda k=vp.key: (list(treeops.walk_files(t, k)),
                                                                  treeops.walk_dirs_bottom_up(t, k)))
                files += [(self.ns.from_key(vp.account, f), e) for f, e, _ in found[0]]
                dirs += [self.ns.from_key(vp.account, d) for d in found[1]]
        files = [(f, e) for f, e in files if rows_mod.file_is_indexed(f.segments)]
        total = len(files) + len(dirs)
        fr = await self._file_rows(job, files, total)
        changes += fr.changes
        # Directories inside the job bottom-up, then every ancestor of what changed.
        refresh: dict[str, VikingPath] = {}
        for d in dirs:
            refresh.setdefault(d.uri, d)
        for uri in (*job.index_roots, *job.refresh_dirs):
            vp = self.ns.resolve(uri, ident)
            segs = vp.segments if uri in job.refresh_dirs and await asyncio.to_thread(treeops.is_dir, t, vp.key) \
                else vp.segments[:-1]
            self._upward(ident, segs, refresh)
        ordered = _bottom_up(refresh)
        now = time.monotonic()
        for vp in ordered:
            if vp.uri not in job.refresh_dirs and self.wide.defer(vp.uri, now):
                self._waiting[vp.uri] = vp
        ordered = [vp for vp in ordered if vp.uri not in self._waiting]
        if self._waiting and (self._later is None or self._later.done()):
            self._later = asyncio.create_task(self._refresh_later(), name="wide-dirs")
        dir_changes = await self._dir_rows(ordered, job.at)
        changes += dir_changes
        faults.point("ingest.before_publish")  # summaries and sidecars written, rows not published
        seq = await self.bus.publish_index(changes)
        faults.point("ingest.after_publish")  # rows published, job not acknowledged
        if gone := await self._gone_since(changes):
            seq = max(seq, await self.bus.publish_index(gone))
        return ingest_msgs.IngestResult(job_id=job.job_id, root_uri=",".join(job.index_roots), status="done",
                            files=len(files), directories=len(ordered), rows=len(changes), index_seq=seq,
                            generator=self.summarizer.name, sections=fr.sections, skipped=fr.skipped,
                            embedded=fr.embedded + len(dir_changes))

    async def _gone_since(self, changes: list[tuple[str, IndexChange]]) -> list[tuple[str, IndexChange]]:
        """Deletes of the rows just published whose file or directory the tree no longer holds. A
        job reads a file, then publishes its rows; a removal between the two (fs.rm, a move, a
        re-added folder dropping what left its source) has its own job delete the rows, and a
        publish after that brought them back for ever (the crash campaign found it: a folder
        added twice a moment apart, the two jobs running side by side). Asked after the publish,
        so the rows go whichever of the two jobs publishes last."""
        nodes: dict[str, tuple[VikingPath, list[tuple[str, int]]]] = {}
        for _, c in changes:
            if (r := c.upsert) is not None:
                node = r.parent_uri if r.kind == "section" else r.uri  # a file's name may hold a "#"
                if node not in nodes:
                    nodes[node] = (self.ns.resolve(node, Identity(account=r.account, is_root=True)), [])
                nodes[node][1].append((r.uri, r.level))
        found = await asyncio.to_thread(self.ns.tree.stat_many, [vp.key for vp, _ in nodes.values()])
        return [d for (vp, keys), st in zip(nodes.values(), found, strict=True) if st is None
                for d in self._deletes(vp, keys)]

    async def _reuse(self, plans: list[tuple[VikingPath, Entry, tuple[str, ...], file_rows.FilePlan]]) -> None:
        """The vectors of sections indexed before from the same text, read from the rows the index
        log holds (only for files with a record saying so: a new file asks nothing)."""
        waiting = {(vp.account, r.uri, r.level): r for vp, _, _, p in plans for r in p.rows
                   if r.unchanged and r.vector is None}
        if waiting:
            file_rows.reuse(waiting, await self.bus.latest_rows(list(waiting)), self.embedder.name)

    async def _file_rows(self, job: ingest_msgs.IngestJob, files: list[tuple[VikingPath, Entry]],
                         total: int) -> FileRows:
        """The job's files as row changes, embedded a batch at a time."""
        out: list[tuple[str, IndexChange]] = []
        skipped: list[ingest_msgs.Skipped] = []
        n_sections = embedded = 0
        t = self.ns.tree
        by_dir: dict[str, dict[str, sidecar.FileFacts]] = {}
        records: dict[str, document_records.DocRecord | None] = {}  # what each file had before
        for i in range(0, len(files), EMBED_BATCH):
            batch = files[i : i + EMBED_BATCH]
            plans: list[tuple[VikingPath, Entry, tuple[str, ...], file_rows.FilePlan]] = []
            batch_skipped: list[ingest_msgs.Skipped] = []
            for n, (vp, st) in enumerate(batch):
                await self._converting(job, i + n, total)
                d = parent(vp.key)
                try:
                    if st.size > self.max_file_bytes:  # written before the limit was lowered, or grown by appends
                        raise Unconvertible("too_large", f"{st.size} bytes; the limit is {self.max_file_bytes} "
                                                         "(SKALD_MAX_FILE_MB)")
                    # The file, its directory's sidecar (once a directory) and its document record
                    # side by side: on the JetStream tree each is a round trip.
                    data, dir_facts, old_rec = await asyncio.gather(
                        asyncio.to_thread(treeops.read_bytes, t, vp.key),  # NOT_FOUND: gone since
                        asyncio.sleep(0) if d in by_dir else asyncio.to_thread(sidecar.load, t, d),
                        asyncio.to_thread(document_records.load, t, vp.key))
                    doc = await asyncio.to_thread(formats.convert, vp.name, data)
                except StoreUnavailable:
                    raise  # the store did not answer: the job runs again, not done without this file
                except (NotFound, InvalidArgument, OSError):
                    continue  # gone or unreadable since the walk: nothing to index
                except Unconvertible as e:
                    batch_skipped.append(ingest_msgs.Skipped(uri=vp.uri, reason=e.reason, detail=e.detail))
                    out += self._deletes(vp, ((vp.uri, 2),))
                    continue
                facts = by_dir.setdefault(d, dir_facts or {})
                sha = rows_mod.sha256(data)
                old = facts.get(vp.name)
                if old and old.sha == sha and old.summarizer == self.summarizer.name:
                    summary = old.abstract
                else:
                    summary = await self.summarizer.file_abstract(vp.name, doc.text)
                tags = rows_mod.check_tags((*(old.tags if old else ()), *job.tags)) if (old or job.tags) else ()
                facts[vp.name] = sidecar.FileFacts(mtime_ns=treeops.mtime_ns(st), size=st.size, sha=sha,
                                                   abstract=summary, tags=tags, summarizer=self.summarizer.name)
                records[vp.key] = old_rec
                plans.append((vp, st, tags, file_rows.plan(vp.segments, doc, sha, summary, self.embedder.name,
                                                           old_rec)))
            await self._reuse(plans)
            note = self._progress(job, i, total, len(batch))
            embedded += await file_rows.embed_missing([r for *_, p in plans for r in p.rows],
                                                      self.embedder.embed_passages, note)
            for vp, st, tags, p in plans:
                out += self._deletes(vp, p.deletes)
                when = rows_mod.row_time(st.mtime, job.at)  # a replayed write's file is new, its time is not
                langs = languages_of_parts([r.text or r.abstract for r in p.rows])
                for r, lang in zip(p.rows, langs, strict=True):
                    row = rows_mod.make_row(vp.account, vp.segments, r.level, r.abstract, tags=tags,
                                            created_at=when, updated_at=when,
                                            content_hash=r.content_hash, model=self.embedder.name,
                                            vector=r.vector,  # type: ignore[arg-type]
                                            owner=rows_mod.owner_of(vp.segments), text=r.text, uri=r.uri,
                                            parent_uri=r.parent_uri, kind=r.kind, title=r.title,
                                            start_line=r.start_line, end_line=r.end_line, page=r.page,
                                            lang=lang)
                    out.append((row_subject_token(vp.account, r.uri, r.level), IndexChange(upsert=row)))
                n_sections += p.sections
                if p.record is not None:
                    await asyncio.to_thread(document_records.save, t, vp.key, p.record)
                elif records[vp.key] is not None:  # it had one: it no longer needs it
                    await asyncio.to_thread(document_records.remove, t, vp.key)
            skipped += batch_skipped
            await self.bus.notify(subjects.ingest_progress(job.account, job.job_id), ingest_msgs.IngestProgress(
                job_id=job.job_id, done=min(i + EMBED_BATCH, len(files)), total=total, stage="files",
                skipped=batch_skipped))
        for d, facts in by_dir.items():
            await asyncio.to_thread(sidecar.save, t, d, facts)
        return FileRows(out, n_sections, skipped, embedded)

    def _progress(self, job: ingest_msgs.IngestJob, done: int, total: int,
                  batch: int) -> Callable[[int, int], Awaitable[None]]:
        """The note a batch's embedding sends after each chunk of passages."""
        async def note(passages_done: int, passages_total: int) -> None:
            await self.bus.notify(subjects.ingest_progress(job.account, job.job_id), ingest_msgs.IngestProgress(
                job_id=job.job_id, done=done, total=total, stage="embedding", batch=batch,
                passages_done=passages_done, passages_total=passages_total))
        return note

    async def _converting(self, job: ingest_msgs.IngestJob, done: int, total: int) -> None:
        """A note as each file is read and converted, a few a second at most (a big PDF takes a while)."""
        now = time.monotonic()
        if done and now - self._noted < PROGRESS_EVERY_S:
            return
        self._noted = now
        await self.bus.notify(subjects.ingest_progress(job.account, job.job_id), ingest_msgs.IngestProgress(
            job_id=job.job_id, done=done, total=total, stage="converting"))

    @staticmethod
    def _deletes(vp: VikingPath, keys: Iterable[tuple[str, int]]) -> list[tuple[str, IndexChange]]:
        return [(row_subject_token(vp.account, uri, level),
                 IndexChange(delete=IndexDelete(account=vp.account, uri=uri, level=level))) for uri, level in keys]

    async def _refresh_later(self) -> None:
        """The wide directories jobs left waiting, each once its interval is over, with the
        directories above them, bottom-up, in one publish."""
        while True:
            ready, wait = self.wide.due(time.monotonic())
            await self._refresh(ready)
            if wait is None:
                return
            await asyncio.sleep(wait)

    async def _refresh(self, ready: list[str]) -> None:
        dirs = {u: self._waiting.pop(u) for u in ready if u in self._waiting}
        if not dirs:
            return
        for vp in list(dirs.values()):
            self._upward(Identity(account=vp.account, is_root=True), vp.segments[:-1], dirs)
        try:
            changes = await self._dir_rows(_bottom_up(dirs))
            if changes:
                await self.bus.publish_index(changes)
        except Exception:  # noqa: BLE001 - the next job that touches them refreshes them
            log.exception("refreshing wide directories %s failed", sorted(dirs))

    def _upward(self, ident: Identity, segs: tuple[str, ...], into: dict[str, VikingPath]) -> None:
        """The directory `segs` and each one above it, below the space root, added to `into`."""
        while len(segs) >= 2:
            p = self.ns.resolve(join_uri(segs), ident)
            into.setdefault(p.uri, p)
            segs = segs[:-1]

    async def close(self) -> None:
        """Refresh what waits now, so a stopping worker leaves no summary behind its entries."""
        if self._later is not None and not self._later.done():
            self._later.cancel()
            await asyncio.gather(self._later, return_exceptions=True)
        await self._refresh(self.wide.take_all())


def _bottom_up(dirs: dict[str, VikingPath]) -> list[VikingPath]:
    """Deepest first: a directory's summary is written after its children's."""
    return sorted(dirs.values(), key=lambda v: len(v.segments), reverse=True)
