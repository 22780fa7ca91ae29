"""What rows one file becomes (pure apart from the summarizer it is handed).

A short file is one level-2 row, as always. A long resource becomes a document node: an L0 row
(its abstract), an L1 row (its table of contents, one line per section) and one level-2 row per
section under it (`<uri>#<anchor>`), each with its own abstract, its whole text for keyword
search and its own vector. A section whose text is unchanged keeps the vector it had, so a
re-ingest embeds only what changed; rows of sections that are gone are deleted.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import numpy as np

from skald.actors.indexer import rows as rows_mod
from skald.actors.text import sections as sections_mod
from skald.actors.text.textfile import Doc
from skald.messages.index import IndexRow
from skald.store import document_records, vector_bytes
from skald.store.uri import context_type_of, join_uri

SECTION_EMBED_CHARS = 2_000  # a section is cut to fit the window; this only bounds a pathological line


@dataclass(slots=True)
class RowSpec:
    """A row waiting for its vector: `vector` is set when an unchanged one is reused; `unchanged`
    says a section's text is what its record says was indexed, so the row the index log holds for
    it may carry a vector to reuse (`reuse`)."""

    uri: str
    level: int
    parent_uri: str
    abstract: str
    text: str
    embed: str
    content_hash: str
    vector: np.ndarray | None = None
    kind: str = ""
    title: str = ""
    start_line: int = 0
    end_line: int = 0
    page: int = 0
    unchanged: bool = False


@dataclass(slots=True)
class FilePlan:
    """The rows one file becomes, the rows of it that go, and the document record to keep beside it."""

    rows: list[RowSpec]
    deletes: list[tuple[str, int]]
    record: document_records.DocRecord | None  # None: the file needs no record (and an old one goes)
    sections: int = 0
    summary: str = ""


def sectioned(segments: tuple[str, ...], doc: Doc) -> bool:
    """Long resources and conversation transcripts become document nodes; other memories and
    skills are read whole."""
    if sections_mod.is_transcript(segments):
        return True
    return context_type_of(segments) == "resource" and sections_mod.needs_sections(doc)


def row_keys(uri: str, old: document_records.DocRecord | None) -> set[tuple[str, int]]:
    """Every row key a file has in the index, from its record (none: one level-2 row)."""
    if old is None or not old.sections:
        return {(uri, 2)}
    return {(uri, 0), (uri, 1), *((f"{uri}#{s.anchor}", 2) for s in old.sections)}


def plan(segments: tuple[str, ...], doc: Doc, sha: str, summary: str, model: str,
               old: document_records.DocRecord | None) -> FilePlan:
    """The rows of one converted file, reusing the vectors of unchanged sections."""
    uri = join_uri(segments)
    name = segments[-1]
    text_rec = doc.text if doc.derived else ""
    if not sectioned(segments, doc):
        abstract, embed = rows_mod.file_texts(segments, doc.text, summary)
        row = RowSpec(uri=uri, level=2, parent_uri=join_uri(segments[:-1]), abstract=abstract,
                      text=f"{name}\n{doc.text}", embed=embed, content_hash=sha)
        rec = (document_records.DocRecord(sha=sha, format=doc.format, title=doc.title, text=text_rec)
               if doc.derived else None)
        return FilePlan([row], sorted(row_keys(uri, old) - {(uri, 2)}), rec, summary=summary)
    transcript = sections_mod.is_transcript(segments)
    secs = sections_mod.turns(doc) if transcript else sections_mod.split(doc, name)
    known = {(s.anchor, s.sha): s for s in (old.sections if old else []) if s.model == model}
    title = doc.title or name
    # A transcript's overview is its abstract: a line per turn would repeat the whole file.
    toc = f"# {title}\n\n{summary}" if transcript else sections_mod.toc(name, title, summary, secs)
    specs = [
        RowSpec(uri=uri, level=0, parent_uri=join_uri(segments[:-1]), abstract=summary,
                text=f"{name}\n{title}\n{summary}", embed=f"{name}\n{title}\n{summary}", content_hash=sha,
                kind="document", title=title),
        RowSpec(uri=uri, level=1, parent_uri=join_uri(segments[:-1]), abstract=summary, text=f"{name}\n{toc}",
                embed=toc[: rows_mod.EMBED_CHARS], content_hash=rows_mod.sha256(toc.encode()), kind="document",
                title=title),
    ]
    records: list[document_records.SectionRecord] = []
    for s in secs:
        body = f"{s.title}\n{s.text}"
        embed = f"{s.context}\n{s.text}" if transcript else f"{title}\n{body}"
        ssha = rows_mod.sha256(f"{title}\n{body}\n{s.context}".encode())
        hit = known.get((s.anchor, ssha))
        vec = vector_bytes.unpack(hit.vector) if hit is not None and hit.vector else None  # a record from before
        specs.append(RowSpec(uri=f"{uri}#{s.anchor}", level=2, parent_uri=uri, abstract=s.abstract, text=body,
                             embed=embed[:SECTION_EMBED_CHARS], content_hash=ssha, vector=vec,
                             kind="section", title=s.title, start_line=s.start, end_line=s.end, page=s.page,
                             unchanged=hit is not None))
        records.append(document_records.SectionRecord(anchor=s.anchor, title=s.title, start=s.start, end=s.end,
                                                page=s.page, sha=ssha, model=model))
    new_keys = {(r.uri, r.level) for r in specs}
    rec = document_records.DocRecord(sha=sha, format=doc.format, title=doc.title, text=text_rec, sections=records)
    return FilePlan(specs, sorted(row_keys(uri, old) - new_keys), rec, sections=len(secs), summary=summary)


EMBED_CHUNK = 256  # passages per embedding call: large enough to batch well, small enough to report progress


async def embed_missing(specs: list[RowSpec], embed: Callable[[list[str]], Awaitable[list[np.ndarray]]],
                        progress: Callable[[int, int], Awaitable[None]] | None = None) -> int:
    """Fill every spec's vector that is missing, a chunk of passages per call, telling `progress`
    (passages done, passages in all) after each; returns how many were embedded."""
    todo = [s for s in specs if s.vector is None]
    for i in range(0, len(todo), EMBED_CHUNK):
        chunk = todo[i : i + EMBED_CHUNK]
        vecs = await embed([s.embed for s in chunk])
        for s, v in zip(chunk, vecs, strict=True):
            s.vector = np.asarray(v, dtype=np.float32)
        if progress is not None:
            await progress(i + len(chunk), len(todo))
    return len(todo)


def reuse(waiting: dict[tuple[str, str, int], RowSpec], held: dict[tuple[str, str, int], IndexRow],
          model: str) -> int:
    """Give each unchanged section waiting for a vector the one its row in the index log carries,
    when that row was made from the same text by the same model; how many were given. (The
    document record keeps which sections were indexed from what text, not their vectors: the log
    already holds each one, and a record's copy was most of the record, 0.77 KB a section.)"""
    given = 0
    for key, spec in waiting.items():
        row = held.get(key)
        if row is not None and row.model == model and row.content_hash == spec.content_hash and row.vector:
            spec.vector = vector_bytes.unpack(row.vector)
            given += 1
    return given
