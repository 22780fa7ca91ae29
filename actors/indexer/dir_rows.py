"""Directory rows (a mixin of the ingest pipeline): a directory's overview and abstract written
beside its entries and embedded as its L1 and L0 rows, its entries' abstracts read only as far as
an overview can show them."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable

import msgspec
import numpy as np

from skald.actors.indexer import rows as rows_mod
from skald.actors.indexer.wide import WideDirs
from skald.actors.kit.ports import Embedder, Summarizer
from skald.actors.text import extract, formats
from skald.actors.text.textfile import Unconvertible
from skald.messages.errors import InvalidArgument
from skald.messages.index import IndexChange, IndexRow
from skald.store import sidecar, tree, treeops, vector_bytes
from skald.store.index import row_subject_token
from skald.store.treeport import Entry, StoreUnavailable, Tree
from skald.store.uri import Namespace, VikingPath


class DirRows:
    """Needs the pipeline's namespace, embedder, summarizer, per-file limit and wide-directory record."""

    ns: Namespace
    embedder: Embedder
    summarizer: Summarizer
    max_file_bytes: int
    wide: WideDirs

    async def _dir_rows(self, dirs: list[VikingPath], at: float = 0.0) -> list[tuple[str, IndexChange]]:
        """Each directory's summary rows (abstract and overview), summarised again. `at`: the clock
        of the request whose job changed them (`IngestJob.at`), which their rows take when earlier
        than now (`rows.row_time`, as the files' rows do)."""
        rows: list[tuple[IndexRow, str]] = []
        t = self.ns.tree
        for vp in dirs:
            if not rows_mod.dir_has_rows(vp.segments):
                continue
            t0 = time.monotonic()
            children = await self._children(vp)
            if children is None:  # not a directory (any more): nothing to summarise, nothing to write
                continue
            now = time.monotonic()
            self.wide.record(vp.uri, len(children), now, took=now - t0)
            names = {n for n, is_dir, _ in children if not is_dir}
            readme = None
            for cand in ("README.md", "readme.md", "README"):
                if cand in names:
                    readme = await asyncio.to_thread(treeops.read_text, t, f"{vp.key}/{cand}")
                    break
            overview = await self.summarizer.dir_overview(vp.name, children, readme)
            abstract = await self.summarizer.dir_abstract(vp.name, overview)
            if "SKILL.md" in names:
                try:
                    sname, desc = rows_mod.parse_skill(
                        await asyncio.to_thread(treeops.read_text, t, f"{vp.key}/SKILL.md", "") or "")
                    abstract = f"{sname}: {desc}"[:256]
                except InvalidArgument:
                    pass
            await asyncio.gather(asyncio.to_thread(t.write, f"{vp.key}/{tree.OVERVIEW}", overview.encode()),
                                 asyncio.to_thread(t.write, f"{vp.key}/{tree.ABSTRACT}", abstract.encode()))
            when = rows_mod.row_time(time.time(), at)
            for level, text in ((0, abstract), (1, overview)):
                rows.append((rows_mod.make_row(vp.account, vp.segments, level, abstract,
                                        tags=(), created_at=when, updated_at=when,
                                        content_hash=rows_mod.sha256(text.encode()), model=self.embedder.name,
                                        vector=np.zeros(1), owner=rows_mod.owner_of(vp.segments),
                                        text=f"{vp.name}\n{text}"), text))
        if not rows:
            return []
        vecs = await self.embedder.embed_passages([t for _, t in rows])
        out = []
        for (row, _), vec in zip(rows, vecs, strict=True):
            row = msgspec.structs.replace(row, vector=vector_bytes.pack(vec))
            out.append((row_subject_token(row.account, row.uri, row.level), IndexChange(upsert=row)))
        return out

    async def _children(self, vp: VikingPath) -> list[tuple[str, bool, str]] | None:
        """(name, is_dir, abstract) of every entry, sorted, or None when `vp` is not a directory;
        abstracts only for the first ones, as many as a directory overview can show
        (`shown_children`): a directory of 100,000 entries costs one listing, not 100,000 reads per
        job touching it. The listing and the sidecar are read side by side (each a round trip on
        the JetStream tree), the rest in a thread."""
        t = self.ns.tree
        listing, facts = await asyncio.gather(asyncio.to_thread(_visible, t, vp.key),
                                              asyncio.to_thread(sidecar.load, t, vp.key))
        if listing is None:
            return None
        entries, stale = await asyncio.to_thread(_list_children, t, vp.key, listing, facts)
        out = list(entries)
        changed = False
        for i, name, st in stale:  # files new or changed since their abstract was written
            try:
                data = await asyncio.to_thread(t.read, f"{vp.key}/{name}") if st.size <= self.max_file_bytes else b""
            except StoreUnavailable:
                raise  # the job runs again: not an abstract written without this file's
            except OSError:
                continue  # gone since it was listed
            try:
                converted = await asyncio.to_thread(formats.convert, name, data)
            except Unconvertible:
                continue
            summary = await self.summarizer.file_abstract(name, converted.text)
            old = facts.get(name)
            facts[name] = sidecar.FileFacts(mtime_ns=treeops.mtime_ns(st), size=st.size, sha=rows_mod.sha256(data),
                                            abstract=summary, tags=old.tags if old else (),
                                            summarizer=self.summarizer.name)
            out[i] = (name, False, summary)
            changed = True
        if changed:
            await asyncio.to_thread(sidecar.save, t, vp.key, facts)
        return out


# An LLM overview lists at most this many entries (runtime/models/llm.py); the extractive one stops at
# OVERVIEW_MAX characters. Entries past both never reach a summary, so their abstracts are not read.
SHOWN_CHILDREN = 200


def shown_children(lines: Iterable[int]) -> int:
    """How many entries, in order, a directory overview can show, given each one's line length."""
    n = total = 0
    for length in lines:
        n += 1
        total += length
        if n >= SHOWN_CHILDREN and total >= extract.OVERVIEW_MAX:
            break
    return n


# Subdirectories whose abstracts one `read_many` asks for, as far as an overview can show them.
ABSTRACTS_AT_ONCE = 64


def _visible(t: Tree, key: str) -> list[Entry] | None:
    """A directory's visible entries, sorted; None when it is not one (gone, or a file)."""
    try:
        return [e for e in t.list(key) if treeops.visible(e.name, False)]
    except (FileNotFoundError, NotADirectoryError):
        return None


def _list_children(t: Tree, key: str, listing: list[Entry], facts: dict[str, sidecar.FileFacts]
                   ) -> tuple[list[tuple[str, bool, str]], list[tuple[int, str, Entry]]]:
    """The directory's entries (abstracts read for the shown ones only: a subdirectory's from its
    `.abstract.md`, ABSTRACTS_AT_ONCE read together, a file's from the sidecar `facts`) and the
    shown files whose facts are stale (their place in the entries, name, entry)."""
    entries: list[tuple[str, bool, str]] = []
    stale: list[tuple[int, str, Entry]] = []
    read: dict[int, str] = {}  # a subdirectory's abstract by its place in the listing

    def dir_abstract(i: int) -> str:
        if i not in read:
            window = [j for j in range(i, len(listing)) if listing[j].is_dir][:ABSTRACTS_AT_ONCE]
            got = t.read_many([f"{key}/{listing[j].name}/{tree.ABSTRACT}" for j in window])
            read.update((j, data.decode("utf-8", errors="replace") if data else "") for j, data in zip(window, got,
                                                                                                     strict=True))
        return read[i]

    def lines() -> Iterable[int]:
        for i, e in enumerate(listing):
            if e.is_dir:
                abstract = dir_abstract(i)
            else:
                f = facts.get(e.name)
                if f is None or f.mtime_ns != treeops.mtime_ns(e) or f.size != e.size:
                    stale.append((len(entries), e.name, e))
                    abstract = ""
                else:
                    abstract = f.abstract
            entries.append((e.name, e.is_dir, abstract))
            yield len(e.name) + len(abstract) + 6

    shown = shown_children(lines())
    entries += [(e.name, e.is_dir, "") for e in listing[shown:]]
    return entries, stale
