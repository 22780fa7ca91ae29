"""Which shard holds a row, which shards a scope spans, and how shard answers merge."""

from __future__ import annotations

import zlib

import msgspec
import numpy as np
import pytest

from skald.actors.retriever import params
from skald.actors.retriever.calibration import IDENTITY
from skald.actors.retriever.gather import gather
from skald.actors.retriever.shards import merge_candidates, merge_find
from skald.actors.text.tags import check_tags
from skald.messages.context import Bucket, Candidate, CandidatesRequest, CandidatesResult
from skald.messages.index import IndexRow
from skald.messages.search import FindRequest, FindResult, MatchedContext, ShardError
from skald.runtime.host.config import Config, ConfigError
from skald.runtime.models.embedders import HashEmbedder
from skald.store.index import VectorIndex
from skald.store.index.shards import shard_key, shard_of, shards_for
from skald.store.uri import Identity


def test_a_subtree_two_segments_deep_stays_on_one_shard() -> None:
    doc = "viking://resources/acme/runbooks/deploy.md"
    want = shard_of("a", doc, 8)
    for uri in ("viking://resources/acme", "viking://resources/acme/runbooks", f"{doc}#rollback",
                "viking://resources/acme/other/x.md"):
        assert shard_of("a", uri, 8) == want
    assert shard_key("a", f"{doc}#rollback") == "a\x00resources/acme"
    # stable across processes: CRC-32 of the key, not Python's salted hash
    assert want == zlib.crc32(b"a\x00resources/acme") % 8
    assert shard_of("a", doc, 1) == 0


def test_accounts_and_projects_spread_over_the_shards() -> None:
    got = {shard_of(f"acct{i}", f"viking://resources/p{j}", 4) for i in range(20) for j in range(20)}
    assert got == {0, 1, 2, 3}


def test_the_shards_a_scope_spans() -> None:
    assert shards_for("a", None, 3) == [0, 1, 2]
    assert shards_for("a", ["viking://resources"], 3) == [0, 1, 2]  # shallower than two segments
    one = shard_of("a", "viking://resources/acme", 3)
    assert shards_for("a", ["viking://resources/acme/runbooks"], 3) == [one]
    two = shards_for("a", ["viking://resources/acme", "viking://user/bob/memories"], 3)
    assert two == sorted({one, shard_of("a", "viking://user/bob", 3)})
    assert shards_for("a", ["viking://resources"], 1) == [0]


def hit(uri: str, score: float, kind: str = "resource") -> MatchedContext:
    return MatchedContext(context_type=kind, uri=uri, level=2, score=score)


def test_find_answers_merge_by_score_and_name_the_missing_shard() -> None:
    a = FindResult(memories=[hit("viking://user/u/memories/m.md", 0.9, "memory")],
                   resources=[hit("viking://resources/a/x.md", 0.5)], skills=[], total=2,
                   provenance={"mode": "quick"}, telemetry={"latency_ms": 2.0})
    b = FindResult(memories=[], resources=[hit("viking://resources/b/y.md", 0.7),
                                           hit("viking://resources/b/z.md", 0.1)], skills=[], total=2,
                   provenance={"mode": "quick"}, telemetry={"latency_ms": 5.0})
    gone = [ShardError(shard=2, code="UNAVAILABLE", message="no worker serves this")]
    out = merge_find([a, b], 3, gone)
    assert [m.uri for m in out.memories] == ["viking://user/u/memories/m.md"]
    assert [m.uri for m in out.resources] == ["viking://resources/b/y.md", "viking://resources/a/x.md"]
    assert out.total == 3 and out.missing_shards == gone
    assert out.provenance == {"mode": "quick", "shards": 3} and out.telemetry == {"latency_ms": 5.0}


def test_find_answers_tied_at_the_top_keep_each_shards_own_order() -> None:
    """Calibrated scores clip at 1.0: among ties, every shard's first hit comes before any shard's
    second, whatever the URIs (they once went in alphabetical order)."""
    a = FindResult(memories=[], resources=[hit("viking://resources/a/z-best.md", 1.0),
                                           hit("viking://resources/a/b-second.md", 1.0)], skills=[], total=2)
    b = FindResult(memories=[], resources=[hit("viking://resources/b/y-best.md", 1.0),
                                           hit("viking://resources/b/a-second.md", 1.0),
                                           hit("viking://resources/b/c-weak.md", 0.4)], skills=[], total=3)
    out = merge_find([a, b], 4, [])
    assert [m.uri.rsplit("/", 1)[1] for m in out.resources] == ["z-best.md", "y-best.md", "b-second.md",
                                                                 "a-second.md"]


def cand(uri: str, score: float, raw: float = 0.0) -> Candidate:
    return Candidate(uri=uri, category="resources", score=score, raw=raw)


def test_candidates_merge_per_bucket_with_the_missing_shard_as_an_error() -> None:
    req = CandidatesRequest(queries=["q"], buckets=[Bucket(name="resources", limit=2), Bucket(name="skills", limit=1)])
    a = CandidatesResult(buckets={"resources": [cand("r1", 0.9), cand("r2", 1.0, raw=0.7)]}, excluded=1,
                         search_ms=3.0)
    b = CandidatesResult(buckets={"resources": [cand("r3", 1.0, raw=0.8), cand("r1", 0.2)]}, cooled=2,
                         errors={"skills": "INTERNAL: boom"}, search_ms=4.0)
    out = merge_candidates([a, b], req, [ShardError(shard=1, code="DEADLINE_EXCEEDED", message="no answer")])
    # clipped scores tie at 1.0: the raw similarity orders them; r1 keeps its better copy
    assert [c.uri for c in out.buckets["resources"]] == ["r3", "r2"]
    assert out.buckets["skills"] == []
    assert (out.excluded, out.cooled, out.search_ms) == (1, 2, 4.0)
    assert out.errors == {"skills": "INTERNAL: boom", "shard:1": "DEADLINE_EXCEEDED: no answer"}


def test_a_shard_number_outside_the_count_is_refused() -> None:
    assert Config.from_env({"SKALD_INDEX_SHARDS": "4", "SKALD_INDEX_SHARD": "3"}).index_shard == 3
    with pytest.raises(ConfigError, match="SKALD_INDEX_SHARD=4"):
        Config.from_env({"SKALD_INDEX_SHARDS": "4", "SKALD_INDEX_SHARD": "4"})
    with pytest.raises(ConfigError, match="SKALD_INDEX_SHARDS"):
        Config.from_env({"SKALD_INDEX_SHARDS": "0"})


class CountingEmbedder(HashEmbedder):
    """The hashed embedder, counting the queries it embeds."""

    def __init__(self) -> None:
        super().__init__()
        self.asked = 0

    async def embed_query(self, text: str) -> np.ndarray:
        self.asked += 1
        return await super().embed_query(text)


async def test_candidates_take_the_vectors_a_scatter_embedded_once() -> None:
    emb = CountingEmbedder()
    idx = VectorIndex(emb.dim, emb.name)
    texts = {"heron.md": "the grey heron waits by the pond", "osprey.md": "the osprey nests on the cliff",
             "wren.md": "a wren sings in the hedge"}
    idx.upsert_many([(IndexRow(account="default", uri=f"viking://resources/birds/{n}", level=2,
                               parent_uri="viking://resources/birds", context_type="resource", text=t,
                               abstract=t, model=emb.name), emb.embed_sync(t)) for n, t in texts.items()])
    ident = Identity(account="default", user="default", agent="default")
    req = CandidatesRequest(queries=["where does the osprey nest"], buckets=[Bucket(name="resources", limit=3)],
                            score_threshold=-1.0)
    c = params.common(FindRequest(query=req.queries[0]), 0.0, check_tags)
    emb.asked = 0
    plain = await gather(idx, emb, IDENTITY, req, c, ident)
    assert emb.asked == 1
    vec = await emb.embed_query(req.queries[0])
    given = msgspec.structs.replace(req, vectors=[vec.astype("<f4").tobytes()], vector_model=emb.name)
    emb.asked = 0
    got = await gather(idx, emb, IDENTITY, given, c, ident)
    assert emb.asked == 0  # the shard used the vector it was sent
    same = [(x.uri, x.score) for x in plain.buckets["resources"]]
    assert [(x.uri, x.score) for x in got.buckets["resources"]] == same
    assert got.buckets["resources"][0].uri.endswith("osprey.md")
    other = msgspec.structs.replace(given, vector_model="another-model")
    await gather(idx, emb, IDENTITY, other, c, ident)
    assert emb.asked == 1  # another model's vector is not comparable: embedded again
