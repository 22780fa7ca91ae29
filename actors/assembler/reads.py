"""The assembler's reads of stored text, through the text cache: a body to serve, and the
transcripts whose turns may bring the turn before them."""

from __future__ import annotations

import os

from skald.actors.assembler import passages, textcache
from skald.actors.text import sections
from skald.messages import errors as E
from skald.messages.context import Candidate
from skald.store.uri import Identity, Namespace

READ_MAX_BYTES = 256 * 1024  # a body is read whole only up to this; beyond it only its overview can serve


def read(cache: textcache.TextCache, path: str, mtime_ns: int, size: int, max_tokens: int) -> tuple[str, bool]:
    """(text, whole) of a file that may fit: nothing when even its smallest possible token
    count (1/8 token per byte) is over the budget and no overview could come from its head.
    Kept in the text cache for the (mtime, size) it was stat'ed at: a file changed since is
    read again next time."""
    try:
        with open(path, "rb") as f:
            data = f.read(READ_MAX_BYTES)
    except OSError:
        return "", False
    complete = size <= READ_MAX_BYTES
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        if complete:
            return "", False
        text, complete = data.decode("utf-8", errors="ignore"), False
    cache.put(path, mtime_ns, size, textcache.Body(text, complete))
    return text, complete and size // 8 <= max_tokens


def transcripts(ns: Namespace, cache: textcache.TextCache, buckets: dict[str, list[Candidate]],
                ident: Identity) -> dict[str, list[str]]:
    """The lines of each transcript a candidate turn is from: where a turn's lead-in is read.
    Nothing is read when no candidate is a turn; a transcript is written once, so after its
    first read it costs one stat."""
    out: dict[str, list[str]] = {}
    for c in (c for v in buckets.values() for c in v if sections.is_turn(c.uri)):
        doc = passages.document_of(c)
        if doc in out:
            continue
        try:
            path = ns.fspath(doc, ident)
            st = os.stat(path)
        except (OSError, E.SkaldError):
            continue
        body = cache.get(path, st.st_mtime_ns, st.st_size)
        lines = (body.text if body is not None else read(cache, path, st.st_mtime_ns, st.st_size, 0)[0]).splitlines()
        out[doc] = lines if st.st_size <= READ_MAX_BYTES else lines[:-1]  # a head: its last line may be cut
    return out


def has_turns(buckets: dict[str, list[Candidate]]) -> bool:
    return any(sections.is_turn(c.uri) for v in buckets.values() for c in v)
