"""Candidates for context assembly, every bucket for every query in one trip: each bucket's scope
planned from the request, keyword hits gathered while the queries are embedded, then per bucket the
hybrid search, the calibrated (and, for events, time-decayed) scores, and the shaping into
candidates (collapse, exclusions, cooled URIs, the cut). A bucket that fails is reported and the
others still answer (docs/design/context-assembly.md, finding 12)."""

from __future__ import annotations

import logging
import time

from skald.actors.kit.overlap import overlapped
from skald.actors.kit.ports import Embedder
from skald.actors.retriever import candidates, params, results
from skald.actors.retriever.calibration import Calibration
from skald.actors.retriever.query_vectors import query_vectors
from skald.actors.retriever.scoring import (
    Words,
    answered,
    decayed_score,
    hybrid,
    keyword_hits,
    words_for,
)
from skald.actors.retriever.shards import sent_vector
from skald.actors.text import sections
from skald.messages import context as context_msgs
from skald.store.index import Hit, Query, VectorIndex
from skald.store.uri import Identity, join_uri

log = logging.getLogger("skald.retriever")


def turns_likely(index: VectorIndex, kws: list[Words], k: int) -> bool:
    """Whether a page of hits will likely hold transcript turns: one of the best k keyword hits of
    a query is one. Where it is, the index is asked for a page of turns at once; a wrong guess
    costs a larger first page (cut to k after), a missed one the second search it always took."""
    return any(sections.is_turn(r.uri) for w in kws for lab in w.labels[:k].tolist()
               if (r := index.row_at(lab)) is not None)


async def gather(index: VectorIndex, embedder: Embedder, cal: Calibration, req: context_msgs.CandidatesRequest,
                 c: params.Common, identity: Identity) -> context_msgs.CandidatesResult:
    """Every requested bucket's candidates (the request already validated, the replica caught up)."""
    excluded = candidates.excluder(req.exclude_uris, req.exclude_uris)
    cooled = candidates.excluder(req.cooled_uris, req.cooled_prefixes)
    account = identity.account

    def package_abstract(pkg: tuple[str, ...]) -> str:
        row = index.get(account, join_uri(pkg), 0)
        return row.abstract if row else ""

    out = context_msgs.CandidatesResult(buckets={})
    plans: dict[str, tuple[Query, int, int] | None] = {}
    for b in req.buckets:
        prefixes, ctypes, category = candidates.bucket_scope(b.name, identity, req.peer_scope)
        if c.context_types is not None:
            ctypes = ctypes & c.context_types
        if not ctypes:
            plans[b.name] = None
            continue
        base = c.predicate
        pred = base if category is None else (
            (lambda r, cat=category: r.category == cat) if base is None else
            (lambda r, cat=category, p=base: r.category == cat and p(r)))
        # Room for what shaping removes before the cut: collapsed skill files, directory
        # levels, scope directories, exclusions and cooled URIs. The turns of one transcript
        # count as one entry: when the first page holds turns, the index is asked again for
        # up to TURNS_PER_ENTRY per entry (`k_turns`).
        room = max(10, b.limit // 2) + len(req.exclude_uris) + len(req.cooled_uris)
        over = params.EVENT_DECAY_OVERFETCH if c.decay is not None else 1
        plans[b.name] = (Query(account=account, prefixes=prefixes, context_types=ctypes, since=c.since,
                               until=c.until, time_field=req.time_field, predicate=pred),
                         (b.limit + room) * over, (b.limit * candidates.TURNS_PER_ENTRY + room) * over)
    errors: dict[str, str] = {}

    def keyword_half() -> dict[str, list[Words]]:
        """Every bucket's keyword hits for every query, while the embeddings are on their way:
        as deep as a page of turns needs (`k_turns`), so the second page below reuses them."""
        got: dict[str, list[Words]] = {}
        for name, plan in plans.items():
            if plan is None:
                continue
            try:
                got[name] = [keyword_hits(index, text, plan[0], plan[2]) for text in req.queries]
            except Exception as e:  # noqa: BLE001 - one bucket's failure is reported, the others answer
                log.exception("candidates: bucket %s failed", name)
                errors[name] = f"{type(e).__name__}: {e}"[:300]
        return got

    te = time.perf_counter()
    given = [sent_vector(v, req.vector_model, embedder) for v in req.vectors]
    if given and len(given) == len(req.queries) and all(v is not None for v in given):
        vecs, words = [v for v in given if v is not None], keyword_half()
    else:
        scopes = [plan[0] for plan in plans.values() if plan is not None]
        vecs, words = await overlapped(query_vectors(embedder, index, req.queries, scopes), keyword_half)
    embed_ms = (time.perf_counter() - te) * 1000
    n_excluded: set[str] = set()
    n_cooled: set[str] = set()
    search_s = shape_s = 0.0
    # Per hit below: looked up once (an event-free request skips the decay altogether).
    to_scale, decay, now, thr, gte = cal.score, c.decay, c.now, req.score_threshold, req.score_gte
    for b in req.buckets:
        plan = plans[b.name]
        if plan is None or b.name in errors:
            out.buckets[b.name] = []
            continue
        q, k, k_turns = plan

        def passes(h: Hit, margin: float) -> bool:
            s = to_scale((h.score if h.gate is None else h.gate) - margin)
            return results.passes(s if decay is None else decayed_score(h.row, s, decay, now), thr, gte)

        def searched(k: int, kws: list[Words], q: Query = q) -> list[list[Hit]]:
            """Each query's hits, best first."""
            return [hybrid(index, vec, text, q, k, keywords_only=req.keywords_only, words=kw)
                    for text, vec, kw in zip(req.queries, vecs, kws, strict=True)]

        try:
            ts = time.perf_counter()
            kws = words[b.name]
            # Turns group into entries, so a page of k rows holding turns is fewer entries: the
            # index is asked for k_turns rows then, at once when the keyword hits hold turns, else
            # after the page of k shows them. LoCoMo 26 (bench/locomo.py's ingest, 152 questions):
            # the same blocks, the searches 2.84 -> 1.76 ms p50 (one pass instead of two).
            deep = k_turns > k and turns_likely(index, kws, k)
            found = searched(k_turns, kws) if deep else searched(k, [words_for(w, k) for w in kws])
            more = k_turns > k and any(len(f) >= k and any(sections.is_turn(h.row.uri) for h in f[:k]) for f in found)
            if more and not deep:
                found = searched(k_turns, kws)
            elif deep and not more:
                found = [f[:k] for f in found]
            hits = [h for f in found for h in answered(f, passes)]
            tm = time.perf_counter()
            search_s += tm - ts
            scored = ([candidates.Scored(h.row, to_scale(h.score), h.score) for h in hits] if decay is None else
                      [candidates.Scored(h.row, decayed_score(h.row, to_scale(h.score), decay, now),
                                         decayed_score(h.row, h.score, decay, now)) for h in hits])
            shaped = candidates.shape(scored, identity, excluded, cooled, package_abstract,
                                      req.other_peer_penalty)
            n_excluded |= shaped.excluded
            n_cooled |= shaped.cooled
            out.buckets[b.name] = kept = candidates.cut([m for m in shaped.candidates if results.passes(
                m.score, req.score_threshold, req.score_gte)], b.limit)
            # A section is served as its own text, and a long document whose L1 row was hit as its
            # table of contents: the index keeps both out of its rows, read for the candidates kept.
            for level, read in ((2, index.leaf_texts), (1, index.overviews)):
                bare = [m for m in kept if shaped.held.get(m.uri) == level]
                for m, text in zip(bare, read(account, [m.uri for m in bare]), strict=True):
                    m.text = text if level == 2 else results.overview_text(text)
            # So is a leaf's abstract.
            bare = [m for m in kept if not m.abstract and not m.is_dir]
            for m, abstract in zip(bare, index.leaf_abstracts(account, [m.uri for m in bare]), strict=True):
                m.abstract = abstract
            shape_s += time.perf_counter() - tm
        except Exception as e:  # noqa: BLE001 - one bucket's failure is reported, the others answer
            log.exception("candidates: bucket %s failed", b.name)
            out.buckets[b.name] = []
            errors[b.name] = f"{type(e).__name__}: {e}"[:300]
    out.errors.update(errors)
    out.excluded, out.cooled, out.embed_ms = len(n_excluded), len(n_cooled), round(embed_ms, 3)
    out.search_ms, out.shape_ms = round(search_s * 1000, 3), round(shape_s * 1000, 3)
    return out
