"""The assembler's reads of stored text, through the text cache: a body to serve, and the
transcripts whose turns may bring the turn before them. A file that is gone is not served; a read
the store did not answer (`StoreUnavailable`) is raised, or named in `unread`, so the block says
what it could not read rather than passing for complete."""

from __future__ import annotations

from skald.actors.assembler import passages, textcache
from skald.actors.text import sections
from skald.messages import errors
from skald.messages.context import Candidate
from skald.store import treeops
from skald.store.treeport import Entry, StoreUnavailable, Tree
from skald.store.uri import Identity, Namespace

READ_MAX_BYTES = 256 * 1024  # a body is read whole only up to this; beyond it only its overview can serve


def read(t: Tree, cache: textcache.TextCache, key: str, mtime_ns: int, size: int,
         max_tokens: int) -> tuple[str, bool]:
    """(text, whole) of a file that may fit: nothing when even its smallest possible token
    count (1/8 token per byte) is over the budget and no overview could come from its head.
    Kept in the text cache for the (mtime, size) it was stat'ed at: a file changed since is
    read again next time. Raises StoreUnavailable."""
    try:
        data = t.read(key)[:READ_MAX_BYTES]
    except StoreUnavailable:
        raise
    except OSError:
        return "", False
    complete = size <= READ_MAX_BYTES
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        if complete:
            return "", False
        text, complete = data.decode("utf-8", errors="ignore"), False
    cache.put(key, mtime_ns, size, textcache.Body(text, complete))
    return text, complete and size // 8 <= max_tokens


Cached = tuple[str, Entry, textcache.Body | None]


def cached(ns: Namespace, cache: textcache.TextCache, uris: list[str], ident: Identity) -> list[Cached | None]:
    """For each URI, (key, entry, the cached body if the file is unchanged since it was read), or
    None when it has no readable file: the one stat every read of a served file starts with, the
    stats of all of them asked at once (`Tree.stat_many`: one exchange on the JetStream tree).
    Raises StoreUnavailable."""
    keys: list[str | None] = []
    for uri in uris:
        try:
            keys.append(ns.key_of(uri, ident))
        except (OSError, errors.SkaldError):
            keys.append(None)
    asked = [k for k in keys if k is not None]
    found = dict(zip(asked, ns.tree.stat_many(asked), strict=True))
    out: list[Cached | None] = []
    for key in keys:
        st = found.get(key) if key is not None else None
        out.append(None if key is None or st is None or st.is_dir else
                   (key, st, cache.get(key, treeops.mtime_ns(st), st.size)))
    return out


def turn_documents(buckets: dict[str, list[Candidate]]) -> list[str]:
    """The transcripts the candidate turns come from, each once; none when no candidate is a turn."""
    return list(dict.fromkeys(passages.document_of(c) for v in buckets.values() for c in v
                              if sections.is_turn(c.uri)))


def transcripts(ns: Namespace, cache: textcache.TextCache, docs: list[str], ident: Identity,
                unread: list[str]) -> dict[str, list[str]]:
    """The lines of each transcript (`turn_documents`): where the turns beside a hit are read. A
    transcript is written once, so after its first read it costs one stat. One the store did not
    answer for is left out and added to `unread` (its turns are served without those beside them)."""
    out: dict[str, list[str]] = {}
    try:
        found = cached(ns, cache, docs, ident)
    except StoreUnavailable:
        unread.extend(docs)
        return out
    for doc, got in zip(docs, found, strict=True):
        if got is None:
            continue
        key, st, body = got
        try:
            text = body.text if body is not None else read(ns.tree, cache, key, treeops.mtime_ns(st), st.size, 0)[0]
        except StoreUnavailable:
            unread.append(doc)
            continue
        lines = text.splitlines()
        out[doc] = lines if st.size <= READ_MAX_BYTES else lines[:-1]  # a head: its last line may be cut
    return out
