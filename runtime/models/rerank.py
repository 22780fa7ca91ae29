"""A client for the common `/rerank` HTTP API (Cohere, Jina, vLLM, TEI shapes)."""

from __future__ import annotations

from skald.runtime.models import retries
from skald.runtime.models.httpjson import JsonClient

MAX_DOCS = 100  # one call never carries more
MAX_DOC_CHARS = 2_048


class HttpReranker:
    """A rerank model behind an OpenAI-compatible-style HTTP endpoint (`/rerank`)."""

    def __init__(self, base_url: str, model: str = "", api_key: str = "", timeout_s: float = 5.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.name = f"rerank:{model or 'default'}"
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = JsonClient(headers)
        self.timeout_s = timeout_s
        self.stats = retries.Stats()

    async def rerank(self, query: str, documents: list[str]) -> list[float]:
        """Relevance per document, in input order; raises on anything malformed."""
        docs = [d[:MAX_DOC_CHARS] for d in documents[:MAX_DOCS]]
        r = await retries.post_json(self._client, f"{self.base_url}/rerank", {
            "model": self.model, "query": query[:MAX_DOC_CHARS], "documents": docs, "top_n": len(docs),
            "texts": docs}, self.timeout_s, self.stats)
        body = r.json()
        items = body.get("results", body.get("data")) if isinstance(body, dict) else body
        if not isinstance(items, list):
            raise ValueError("rerank answer has no results list")
        scores = [float("nan")] * len(docs)
        for it in items:
            i = int(it["index"])
            s = it.get("relevance_score", it.get("score"))
            if not 0 <= i < len(docs) or not isinstance(s, (int, float)):
                raise ValueError("rerank result out of range or without a score")
            scores[i] = float(s)
        if any(s != s for s in scores):
            raise ValueError("rerank answer does not score every document")
        # Documents past MAX_DOCS keep their order after every scored one.
        tail = [min(scores) - 1.0 - i * 1e-6 for i in range(len(documents) - len(docs))] if scores else []
        return scores + tail
