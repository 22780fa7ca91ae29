"""Pure cores: token estimate, extracts, URIs, glob translation, find parameters, results."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pytest

from skald.actors.indexer import rows as rows_mod
from skald.actors.retriever import params, results
from skald.actors.retriever.grep_glob import glob_regex
from skald.actors.text import extract
from skald.messages import errors
from skald.messages.index import IndexRow
from skald.runtime.models.embedders import HashEmbedder
from skald.store.index import Query, VectorIndex
from skald.store.tokens import estimate_tokens
from skald.store.uri import Identity, canonical, context_type_of, default_roots


@pytest.mark.parametrize("text,tokens", [
    ("", 0), ("abcd", 1), ("abcde", 2), ("你好", 3), ("こんにちは", 8), ("안녕", 3), ("ＡＢ", 3),
    ("😀", 2), ("a😀", 3), ("中文 text", 5),
])
def test_token_estimate(text: str, tokens: int) -> None:
    assert estimate_tokens(text) == tokens


def test_abstract_cuts_at_sentence_boundary() -> None:
    text = "# Title\n\n" + "This sentence is fine. " * 30
    a = extract.file_abstract("t.md", text)
    assert len(a) <= 256 and a.endswith(".") and a.startswith("Title.")
    assert extract.cut_sentences("第一句。第二句。", 5) == "第一句。"


def test_cut_sentences_reads_a_prefix_and_answers_as_over_the_whole_text() -> None:
    """Pieces of sentences, whitespace runs, CJK stops and decimals at every limit: the prefix it
    reads gives what the whole text gives (200,000 such texts agreed when it was written; a prefix
    of `limit` characters fails here)."""
    import random

    rng = random.Random(5)
    parts = ["word", "a", "b.", "end.", "why?", "wow!", " ", "  ", "\n", "\t", "x;", "。", "中文", "3.5", "...", "e.g."]
    for _ in range(5_000):
        text = "".join(rng.choice(parts) + rng.choice(["", " ", "  ", "\n"]) for _ in range(rng.randint(0, 150)))
        limit = rng.choice([5, 10, 20, 50, 120, 160, 220, 256])
        whole = extract.cut_normalised(" ".join(text.split()), limit)  # the definition, over every character
        assert extract.cut_sentences(text, limit) == whole, (text, limit)


def test_overview_by_source_type() -> None:
    assert extract.text_overview("m.md", "# Summary\n\nMet Bob.\n\n# Detail\n\nLong.") == "Met Bob."
    assert "def f(x)" in extract.text_overview("a.py", "import os\n\ndef f(x):\n    return x\n")
    assert extract.text_overview("d.md", "# A\n\npara one\n\n## B\n\ntext").startswith("- A\n  - B")


@pytest.mark.parametrize("uri,err", [
    ("viking://resources/../x", errors.InvalidArgument), ("viking://resources/%2e%2e/x", errors.InvalidArgument),
    ("viking://resources/%252e%252e/x", errors.InvalidArgument), ("viking://user/memories", errors.InvalidArgument),
    ("viking://user/mallory/x", errors.PermissionDenied), ("viking://other/x", errors.InvalidArgument),
    ("http://resources/x", errors.InvalidArgument), ("viking:///abs", errors.InvalidArgument),
])
def test_uri_refusals(uri: str, err: type) -> None:
    with pytest.raises(err):
        canonical(uri, Identity(user="alice"))


def test_uri_aliases_and_types() -> None:
    me = Identity(user="alice")
    assert canonical("viking://~/memories/events", me) == ("user", "alice", "memories", "events")
    assert canonical("viking://resources/a%20b/", me) == ("resources", "a b")
    assert context_type_of(("user", "a", "memories", "events", "x.md")) == "memory"
    assert context_type_of(("agent", "skills", "s", "SKILL.md")) == "skill"
    assert default_roots(Identity(user="u", peer="p"), "memory") == [
        "viking://user/u/peers/p/memories", "viking://user/u/peers/p/resources"]


@pytest.mark.parametrize("pattern,path,ok", [
    ("**/*.md", "a/b/c.md", True), ("**/*.md", "c.md", True), ("*/.md", "a/.md", True),
    ("*.md", "a/b.md", False), ("a/?.py", "a/b.py", True), ("[ab]*.txt", "c.txt", False),
    ("[!a]*.txt", "c.txt", True), ("docs/**", "docs/x/y", True),
])
def test_glob_translation(pattern: str, path: str, ok: bool) -> None:
    assert bool(glob_regex(pattern).match(path)) is ok


def test_time_parsing_and_decay() -> None:
    now = 1_800_000_000.0
    assert params.parse_time("2h", "since", now) == now - 7200
    assert params.parse_time("2026-01-01", "since", now) == 1767225600.0
    # a named day is included whole as an upper bound; a precise instant is taken as given
    assert params.parse_time("2026-01-01", "until", now) == 1767225600.0 + 86_400 - 1e-3
    assert params.parse_time("2026-01-01T00:00:00Z", "until", now) == 1767225600.0
    assert params.parse_decay("0") == 0.0 and params.parse_decay("7d") == 7 * 86400 and params.parse_decay(None) is None
    assert params.time_score(now - 86400, now, 7 * 86400) == 1.0
    assert math.isclose(params.time_score(now - (7 + 30) * 86400, now, 7 * 86400), 0.5)
    assert params.time_score(0.0, now, 0.0) == 1.0


def test_filter_forms() -> None:
    row = IndexRow(account="a", uri="viking://resources/x", level=2, parent_uri="viking://resources",
                   context_type="resource", category="", tags=("k=v",), updated_at=10.0)
    assert params.compile_filter({"level": [1, 2], "updated_at": {"gte": 5}})(row)  # type: ignore[misc]
    assert not params.compile_filter({"or": [{"level": 0}, {"context_type": "memory"}]})(row)  # type: ignore[misc]
    assert params.compile_filter({"op": "must_not", "field": "tags", "conds": ["x=y"]})(row)  # type: ignore[misc]
    with pytest.raises(errors.InvalidArgument):
        params.compile_filter({"op": "fuzzy", "field": "level"})


def test_suffixes_idempotent_and_grouping() -> None:
    u = results.served_uri("viking://resources/d", 0)
    assert u == "viking://resources/d/.abstract.md" and results.served_uri(u, 0) == u
    assert results.node_uri(results.node_uri(u)) == "viking://resources/d"
    assert results.passes(0.5, 0.5) is False and results.passes(0.5, 0.5, gte=True) is True


def test_several_queries_matches_tied_at_the_top_go_by_raw_similarity() -> None:
    """list mode with planned queries: calibrated scores clip at 1.0, so the raw similarity orders
    the ties, and grouping keeps that order (it once fell back to URI order)."""
    from skald.messages.search import MatchedContext

    def m(name: str, score: float) -> MatchedContext:
        return MatchedContext(context_type="resource", uri=f"viking://resources/{name}", level=2, score=score)

    ordered = results.by_score([m("a.md", 1.0), m("b.md", 0.7), m("c.md", 1.0), m("d.md", 1.0)],
                               [0.91, 0.80, 0.97, 0.93])
    assert [x.uri[-4:] for x in ordered] == ["c.md", "d.md", "a.md", "b.md"]
    grouped = results.group(ordered, 3, ranked_input=True)
    assert [x.uri[-4:] for x in grouped.resources] == ["c.md", "d.md", "a.md"]


def test_match_reasons_name_the_query_words_held_and_a_planned_query() -> None:
    from skald.messages.search import FindResult, MatchedContext

    def hit(uri: str, level: int = 2, found_by: str = "") -> MatchedContext:
        return MatchedContext(context_type="resource", uri=uri, level=level, score=0.5, match_reason=found_by)

    held = {("viking://resources/a.md", 2): ["caddy", "port"], ("viking://resources/d", 1): ["oauth"]}
    result = FindResult(memories=[], skills=[], total=3, resources=[
        hit("viking://resources/a.md"), hit("viking://resources/b.md"),
        hit("viking://resources/d/.overview.md", 1, found_by="OAuth 2.0 best practices")])
    asked: list[str] = []

    def words_in(query: str, rows: list[tuple[str, int]]) -> list[list[str]]:
        asked.append(query)
        return [held.get(r, []) for r in rows]

    results.explain(result, "caddy port", "semantic", words_in,
                    lambda uri: "# d\n- x.md" if uri == "viking://resources/d" else None)
    a, b, d = result.resources
    assert (a.match_reason, b.match_reason) == ("semantic and keywords (caddy, port)", "semantic")
    assert d.match_reason == "planned query 'OAuth 2.0 best practices': semantic and keywords (oauth)"
    assert asked[-1] == "OAuth 2.0 best practices"  # a planned query's hit is judged by that query's words
    assert (a.overview, d.overview) == (None, "# d\n- x.md")
    assert results.l1_overview(IndexRow(account="a", uri="viking://resources/d", level=1, parent_uri="",
                                        context_type="resource", text="d\n# d\n- x.md")) == "# d\n- x.md"


def test_tags_strict() -> None:
    assert rows_mod.check_tags(["a=b", "a=b"]) == ("a=b",)
    for bad in (["a"], ["=b"], ["a=b=c"], ["a= b"]):
        with pytest.raises(errors.InvalidArgument):
            rows_mod.check_tags(bad)


def _rows(n: int, dim: int) -> list[tuple[IndexRow, np.ndarray]]:
    """Clustered vectors (random Gaussians make a useless graph benchmark, docs/design/vectors.md)."""
    rng = np.random.default_rng(7)
    centers = rng.normal(size=(7, dim)).astype(np.float32)
    out = []
    for i in range(n):
        v = centers[i % 7] + 0.35 * rng.normal(size=dim).astype(np.float32)
        uri = f"viking://resources/t{i % 7}/doc{i}"
        out.append((IndexRow(account="acc", uri=uri, level=2, parent_uri=uri.rsplit("/", 1)[0],
                             context_type="resource", updated_at=float(i)), v / np.linalg.norm(v)))
    return out


def test_index_exact_and_graph_agree_on_top_hit(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from skald.store.index import search as index_search

    monkeypatch.setattr(index_search, "BRUTE_FORCE_MAX", 1000)  # so 3,000 rows take the graph path
    monkeypatch.setattr(index_search, "SMALL_INDEX", 1000)
    emb = HashEmbedder()
    idx = VectorIndex(emb.dim, emb.name)
    rows = _rows(3000, emb.dim)
    idx.upsert_many(rows)
    q = rows[1234][1]
    hits, trace = idx.search(q, Query(account="acc"), 5)
    scores = np.stack([v for _, v in rows]) @ q
    best = rows[int(np.argmax(scores))][0].uri
    assert trace.engine == "hnsw" and math.isclose(hits[0].score, float(scores.max()), abs_tol=1e-5)
    best = hits[0].row.uri
    sub, tr2 = idx.search(q, Query(account="acc", prefixes=[best.rsplit("/", 1)[0]]), 5)
    assert tr2.engine == "exact" and sub[0].row.uri == best
    assert all(h.row.uri.startswith(best.rsplit("/", 1)[0] + "/") for h in sub)
    assert idx.search(q, Query(account="other"), 5)[0] == []
    assert idx.delete("acc", best, 2)
    assert idx.search(q, Query(account="acc"), 1)[0][0].row.uri != best
    idx.applied_seq = 42
    idx.save(tmp_path / "snap")
    back = VectorIndex.load(tmp_path / "snap", emb.dim, emb.name)
    assert back is not None and len(back) == len(idx) and back.applied_seq == 42
    assert back.content_hash() == idx.content_hash()
    assert VectorIndex.load(tmp_path / "snap", emb.dim, "another-model") is None


def test_content_hash_says_whether_two_indexes_hold_the_same_rows_whatever_the_order() -> None:
    """Kept up to date by every write (no scan): the same rows in another order, with a row
    replaced and one deleted on the way, hash alike; one changed row does not."""
    emb = HashEmbedder()
    rows = _rows(50, emb.dim)
    a, b = VectorIndex(emb.dim, emb.name), VectorIndex(emb.dim, emb.name)
    empty = a.content_hash()
    a.upsert_many(rows)
    b.upsert_many(rows[::-1][:30])
    b.upsert_many([(msgspec.structs.replace(rows[5][0], content_hash="stale"), rows[5][1])])
    b.upsert_many(rows[::-1][30:] + [rows[5]])
    extra = msgspec.structs.replace(rows[0][0], uri="viking://resources/extra.md")
    b.upsert_many([(extra, rows[0][1])])
    assert a.content_hash() != b.content_hash()
    b.delete(extra.account, extra.uri, extra.level)
    assert a.content_hash() == b.content_hash() != empty
    b.upsert_many([(msgspec.structs.replace(rows[7][0], updated_at=99.0), rows[7][1])])
    assert a.content_hash() != b.content_hash()
    for row, _ in rows:
        a.delete(row.account, row.uri, row.level)
    assert a.content_hash() == empty


@pytest.mark.parametrize("damage", ["flip graph.bin", "truncate rows.zst", "truncate keywords.arrays",
                                    "flip keywords.msgpack", "remove graph.bin", "garble meta.json",
                                    "flip foreign.msgpack", "flip graph.links", "flip vectors.f16",
                                    "truncate vectors.f16", "remove graph.links"])
def test_a_corrupt_index_snapshot_is_refused_and_logged_never_half_loaded(tmp_path, caplog, damage) -> None:  # type: ignore[no-untyped-def]
    """Each file of a snapshot carries its CRC-32 in meta.json: a snapshot that does not read back
    whole is refused (None, so the replica rebuilds from the index stream) with a warning. The
    graph is split (links, float16 vectors) when the vectors are float16 values, as the stream's are."""
    emb = HashEmbedder()
    idx = VectorIndex(emb.dim, emb.name)
    split = damage.endswith((".links", ".f16"))
    rows = _rows(300, emb.dim)
    idx.upsert_many([(r, v.astype(np.float16).astype(np.float32)) for r, v in rows] if split else rows)
    idx.save(tmp_path / "snap")
    assert (tmp_path / "snap" / "graph.bin").exists() != split
    assert VectorIndex.load(tmp_path / "snap", emb.dim, emb.name) is not None
    verb, name = damage.split()
    path = tmp_path / "snap" / name
    data = bytearray(path.read_bytes())
    if verb == "flip":
        data[len(data) // 2] ^= 0x40  # one bit in the middle: hnswlib would load it without a word
        path.write_bytes(bytes(data))
    elif verb == "truncate":
        path.write_bytes(bytes(data[: len(data) // 3]))
    elif verb == "remove":
        path.unlink()
    else:
        path.write_bytes(b'{"dim": ')
    assert VectorIndex.load(tmp_path / "snap", emb.dim, emb.name) is None
    assert any("corrupt" in r.getMessage() and r.levelname == "WARNING" for r in caplog.records)


async def test_query_embeddings_are_cached_and_bounded() -> None:
    """Recall on every turn asks the same query again: it is embedded once (LRU, bounded)."""
    from skald.runtime.models.embedders import HashEmbedder, QueryCache

    inner = HashEmbedder()
    calls: list[str] = []
    original = inner.embed_query

    async def counting(text: str):  # type: ignore[no-untyped-def]
        calls.append(text)
        return await original(text)

    inner.embed_query = counting  # type: ignore[method-assign]
    cache = QueryCache(inner, size=2)
    a1 = await cache.embed_query("where is caddy")
    a2 = await cache.embed_query("where is caddy")
    assert calls == ["where is caddy"] and a1 is a2 and not a1.flags.writeable
    await cache.embed_query("b")
    await cache.embed_query("c")  # evicts the least recently used ("where is caddy")
    await cache.embed_query("where is caddy")
    assert calls == ["where is caddy", "b", "c", "where is caddy"] and (cache.hits, cache.misses) == (1, 4)
    assert cache.name == inner.name and cache.dim == inner.dim


def _batches_sent(model: Any, method: str) -> tuple[list[list[str]], Any]:
    """`model.<method>` (a batch of texts) made to note each batch it is sent: (the batches, the
    method as it was)."""
    sent: list[list[str]] = []
    original = getattr(model, method)

    async def counting(texts: list[str]):  # type: ignore[no-untyped-def]
        sent.append(list(texts))
        return await original(texts)

    setattr(model, method, counting)
    return sent, original


async def test_several_queries_at_once_send_the_model_only_those_not_remembered() -> None:
    """`embed_queries` through the cache: the remembered ones answered from it, the rest (each
    once) in one call, each vector the one `embed_query` gives, then remembered too."""
    from skald.runtime.models.embedders import HashEmbedder, QueryCache

    inner = HashEmbedder()
    sent, original = _batches_sent(inner, "embed_queries")
    cache = QueryCache(inner, size=8)
    known = await cache.embed_query("where is caddy")
    got = await cache.embed_queries(["what port", "where is caddy", "what port", "tls"])
    assert sent == [["what port", "tls"]] and got.shape == (4, inner.dim) and np.array_equal(got[1], known)
    for text, vec in zip(["what port", "where is caddy", "what port", "tls"], got, strict=True):
        assert np.allclose(vec, await inner.embed_query(text))
    await cache.embed_queries(["tls", "what port"])
    assert sent == [["what port", "tls"]] and (cache.hits, cache.misses) == (3, 3)


async def test_passages_are_embedded_once_by_content_across_processes_and_bounded(tmp_path: Path) -> None:
    """The passage cache: a text this model embedded before (in this process or another sharing the
    file) is not sent to the model again; duplicates inside a batch are sent once; vectors come back
    in the caller's order, equal to the model's; past max_rows the oldest entries go."""
    from skald.runtime.models.embedders import HashEmbedder, QueryCache
    from skald.store.vectors import VectorCache

    inner = HashEmbedder()
    sent, original = _batches_sent(inner, "embed_passages")
    path = tmp_path / "vectors.sqlite"
    one = QueryCache(inner, passages=VectorCache(path, max_rows=1000))
    got = await one.embed_passages(["alpha", "beta", "alpha"])
    assert sent == [["alpha", "beta"]]
    want = await original(["alpha", "beta", "alpha"])
    assert np.allclose(got, want) and got.dtype == np.float32
    other = QueryCache(inner, passages=VectorCache(path, max_rows=1000))  # another worker, same data dir
    again = await other.embed_passages(["beta", "gamma", "alpha"])
    assert sent == [["alpha", "beta"], ["gamma"]]
    assert np.allclose(again, await original(["beta", "gamma", "alpha"]))
    assert (other.passage_hits, other.passage_misses) == (2, 1)
    import sqlite3

    sizes = {n for (n,) in sqlite3.connect(path).execute("SELECT length(data) FROM vec")}
    assert sizes == {1 + 2 * inner.dim}  # float16, as the index stream keeps vectors
    small = VectorCache(tmp_path / "small.sqlite", max_rows=1000)
    for i in range(3):
        small.put_many([(bytes([i, j % 256, j // 256]), np.ones(4, np.float32)) for j in range(1000)])
    assert 900 <= len(small) <= 1000  # trimmed, oldest first
    assert not small.get_many([bytes([0, 0, 0])]) and small.get_many([bytes([2, 999 % 256, 999 // 256])])
