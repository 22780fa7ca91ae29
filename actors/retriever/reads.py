"""The read side of the tree: fs reads, grep and glob. A mixin of the retriever actor: these
handlers need the namespace and (for abstracts not yet on disk) the index replica, nothing else."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import re
from typing import Any

from skald.actors.kit.decl import handles
from skald.actors.kit.request import Ctx
from skald.actors.retriever import grep_glob
from skald.actors.retriever.replica import IndexReplica
from skald.actors.retriever.shards import Scatter
from skald.actors.text import extract, formats
from skald.actors.text.tags import check_tags
from skald.actors.text.textfile import Unconvertible
from skald.messages import catalog
from skald.messages import fs as fs_msgs
from skald.messages import search as search_msgs
from skald.messages.catalog import Op
from skald.messages.errors import InvalidArgument, NotFound, SkaldError
from skald.store import document_records, sidecar, tree, treeops
from skald.store.index.shards import shard_of
from skald.store.treeport import Entry, Tree, parent
from skald.store.uri import Identity, Namespace, VikingPath, canonical, context_type_of, join_uri


def document(t: Tree, key: str) -> tuple[str, str, document_records.DocRecord | None]:
    """(text, converted-from format, record) of a file: a document's converted text (from its
    record when the bytes have not changed since it was indexed), or the file's own text. The
    file and its record are read together."""
    data, (raw,) = treeops.read_bytes_and(t, key, [document_records.record_key(key)])
    rec = document_records.decoded(raw)
    if rec is not None and rec.text and rec.sha == hashlib.sha256(data).hexdigest():
        return rec.text, rec.format, rec
    try:
        doc = formats.convert(key.rpartition("/")[2], data)
    except Unconvertible as e:
        raise InvalidArgument(f"cannot read as text ({e.reason}); pass raw to get the bytes",
                              {"reason": e.reason, "detail": e.detail}) from e
    return doc.text, doc.format if doc.derived else "", rec


def section_of(rec: document_records.DocRecord | None, anchor: str) -> document_records.SectionRecord | None:
    return next((s for s in rec.sections if s.anchor == anchor), None) if rec is not None else None


def section_in(text: str, rec: document_records.DocRecord | None, anchor: str) -> str:
    """The lines of a document's `text` its section `anchor` holds (NOT_FOUND: no such section)."""
    sec = section_of(rec, anchor)
    if sec is None:
        raise NotFound("no such section in the document", {"anchor": anchor})
    return "\n".join(text.splitlines()[sec.start - 1 : sec.end])


async def inline_content(ns: Namespace, result: search_msgs.FindResult, ident: Identity) -> None:
    """`read_content`: each hit's full text beside it (a section's own text). A hit that cannot be
    read now keeps none: removed or moved meanwhile, a directory, or no longer convertible (a
    typed error or the file system's); anything else is a bug and propagates."""
    def fill() -> None:
        docs: dict[str, tuple[str, str, document_records.DocRecord | None] | None] = {}  # each file read once
        for m in (*result.memories, *result.resources, *result.skills):
            file_uri, _, anchor = m.uri.partition("#")
            with contextlib.suppress(SkaldError, OSError):
                key = ns.resolve(file_uri, ident).key
                if key not in docs:
                    docs[key] = None  # unreadable, unless read below
                    docs[key] = document(ns.tree, key)
                got = docs[key]
                if got is not None:
                    m.content = section_in(got[0], got[2], anchor) if anchor else got[0]

    await asyncio.to_thread(fill)


class TreeReads:
    """The retriever's reads of the tree: fs.read, ls, tree, stat, abstract and overview, grep and glob."""

    ns: Namespace
    replica: IndexReplica
    scatter: Scatter

    async def _from_owner(self, op: Op, req: fs_msgs.AbstractRequest, ctx: Ctx,
                          vp: VikingPath) -> fs_msgs.TextResult | None:
        """A node's index rows live on its shard: another shard's node is read there (None: here)."""
        sc = self.scatter
        if sc.shards <= 1 or ctx.forwarded or (k := shard_of(vp.account, vp.uri, sc.shards)) == sc.mine:
            return None
        got: fs_msgs.TextResult = await sc.bus.call_shard(k, op, req, ctx.identity, ctx.remaining(),
                                                          index_seq=ctx.index_seq, into=fs_msgs.TextResult)
        return got

    @handles(catalog.SEARCH_GREP, timeout_s=60.0)
    async def grep(self, req: search_msgs.GrepRequest, ctx: Ctx) -> search_msgs.GrepResult:
        """`search.grep`: Regular-expression search over file contents."""
        # Arguments first: a bad pattern is INVALID_ARGUMENT whether or not the root exists.
        try:
            regex = re.compile(req.pattern, re.IGNORECASE if req.case_insensitive else 0)
        except re.error as e:
            raise InvalidArgument(f"invalid pattern: {e}", {"field": "pattern"}) from e
        exclude = join_uri(canonical(req.exclude_uri, ctx.identity)) if req.exclude_uri else None
        tags = check_tags(req.tags)
        vp = await asyncio.to_thread(self._existing, req.uri, ctx.identity)
        starts = grep_glob.visible_starts(self.ns, vp, ctx.identity.user, ctx.identity.is_root)
        matches, cut = await asyncio.to_thread(
            grep_glob.grep, self.ns, starts, regex, limit=req.node_limit, level_limit=req.level_limit, exclude=exclude,
            want_tags=frozenset(tags) if tags else None, with_tags=bool(tags) or req.include_tags,
            before=req.before_context, after=req.after_context)
        return search_msgs.GrepResult(matches=matches, count=len(matches), truncated=cut)

    @handles(catalog.SEARCH_GLOB, timeout_s=60.0)
    async def glob(self, req: search_msgs.GlobRequest, ctx: Ctx) -> search_msgs.GlobResult:
        """`search.glob`: Match paths against a glob pattern."""
        tags = check_tags(req.tags)
        pattern = grep_glob.glob_regex(req.pattern)
        vp = await asyncio.to_thread(self._existing, req.uri, ctx.identity)
        starts = grep_glob.visible_starts(self.ns, vp, ctx.identity.user, ctx.identity.is_root)
        found, cut = await asyncio.to_thread(grep_glob.glob, self.ns, starts, vp, pattern, req.node_limit,
                                             frozenset(tags) if tags else None)
        found.sort(key=lambda f: f[0])
        if not (req.extra_fields or tags or req.include_tags):
            return search_msgs.GlobResult(matches=[u for u, _, _, _ in found], count=len(found), truncated=cut)
        allowed = {"is_dir", "size", "updated_at", "created_at", "abstract", "name", "tags", "context_type"}
        extra = list(req.extra_fields or [])
        if bad := [f for f in extra if f not in allowed]:
            raise InvalidArgument("unknown extra_fields", {"unknown": bad, "allowed": sorted(allowed)})
        out = []
        for uri, key, e, ftags in found:
            item: dict[str, Any] = {"uri": uri}
            for f in extra:
                if f == "is_dir":
                    item[f] = e.is_dir
                elif f == "size":
                    item[f] = e.size
                elif f in ("updated_at", "created_at"):
                    item[f] = e.mtime
                elif f == "name":
                    item[f] = e.name
                elif f == "abstract":
                    item[f] = self._abstract_of(key, e.is_dir)
                elif f == "context_type":
                    item[f] = context_type_of(tuple(uri[len("viking://"):].split("/")))
            if tags or req.include_tags or "tags" in extra:
                item["tags"] = list(ftags)
            out.append(item)
        return search_msgs.GlobResult(matches=out, count=len(out), truncated=cut)

    def _existing(self, uri: str, ident: Identity) -> VikingPath:
        """`uri` resolved, and there (or a scope's own directory, made on first use); it reads the
        tree, so handlers call it off the event loop."""
        return self._existing_entry(uri, ident)[0]

    def _existing_entry(self, uri: str, ident: Identity) -> tuple[VikingPath, Entry]:
        """`_existing`, with what the tree holds there: a handler that needs the node's kind or
        size asks the store once, not again (a round trip each on the JetStream tree)."""
        vp = self.ns.resolve(uri, ident)
        tree_ = self.ns.tree
        if not vp.segments:
            # The top of the tree always lists the caller's roots, even before anything is written.
            for root in ("viking://resources", "viking://agent", ident.user_root):
                tree_.mkdir(self.ns.resolve(root, ident).key)
        key = vp.key
        st = tree_.stat(key)
        if st is None:
            if vp.uri not in self._containers(ident):
                raise NotFound("no such file or directory", {"uri": vp.uri})
            # So are the scopes' own directories: `ls viking://resources` on a new deployment is an
            # empty listing (as in OpenViking), not a missing directory.
            tree_.mkdir(key)
            st = tree_.stat(key)
            if st is None:  # removed as soon as it was made
                raise NotFound("no such file or directory", {"uri": vp.uri})
        return vp, st

    @staticmethod
    def _containers(ident: Identity) -> frozenset[str]:
        user = ident.user_root
        return frozenset({"viking://resources", "viking://agent", "viking://agent/skills",
                          user, f"{user}/memories", f"{user}/resources", f"{user}/skills", f"{user}/sessions"})

    def _abstract_of(self, key: str, is_dir: bool) -> str:
        t = self.ns.tree
        if is_dir:
            return treeops.read_text(t, f"{key}/{tree.ABSTRACT}", "") or ""
        f = sidecar.load(t, parent(key)).get(key.rpartition("/")[2])
        return f.abstract if f else ""

    @handles(catalog.FS_READ)
    async def fs_read(self, req: fs_msgs.ReadRequest, ctx: Ctx) -> fs_msgs.ReadResult:
        """`fs.read`: Read a file's content (optionally a line range)."""
        file_uri, _, anchor = req.uri.partition("#")
        vp, st = await asyncio.to_thread(self._existing_entry, file_uri, ctx.identity)
        t = self.ns.tree
        if st.is_dir:
            raise InvalidArgument("is a directory; list it or read its overview", {"uri": vp.uri})
        if req.raw:
            data = await asyncio.to_thread(treeops.read_bytes, t, vp.key)
            try:
                return fs_msgs.ReadResult(uri=vp.uri, content=data.decode("utf-8"), size=len(data))
            except UnicodeDecodeError:
                return fs_msgs.ReadResult(uri=vp.uri, content=base64.b64encode(data).decode(), size=len(data),
                                          encoding="base64")
        text, fmt, rec = await asyncio.to_thread(document, t, vp.key)
        lines = text.splitlines()
        first, last = 0, len(lines)
        uri = vp.uri
        if anchor:
            sec = section_of(rec, anchor)
            if sec is None:
                raise NotFound("no such section in the document", {"uri": req.uri})
            first, last, uri = sec.start - 1, min(sec.end, len(lines)), f"{vp.uri}#{anchor}"
        start = first + req.offset
        end = last if req.limit < 0 else min(last, start + req.limit)
        part = lines[start:end]
        whole = "\n".join(lines[first:last])
        content = "\n".join(part) + ("\n" if part and (end < len(lines) or text.endswith("\n")) else "")
        return fs_msgs.ReadResult(uri=uri, content=content, size=len(whole), truncated=end < last,
                                  lines=last - first, start_line=start + 1 if part else 0, format=fmt)

    def _entries(self, vp: VikingPath, found: list[Entry], facts: dict[str, sidecar.FileFacts]) -> list[fs_msgs.Entry]:
        """A listing's entries with their abstracts: a file's from its directory's sidecar `facts`,
        the subdirectories' `.abstract.md` read together (one exchange on the JetStream tree)."""
        dirs = [e.name for e in found if e.is_dir]
        read = dict(zip(dirs, self.ns.tree.read_many([f"{vp.key}/{n}/{tree.ABSTRACT}" for n in dirs]), strict=True))
        out = []
        for e in found:
            if e.is_dir:
                data = read[e.name]
                abstract = None if data is None else data.decode("utf-8", errors="replace")
            else:
                abstract = facts[e.name].abstract if e.name in facts else None
            out.append(self._entry(vp, e, abstract))
        return out

    @staticmethod
    def _entry(vp: VikingPath, e: Entry, abstract: str | None) -> fs_msgs.Entry:
        uri = f"{vp.uri.rstrip('/')}/{e.name}" if vp.segments else f"viking://{e.name}"
        return fs_msgs.Entry(uri=uri, name=e.name, is_dir=e.is_dir, size=e.size,
                             created_at=e.mtime, updated_at=e.mtime, abstract=abstract)

    @handles(catalog.FS_LS)
    async def fs_ls(self, req: fs_msgs.LsRequest, ctx: Ctx) -> fs_msgs.LsResult:
        """`fs.ls`: List a directory."""
        vp, st = await asyncio.to_thread(self._existing_entry, req.uri, ctx.identity)
        t = self.ns.tree
        if not st.is_dir:
            raise InvalidArgument("not a directory", {"uri": vp.uri})

        def run() -> tuple[list[fs_msgs.Entry], bool]:
            out: list[fs_msgs.Entry] = []
            stack = [vp]
            while stack:
                d = stack.pop(0)
                facts = sidecar.load(t, d.key)
                if d.segments in ((), ("user",)) and not ctx.identity.is_root:
                    for s in grep_glob.visible_starts(self.ns, d, ctx.identity.user, False):
                        st = t.stat(s.key)
                        if st is None:
                            continue  # removed while we walked
                        out.append(fs_msgs.Entry(uri=s.uri, name=s.name, is_dir=True, size=0,
                                                 created_at=st.mtime, updated_at=st.mtime,
                                                 abstract=treeops.read_text(t, f"{s.key}/{tree.ABSTRACT}", None)))
                        if req.recursive:
                            stack.append(s)
                else:
                    found = treeops.listdir(t, d.key, req.show_hidden, missing_ok=d is not vp)
                    shown = found[:req.node_limit - len(out)]
                    out += self._entries(d, shown, facts)
                    if req.recursive:
                        stack += [self.ns.child(d, e.name) for e in shown if e.is_dir]
                    if len(out) >= req.node_limit:
                        return out, True
            return out, False

        entries, cut = await asyncio.to_thread(run)
        return fs_msgs.LsResult(uri=vp.uri, entries=entries, truncated=cut)

    @handles(catalog.FS_TREE)
    async def fs_tree(self, req: fs_msgs.TreeRequest, ctx: Ctx) -> fs_msgs.TreeResult:
        """`fs.tree`: A directory tree."""
        vp, st = await asyncio.to_thread(self._existing_entry, req.uri, ctx.identity)
        count = 0
        cut = False

        def build(node: VikingPath, depth: int, is_dir: bool | None = None) -> fs_msgs.TreeNode:
            """`is_dir`: what the parent's listing said of the node (None: ask the tree)."""
            nonlocal count, cut
            if is_dir is None:
                is_dir = treeops.is_dir(self.ns.tree, node.key)
            tn = fs_msgs.TreeNode(uri=node.uri, name=node.name or "viking://", is_dir=is_dir)
            if not is_dir or depth >= req.level_limit:
                return tn
            kids: list[tuple[VikingPath, bool | None]]
            if node.segments in ((), ("user",)) and not ctx.identity.is_root:
                kids = [(k, None) for k in grep_glob.visible_starts(self.ns, node, ctx.identity.user, False)]
            else:  # names and kinds are all a tree shows: no entry's size or time is read
                kids = [(self.ns.child(node, e.name), e.is_dir) for e in treeops.listdir(
                    self.ns.tree, node.key, req.show_hidden, missing_ok=depth > 0, details=False)]
            tn.children = []
            for k, kid_is_dir in kids:
                if count >= req.node_limit:
                    cut = True
                    break
                count += 1
                tn.children.append(build(k, depth + 1, kid_is_dir))
            return tn

        built = await asyncio.to_thread(build, vp, 0, st.is_dir)
        return fs_msgs.TreeResult(uri=vp.uri, tree=built, count=count, truncated=cut)

    @handles(catalog.FS_STAT)
    async def fs_stat(self, req: fs_msgs.StatRequest, ctx: Ctx) -> fs_msgs.StatResult:
        """`fs.stat`: Size and times of a node."""
        vp, st = await asyncio.to_thread(self._existing_entry, req.uri, ctx.identity)
        return fs_msgs.StatResult(uri=vp.uri, is_dir=st.is_dir, size=st.size, created_at=st.mtime,
                                  updated_at=st.mtime)

    @handles(catalog.FS_ABSTRACT)
    async def fs_abstract(self, req: fs_msgs.AbstractRequest, ctx: Ctx) -> fs_msgs.TextResult:
        """`fs.abstract`: A node's L0 abstract."""
        vp, st = await asyncio.to_thread(self._existing_entry, req.uri, ctx.identity)
        text = await asyncio.to_thread(self._abstract_of, vp.key, st.is_dir)
        if not text and (there := await self._from_owner(catalog.FS_ABSTRACT, req, ctx, vp)) is not None:
            return there
        if not text:
            row = self.replica.index.get(vp.account, vp.uri, 0 if st.is_dir else 2)
            text = row.abstract if row else ""
        if not text:
            raise NotFound("no abstract yet (not indexed)", {"uri": vp.uri})
        return fs_msgs.TextResult(uri=vp.uri, content=text)

    @handles(catalog.FS_OVERVIEW)
    async def fs_overview(self, req: fs_msgs.AbstractRequest, ctx: Ctx) -> fs_msgs.TextResult:
        """`fs.overview`: A node's L1 overview."""
        vp, st = await asyncio.to_thread(self._existing_entry, req.uri, ctx.identity)
        if st.is_dir:
            text = await asyncio.to_thread(treeops.read_text, self.ns.tree, f"{vp.key}/{tree.OVERVIEW}", "") or ""
            if not text:
                raise NotFound("no overview yet (not indexed)", {"uri": vp.uri})
            return fs_msgs.TextResult(uri=vp.uri, content=text)
        if (there := await self._from_owner(catalog.FS_OVERVIEW, req, ctx, vp)) is not None:
            return there
        await self.replica.catch_up(ctx)
        row = self.replica.index.get(vp.account, vp.uri, 1)
        if row is not None and row.kind == "document":  # a long document: its table of contents
            return fs_msgs.TextResult(uri=vp.uri, content=row.text.split("\n", 1)[-1])
        text, _, _ = await asyncio.to_thread(document, self.ns.tree, vp.key)
        return fs_msgs.TextResult(uri=vp.uri, content=extract.text_overview(vp.name, text))
