"""LLM implementations: the offline extractive default and an OpenAI-compatible chat client,
plus the ingest summarizers built on either."""

from __future__ import annotations

import asyncio

from skald.actors.kit.ports import LLM, Completion, Usage
from skald.actors.text import extract
from skald.runtime.models import retries
from skald.runtime.models.httpjson import JsonClient
from skald.store.tokens import estimate_tokens


class ExtractiveLLM:
    """No model: answers with an extract of the prompt. Callers check `extractive` and take their
    extractive path; this `complete` exists so nothing crashes if one does not."""

    name = "extractive"
    extractive = True

    async def complete(self, system: str, user: str, *, max_tokens: int = 512,
                       timeout_s: float | None = None, json: bool = False) -> Completion:
        text = extract.cut_sentences(user, max_tokens * 4)
        return Completion(text=text, usage=Usage(), model=self.name)


class OpenAIChat:
    """`POST {base_url}/chat/completions`; every call has a timeout and reports token usage."""

    extractive = False

    def __init__(self, base_url: str, model: str, api_key: str = "", timeout_s: float = 60.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.name = f"openai:{model}"
        self.timeout_s = timeout_s
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = JsonClient(headers)
        self.stats = retries.Stats()

    async def complete(self, system: str, user: str, *, max_tokens: int = 512,
                       timeout_s: float | None = None, json: bool = False) -> Completion:
        body: dict[str, object] = {
            "model": self.model,
            "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}],
            "max_tokens": max_tokens,
            "temperature": 0,
        }
        if json:
            body["response_format"] = {"type": "json_object"}
        t = timeout_s or self.timeout_s
        # Retries end a little before the caller's fuse, so a server that keeps failing is reported
        # as the failure it is, not as a timeout.
        inner = max(0.05, t - min(0.25, t / 4))
        r = await asyncio.wait_for(retries.post_json(self._client, f"{self.base_url}/chat/completions", body, inner,
                                                     self.stats), t)
        data = r.json()
        text = data["choices"][0]["message"]["content"]
        if not isinstance(text, str):
            raise ValueError("chat completion without text content")
        u = data.get("usage") or {}
        usage = Usage(
            prompt_tokens=int(u.get("prompt_tokens", 0)),
            completion_tokens=int(u.get("completion_tokens", 0)),
            total_tokens=int(u.get("total_tokens", 0)),
        )
        if not usage.total_tokens:
            usage.completion_tokens = estimate_tokens(text)
            usage.total_tokens = usage.completion_tokens
        return Completion(text=text, usage=usage, model=str(data.get("model", self.model)))


class ExtractiveSummarizer:
    """L0 / L1 without a model: extracts, and says so (`extractive = True`)."""

    name = "extractive"
    extractive = True

    async def file_abstract(self, name: str, text: str) -> str:
        return extract.file_abstract(name, text)

    async def dir_overview(self, name: str, children: list[tuple[str, bool, str]], readme: str | None) -> str:
        return extract.dir_overview(name, children, readme)

    async def dir_abstract(self, name: str, overview: str) -> str:
        return extract.dir_abstract(name, overview)


_ABSTRACT_PROMPT = (
    "Summarise the document in at most two sentences and at most 256 characters. "
    "Say what it is and what it covers. Answer with the summary only."
)
_OVERVIEW_PROMPT = (
    "Write a short markdown overview of this directory from its entries: one opening paragraph on "
    "what the directory holds, then a '## Contents' list with one line per entry. Use only the facts given."
)


class LLMSummarizer:
    """L0 / L1 written by a chat model; any failure falls back to the extract, counted in `fallbacks`."""

    extractive = False

    def __init__(self, llm: LLM) -> None:
        self.llm = llm
        self.name = f"llm:{llm.name}"
        self._fallback = ExtractiveSummarizer()
        self.fallbacks = 0
        self.usage_tokens = 0

    async def _ask(self, system: str, user: str, max_tokens: int) -> str | None:
        try:
            c = await self.llm.complete(system, user, max_tokens=max_tokens)
        except Exception:  # noqa: BLE001 - any model failure degrades to the extract
            self.fallbacks += 1
            return None
        self.usage_tokens += c.usage.total_tokens
        text = c.text.strip()
        if not text:
            self.fallbacks += 1
            return None
        return text

    async def file_abstract(self, name: str, text: str) -> str:
        out = await self._ask(_ABSTRACT_PROMPT, f"File: {name}\n\n{text[:12000]}", 128)
        return extract.cut_sentences(out, extract.ABSTRACT_MAX) if out else extract.file_abstract(name, text)

    async def dir_overview(self, name: str, children: list[tuple[str, bool, str]], readme: str | None) -> str:
        listing = "\n".join(f"- {n}{'/' if d else ''}: {a}" for n, d, a in children[:200])
        out = await self._ask(_OVERVIEW_PROMPT, f"Directory: {name}\n\n{listing}", 800)
        return out or extract.dir_overview(name, children, readme)

    async def dir_abstract(self, name: str, overview: str) -> str:
        out = await self._ask(_ABSTRACT_PROMPT, f"Directory: {name}\n\n{overview[:8000]}", 128)
        return extract.cut_sentences(out, extract.ABSTRACT_MAX) if out else extract.dir_abstract(name, overview)
