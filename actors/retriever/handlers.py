"""The retriever actor: a replica of the vector index (built from the index log and followed),
find, grep, glob, and the read side of the tree."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from skald.actors.kit.decl import handles
from skald.actors.kit.ports import LLM, Bus, Embedder, Reranker
from skald.actors.kit.request import Ctx
from skald.actors.retriever import candidates as C
from skald.actors.retriever import grep_glob as W
from skald.actors.retriever import params as P
from skald.actors.retriever import results as Rs
from skald.actors.retriever.list_search import SearchSettings, run_search
from skald.actors.retriever.stats import StatsCollector
from skald.actors.text import extract
from skald.actors.text.tags import check_tags
from skald.messages import context as X
from skald.messages import fs as F
from skald.messages import search as Q
from skald.messages import subjects as S
from skald.messages.errors import InvalidArgument, NotFound
from skald.messages.index import IndexChange, IndexRow
from skald.messages.system import Empty, StatsResult
from skald.store import sidecar
from skald.store import tree as T
from skald.store.index import Query, VectorIndex
from skald.store.uri import (
    PEER_SEARCHABLE,
    Identity,
    Namespace,
    VikingPath,
    canonical,
    context_type_of,
    default_roots,
    join_uri,
)

log = logging.getLogger("skald.retriever")
APPLY_CHUNK = 256


class Retriever:
    def __init__(self, ns: Namespace, embedder: Embedder, bus: Bus, state_dir: Path, llm: LLM,
                 reranker: Reranker | None = None, settings: SearchSettings | None = None,
                 clock: Callable[[], float] = time.time, snapshot_interval_s: float = 30.0) -> None:
        self.ns = ns
        self.embedder = embedder
        self.llm = llm
        self.reranker = reranker
        self.settings = settings or SearchSettings()
        self.bus = bus
        self._hash, self._hash_at = "", -1
        self._builder: asyncio.Task[None] | None = None
        self.state_dir = Path(state_dir)
        self.clock = clock
        self.snapshot_interval_s = snapshot_interval_s
        self.index = VectorIndex(embedder.dim, embedder.name)
        self.stats = StatsCollector()
        self._applied = asyncio.Condition()
        self._tasks: list[asyncio.Task[Any]] = []
        self._lock_fd: int | None = None
        self.replica_dir: Path | None = None
        self._dirty = False
        self.head_seq = 0

    # ----- replica lifecycle ------------------------------------------------------------

    def _claim_replica_dir(self) -> Path:
        """Each replica on a host keeps its own snapshot: take the first slot nobody holds."""
        base = self.state_dir / "index"
        base.mkdir(parents=True, exist_ok=True)
        for i in range(64):
            lock = base / f"replica-{i}.lock"
            fd = open(lock, "a+")  # noqa: SIM115 - held for the life of the process
            try:
                fcntl.flock(fd.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                fd.close()
                continue
            self._lock_fd = fd  # type: ignore[assignment]
            return base / f"replica-{i}"
        raise RuntimeError("no free index replica slot")

    async def start(self) -> None:
        self.replica_dir = self._claim_replica_dir()
        snap = await asyncio.to_thread(VectorIndex.load, self.replica_dir, self.embedder.dim, self.embedder.name)
        last = await self.bus.index_last_seq()
        if snap is not None and snap.applied_seq <= last:
            self.index = snap
        elif snap is not None:
            log.warning("snapshot is ahead of the index stream (stream reset?): rebuilding")
        self.head_seq = last
        self._tasks.append(asyncio.create_task(self._follow(), name="index-follow"))
        self._tasks.append(asyncio.create_task(self._snapshots(), name="index-snapshots"))

    async def stop(self) -> None:
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._dirty and self.replica_dir is not None:
            await asyncio.to_thread(self.index.save, self.replica_dir)

    async def _follow(self) -> None:
        async for batch in self.bus.follow_index(self.index.applied_seq + 1):
            bulk = len(batch) >= APPLY_CHUNK  # a long tail: catching up; the graph follows behind
            for i in range(0, len(batch), APPLY_CHUNK):
                chunk = batch[i : i + APPLY_CHUNK]
                if bulk:
                    # Catching up is pure CPU: applied on the loop in short slices (no GIL
                    # ping-pong with a thread), yielding between them so requests still run.
                    self.apply(chunk, bulk)
                    await asyncio.sleep(0)
                else:
                    await asyncio.to_thread(self.apply, chunk, bulk)
            if batch:
                self.head_seq = max(self.head_seq, batch[-1][0])
            async with self._applied:
                self._applied.notify_all()
            if self.index.pending_graph and (self._builder is None or self._builder.done()):
                self._builder = asyncio.create_task(self._build_graph(), name="index-graph")

    async def _build_graph(self) -> None:
        """Deferred rows join the HNSW graph in chunks; searches stay exact until they have."""
        while await asyncio.to_thread(self.index.build_graph, 2048):
            await asyncio.sleep(0)

    def apply(self, batch: list[tuple[int, IndexChange]], bulk: bool = False) -> None:
        """Apply changes in stream order; rows of another model or dimension are skipped."""
        ups: list[tuple[IndexRow, np.ndarray]] = []

        def flush() -> None:
            if ups:
                self.index.upsert_many(ups, defer_graph=bulk)
                ups.clear()

        for seq, ch in batch:
            if ch.upsert is not None:
                row = ch.upsert
                vec = np.frombuffer(row.vector, dtype="<f4")
                if row.model == self.embedder.name and vec.shape == (self.index.dim,):
                    ups.append((row, vec.astype(np.float32)))
            elif ch.delete is not None:
                flush()
                d = ch.delete
                self.index.delete(d.account, d.uri, d.level)
            self.index.applied_seq = max(self.index.applied_seq, seq)
        flush()
        self._dirty = True

    async def _snapshots(self) -> None:
        while True:
            await asyncio.sleep(self.snapshot_interval_s)
            if self._dirty and self.replica_dir is not None:
                self._dirty = False
                await asyncio.to_thread(self.index.save, self.replica_dir)

    async def _catch_up(self, ctx: Ctx) -> bool:
        """Read-your-writes: wait (within the deadline) until the caller's last write is applied."""
        if ctx.index_seq <= self.index.applied_seq:
            return True
        async with self._applied:
            try:
                await asyncio.wait_for(self._applied.wait_for(lambda: self.index.applied_seq >= ctx.index_seq),
                                       max(0.0, ctx.remaining() - 0.2))
            except TimeoutError:
                return False
        return True

    def health(self) -> dict[str, Any]:
        applied = self.index.applied_seq
        if self._hash_at != applied:  # replicas holding the same rows report the same hash
            self._hash, self._hash_at = self.index.content_hash(), applied
        return {"status": "ok", "index": self.index.stats(), "replica": str(self.replica_dir or ""),
                "lag": max(0, self.head_seq - applied), "applied_seq": applied, "content_hash": self._hash,
                "embedder": self.embedder.name}

    # ----- find -------------------------------------------------------------------------

    def _targets(self, target: str | list[str], ctypes: frozenset[str] | None, ident: Identity) -> list[str]:
        uris = [target] if isinstance(target, str) else list(target)
        uris = [u for u in uris if u]
        if not uris:
            roots: list[str] = []
            for ct in sorted(ctypes) if ctypes else [None]:
                roots += default_roots(ident, ct)
            return list(dict.fromkeys(roots))
        out = []
        for u in uris:
            segs = self.ns.resolve(u, ident).segments  # canonical, and no symlink on the way
            if len(segs) > 4 and segs[0] == "user" and segs[2] == "peers" and segs[4] not in PEER_SEARCHABLE:
                raise InvalidArgument("only memories and resources can be searched under a peer", {"uri": u})
            if not segs:
                out += default_roots(ident)
            elif segs == ("user",):
                out.append(ident.user_root)
            else:
                out.append(join_uri(segs))
        return list(dict.fromkeys(out))

    @handles(S.SEARCH_FIND, Q.FindRequest)
    async def find(self, req: Q.FindRequest, ctx: Ctx) -> Q.FindResult:
        t0 = time.perf_counter()
        c = P.common(req, self.clock(), check_tags)
        now, levels, ctypes, since, until, decay, pred, limit = (c.now, c.levels, c.context_types, c.since, c.until,
                                                                 c.decay, c.predicate, c.limit)
        prefixes = self._targets(req.target_uri, ctypes, ctx.identity)
        q = Query(account=ctx.identity.account, prefixes=prefixes, levels=levels, context_types=ctypes,
                  since=since, until=until, time_field=req.time_field, predicate=pred)
        fresh = await self._catch_up(ctx)
        prov: dict[str, Any] = {"mode": "quick", "targets": prefixes, "fresh": fresh}
        if not req.query.strip():
            rows = self.index.scan(q, limit)
            result = Rs.group((Rs.to_matched(r, 0.0) for r in rows), limit)
            prov["engine"] = "scan"
        else:
            te = time.perf_counter()
            vec = await self.embedder.embed_query(req.query)
            prov["embed_ms"] = round((time.perf_counter() - te) * 1000, 3)
            ts = time.perf_counter()
            k = limit * (P.EVENT_DECAY_OVERFETCH if decay is not None else 1)
            hits, trace = self.index.search(vec, q, k)
            prov.update(engine=trace.engine, scope_rows=trace.scope_rows, examined=trace.examined,
                        search_ms=round((time.perf_counter() - ts) * 1000, 3))
            matched = []
            for h in hits:
                score = h.score
                m = Rs.to_matched(h.row, score)
                if decay is not None and P.is_event(h.row):
                    ts_ = P.time_score(h.row.updated_at, now, decay)
                    m.origin_score, m.time_score = m.score, round(ts_, 6)
                    m.score = round(score * ts_, 6)
                if Rs.passes(m.score, req.score_threshold):
                    matched.append(m)
            result = Rs.group(matched, limit)
        if req.read_content:
            await self._inline_content(result, ctx.identity)
        if req.include_provenance:
            result.provenance = prov
        latency = (time.perf_counter() - t0) * 1000
        scores = [m.score for m in (*result.memories, *result.resources, *result.skills)]
        self.stats.record(",".join(sorted(ctypes)) if ctypes else "all", scores, latency)
        if req.telemetry:
            result.telemetry = {"latency_ms": round(latency, 3), **{k: v for k, v in prov.items() if k.endswith("_ms")}}
        return result

    @handles(S.SEARCH_SEARCH, Q.SearchRequest, timeout_s=120.0)
    async def search(self, req: Q.SearchRequest, ctx: Ctx) -> Any:
        if req.mode == "list":
            given = Q.context_fields_given(req)
            if given:
                raise InvalidArgument(f"{', '.join(given)} only apply to mode=\"context\"",
                                      {"field": given[0], "fields": given})
            return await run_search(self, req, ctx)
        # context / bootstrap: the assembler serves it (one subject, two actors; seed 000 §3.1).
        return await self.bus.call(S.ASSEMBLE_CONTEXT, req, ctx.identity, ctx.remaining(),
                                   index_seq=ctx.index_seq, internal=True)

    @handles(S.SEARCH_CANDIDATES, X.CandidatesRequest, internal=True)
    async def candidates(self, req: X.CandidatesRequest, ctx: Ctx) -> X.CandidatesResult:
        """Every bucket for every query in one trip; request errors raise, retrieval errors are
        reported per bucket (seed 003 bug 12)."""
        probe = Q.FindRequest(query=req.queries[0], context_type=req.context_type, tags=req.tags,
                              filter=req.filter, since=req.since, until=req.until, time_field=req.time_field,
                              events_time_decay_protection=req.events_time_decay_protection)
        c = P.common(probe, self.clock(), check_tags)
        unknown = [b.name for b in req.buckets if b.name not in C.BUCKETS]
        if unknown:
            raise InvalidArgument(f"unknown bucket {unknown[0]!r}", {"field": "buckets", "known": list(C.BUCKETS)})
        await self._catch_up(ctx)
        te = time.perf_counter()
        vecs = await asyncio.gather(*(self.embedder.embed_query(q) for q in req.queries))
        embed_ms = (time.perf_counter() - te) * 1000
        excluded = C.excluder(req.exclude_uris, req.exclude_uris)
        cooled = C.excluder(req.cooled_uris, req.cooled_prefixes)
        account = ctx.identity.account

        def package_abstract(pkg: tuple[str, ...]) -> str:
            row = self.index.get(account, join_uri(pkg), 0)
            return row.abstract if row else ""

        out = X.CandidatesResult(buckets={})
        n_excluded: set[str] = set()
        n_cooled: set[str] = set()
        for b in req.buckets:
            try:
                prefixes, ctypes, category = C.bucket_scope(b.name, ctx.identity, req.peer_scope)
                if c.context_types is not None:
                    ctypes = ctypes & c.context_types
                if not ctypes:
                    out.buckets[b.name] = []
                    continue
                base = c.predicate
                pred = base if category is None else (
                    (lambda r, cat=category: r.category == cat) if base is None else
                    (lambda r, cat=category, p=base: r.category == cat and p(r)))
                q = Query(account=account, prefixes=prefixes, context_types=ctypes, since=c.since, until=c.until,
                          time_field=req.time_field, predicate=pred)
                # Room for what shaping removes before the cut: collapsed skill files, directory
                # levels, scope directories, exclusions and cooled URIs.
                k = (b.limit + max(10, b.limit // 2) + len(req.exclude_uris) + len(req.cooled_uris)) * (
                    P.EVENT_DECAY_OVERFETCH if c.decay is not None else 1)
                scored: list[C.Scored] = []
                for vec in vecs:
                    hits, _ = self.index.search(vec, q, k)
                    for h in hits:
                        score = h.score
                        if c.decay is not None and P.is_event(h.row):
                            score *= P.time_score(h.row.updated_at, c.now, c.decay)
                        scored.append(C.Scored(h.row, score))
                shaped = C.shape(scored, ctx.identity, excluded, cooled, package_abstract, req.other_peer_penalty)
                n_excluded |= shaped.excluded
                n_cooled |= shaped.cooled
                out.buckets[b.name] = [m for m in shaped.candidates
                                       if Rs.passes(m.score, req.score_threshold, req.score_gte)][: b.limit]
            except InvalidArgument:
                raise
            except Exception as e:  # noqa: BLE001 - one bucket's failure is reported, the others answer
                log.exception("candidates: bucket %s failed", b.name)
                out.buckets[b.name] = []
                out.errors[b.name] = f"{type(e).__name__}: {e}"[:300]
        out.excluded, out.cooled, out.embed_ms = len(n_excluded), len(n_cooled), round(embed_ms, 3)
        return out

    def rerank_fn(self, timeout_s: float):  # type: ignore[no-untyped-def]
        """The reranker as the descent wants it: scores, or None on any failure (counted upstream)."""
        if self.reranker is None:
            return None
        reranker = self.reranker

        async def call(query: str, docs: list[str]) -> list[float] | None:
            try:
                return await asyncio.wait_for(reranker.rerank(query, docs), timeout_s)
            except Exception as e:  # noqa: BLE001 - any failure falls back to vector scores
                log.warning("rerank failed, falling back to vector scores: %s", e)
                return None

        return call

    async def _inline_content(self, result: Q.FindResult, ident: Identity) -> None:
        for m in (*result.memories, *result.resources, *result.skills):
            with contextlib.suppress(Exception):
                vp = self.ns.resolve(m.uri, ident)
                m.content = await T.read_text(vp.path)

    # ----- grep / glob ------------------------------------------------------------------

    @handles(S.SEARCH_GREP, Q.GrepRequest, timeout_s=60.0)
    async def grep(self, req: Q.GrepRequest, ctx: Ctx) -> Q.GrepResult:
        vp = self._existing(req.uri, ctx.identity)
        try:
            regex = re.compile(req.pattern, re.IGNORECASE if req.case_insensitive else 0)
        except re.error as e:
            raise InvalidArgument(f"invalid pattern: {e}", {"field": "pattern"}) from e
        exclude = join_uri(canonical(req.exclude_uri, ctx.identity)) if req.exclude_uri else None
        tags = check_tags(req.tags)
        starts = W.visible_starts(self.ns, vp, ctx.identity.user, ctx.identity.is_root)
        matches, cut = await asyncio.to_thread(
            W.grep, self.ns, starts, regex, limit=req.node_limit, level_limit=req.level_limit, exclude=exclude,
            want_tags=frozenset(tags) if tags else None, with_tags=bool(tags) or req.include_tags,
            before=req.before_context, after=req.after_context)
        return Q.GrepResult(matches=matches, count=len(matches), truncated=cut)

    @handles(S.SEARCH_GLOB, Q.GlobRequest, timeout_s=60.0)
    async def glob(self, req: Q.GlobRequest, ctx: Ctx) -> Q.GlobResult:
        vp = self._existing(req.uri, ctx.identity)
        tags = check_tags(req.tags)
        pattern = W.glob_regex(req.pattern)
        starts = W.visible_starts(self.ns, vp, ctx.identity.user, ctx.identity.is_root)
        found, cut = await asyncio.to_thread(W.glob, self.ns, starts, vp, pattern, req.node_limit,
                                             frozenset(tags) if tags else None)
        found.sort(key=lambda f: f[0])
        if not (req.extra_fields or tags or req.include_tags):
            return Q.GlobResult(matches=[u for u, _, _, _ in found], count=len(found), truncated=cut)
        allowed = {"is_dir", "size", "updated_at", "created_at", "abstract", "name", "tags", "context_type"}
        extra = list(req.extra_fields or [])
        if bad := [f for f in extra if f not in allowed]:
            raise InvalidArgument("unknown extra_fields", {"unknown": bad, "allowed": sorted(allowed)})
        out = []
        for uri, path, is_dir, ftags in found:
            item: dict[str, Any] = {"uri": uri}
            st = path.stat() if extra else None
            for f in extra:
                if f == "is_dir":
                    item[f] = is_dir
                elif f == "size":
                    item[f] = 0 if is_dir else st.st_size  # type: ignore[union-attr]
                elif f in ("updated_at", "created_at"):
                    item[f] = st.st_mtime if f == "updated_at" else min(st.st_ctime, st.st_mtime)  # type: ignore[union-attr]
                elif f == "name":
                    item[f] = path.name
                elif f == "abstract":
                    item[f] = self._abstract_of(path, is_dir)
                elif f == "context_type":
                    item[f] = context_type_of(tuple(uri[len("viking://"):].split("/")))
            if tags or req.include_tags or "tags" in extra:
                item["tags"] = list(ftags)
            out.append(item)
        return Q.GlobResult(matches=out, count=len(out), truncated=cut)

    # ----- tree reads -------------------------------------------------------------------

    def _existing(self, uri: str, ident: Identity) -> VikingPath:
        vp = self.ns.resolve(uri, ident)
        if not vp.path.exists():
            raise NotFound("no such file or directory", {"uri": vp.uri})
        return vp

    def _abstract_of(self, path: Path, is_dir: bool) -> str:
        if is_dir:
            return T.read_text_sync(path / T.ABSTRACT, "") or ""
        f = sidecar.load(path.parent).get(path.name)
        return f.abstract if f else ""

    @handles(S.FS_READ, F.ReadRequest)
    async def fs_read(self, req: F.ReadRequest, ctx: Ctx) -> F.ReadResult:
        vp = self._existing(req.uri, ctx.identity)
        if vp.path.is_dir():
            raise InvalidArgument("is a directory; use fs.ls or fs.overview", {"uri": vp.uri})
        text = await T.read_text(vp.path)
        end = len(text) if req.limit < 0 else req.offset + req.limit
        part = text[req.offset : end]
        return F.ReadResult(uri=vp.uri, content=part, size=len(text), truncated=end < len(text))

    def _entry(self, vp: VikingPath, e: Any, facts: dict[str, sidecar.FileFacts]) -> F.Entry:
        st = e.stat(follow_symlinks=False)
        is_dir = e.is_dir(follow_symlinks=False)
        uri = f"{vp.uri.rstrip('/')}/{e.name}" if vp.segments else f"viking://{e.name}"
        abstract = (T.read_text_sync(Path(e.path) / T.ABSTRACT, None) if is_dir
                    else (facts[e.name].abstract if e.name in facts else None))
        return F.Entry(uri=uri, name=e.name, is_dir=is_dir, size=0 if is_dir else st.st_size,
                       created_at=min(st.st_ctime, st.st_mtime), updated_at=st.st_mtime, abstract=abstract)

    @handles(S.FS_LS, F.LsRequest)
    async def fs_ls(self, req: F.LsRequest, ctx: Ctx) -> F.LsResult:
        vp = self._existing(req.uri, ctx.identity)
        if not vp.path.is_dir():
            raise InvalidArgument("not a directory", {"uri": vp.uri})

        def run() -> tuple[list[F.Entry], bool]:
            out: list[F.Entry] = []
            stack = [vp]
            while stack:
                d = stack.pop(0)
                facts = sidecar.load(d.path)
                if d.segments in ((), ("user",)) and not ctx.identity.is_root:
                    entries = [self.ns.resolve(s.uri, ctx.identity)
                               for s in W.visible_starts(self.ns, d, ctx.identity.user, False)]
                    items = [(s, s.path) for s in entries]
                    for s, p in items:
                        try:
                            st = p.stat()
                        except FileNotFoundError:
                            continue  # removed while we walked
                        out.append(F.Entry(uri=s.uri, name=s.name, is_dir=True, size=0,
                                           created_at=min(st.st_ctime, st.st_mtime), updated_at=st.st_mtime,
                                           abstract=T.read_text_sync(p / T.ABSTRACT, None)))
                        if req.recursive:
                            stack.append(s)
                else:
                    for e in T.listdir_sorted(d.path, req.show_hidden, missing_ok=d is not vp):
                        try:
                            out.append(self._entry(d, e, facts))
                        except FileNotFoundError:
                            continue  # removed while we walked
                        if req.recursive and e.is_dir(follow_symlinks=False):
                            stack.append(self.ns.child(d, e.name))
                        if len(out) >= req.node_limit:
                            return out, True
            return out, False

        entries, cut = await asyncio.to_thread(run)
        return F.LsResult(uri=vp.uri, entries=entries, truncated=cut)

    @handles(S.FS_TREE, F.TreeRequest)
    async def fs_tree(self, req: F.TreeRequest, ctx: Ctx) -> F.TreeResult:
        vp = self._existing(req.uri, ctx.identity)
        count = 0
        cut = False

        def build(node: VikingPath, depth: int) -> F.TreeNode:
            nonlocal count, cut
            is_dir = node.path.is_dir()
            tn = F.TreeNode(uri=node.uri, name=node.name or "viking://", is_dir=is_dir)
            if not is_dir or depth >= req.level_limit:
                return tn
            if node.segments in ((), ("user",)) and not ctx.identity.is_root:
                kids = W.visible_starts(self.ns, node, ctx.identity.user, False)
            else:
                kids = [self.ns.child(node, e.name)
                        for e in T.listdir_sorted(node.path, req.show_hidden, missing_ok=depth > 0)]
            tn.children = []
            for k in kids:
                if count >= req.node_limit:
                    cut = True
                    break
                count += 1
                tn.children.append(build(k, depth + 1))
            return tn

        tree = await asyncio.to_thread(build, vp, 0)
        return F.TreeResult(uri=vp.uri, tree=tree, count=count, truncated=cut)

    @handles(S.FS_STAT, F.StatRequest)
    async def fs_stat(self, req: F.StatRequest, ctx: Ctx) -> F.StatResult:
        vp = self._existing(req.uri, ctx.identity)
        st = vp.path.stat()
        is_dir = vp.path.is_dir()
        return F.StatResult(uri=vp.uri, is_dir=is_dir, size=0 if is_dir else st.st_size,
                            created_at=min(st.st_ctime, st.st_mtime), updated_at=st.st_mtime)

    @handles(S.FS_ABSTRACT, F.AbstractRequest)
    async def fs_abstract(self, req: F.AbstractRequest, ctx: Ctx) -> F.TextResult:
        vp = self._existing(req.uri, ctx.identity)
        text = self._abstract_of(vp.path, vp.path.is_dir())
        if not text:
            row = self.index.get(vp.account, vp.uri, 0 if vp.path.is_dir() else 2)
            text = row.abstract if row else ""
        if not text:
            raise NotFound("no abstract yet (not indexed)", {"uri": vp.uri})
        return F.TextResult(uri=vp.uri, content=text)

    @handles(S.FS_OVERVIEW, F.AbstractRequest)
    async def fs_overview(self, req: F.AbstractRequest, ctx: Ctx) -> F.TextResult:
        vp = self._existing(req.uri, ctx.identity)
        if vp.path.is_dir():
            text = T.read_text_sync(vp.path / T.OVERVIEW, "") or ""
            if not text:
                raise NotFound("no overview yet (not indexed)", {"uri": vp.uri})
            return F.TextResult(uri=vp.uri, content=text)
        return F.TextResult(uri=vp.uri, content=extract.text_overview(vp.name, await T.read_text(vp.path)))

    @handles(S.SYSTEM_STATS, Empty)
    async def system_stats(self, req: Empty, ctx: Ctx) -> StatsResult:
        queues = await self.bus.info()
        return StatsResult(retrieval=self.stats.snapshot(), index=self.health(), queues=queues)
