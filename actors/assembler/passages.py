"""Sections of long documents as passages (pure): neighbouring sections of one document that
were both chosen become one entry, and a document's own node (its table of contents) steps
aside when one of its sections is served."""

from __future__ import annotations

import msgspec

from skald.actors.text import sections
from skald.messages.context import Candidate
from skald.store.tokens import estimate_tokens

MERGED_MAX_TOKENS = 600  # a merged passage stays about one screen; longer runs stay separate sections


def document_of(c: Candidate) -> str:
    return c.uri.split("#", 1)[0]


def merge_neighbours(chosen: list[Candidate], max_tokens: int | None = None) -> list[Candidate]:
    """Score order kept (a merged passage takes its best section's place). A merge that would
    pass `max_tokens` (the per-entry cap) is not made: two sections served whole beat one
    passage too long to serve."""
    by_doc: dict[str, list[Candidate]] = {}
    for c in chosen:
        if c.lines is not None:
            by_doc.setdefault(document_of(c), []).append(c)
    replace: dict[str, Candidate | None] = {}
    for secs in by_doc.values():
        if len(secs) < 2:
            continue
        secs = sorted(secs, key=lambda c: c.lines or (0, 0))
        run = [secs[0]]
        for c in [*secs[1:], None]:
            if c is not None and c.lines and run[-1].lines and c.lines[0] <= run[-1].lines[1] + 1 and (
                    max_tokens is None or sum(estimate_tokens(x.text) for x in (*run, c)) <= max_tokens):
                run.append(c)
                continue
            if len(run) > 1:
                best = max(run, key=lambda x: x.score)
                first, last = run[0].lines or (0, 0), run[-1].lines or (0, 0)
                merged = msgspec.structs.replace(
                    run[0], score=best.score, text="\n\n".join(x.text for x in run),
                    abstract=run[0].abstract, lines=(first[0], last[1]),
                    location=sections.place(first[0], last[1], run[0].page))
                for x in run:
                    replace[x.uri] = None
                replace[best.uri] = merged
            run = [c] if c is not None else []
    served_docs = {document_of(c) for c in chosen if c.lines is not None}
    out: list[Candidate] = []
    for c in chosen:
        if c.is_dir and c.uri in served_docs:
            continue  # the section itself is served; its document's table of contents is not needed
        if c.uri in replace:
            r = replace[c.uri]
            if r is not None:
                out.append(r)
            continue
        out.append(c)
    return out
