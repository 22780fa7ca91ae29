"""Model answers as events: a chat model used for state (Phase 2, model-written abstracts and
overviews) is asked through `LoggedLLM`, which looks the call's inputs up in the event log first
and logs every new answer before returning it. A replay therefore re-applies the answers the
original got, with no model reachable; only calls whose inputs differ reach a model.

Read paths (intent analysis, digest rewrite) use the model directly: they change no state.
"""

from __future__ import annotations

import hashlib
import json
import time

import msgspec
from nats.aio.client import Client as NATS

from skald.actors.kit.ports import LLM, Bus, Completion, Usage
from skald.messages import subjects
from skald.messages.journal import ModelOutput

EVENT = "model.output"
_dec = msgspec.json.Decoder(ModelOutput)


def call_key(model: str, system: str, user: str, max_tokens: int, as_json: bool) -> str:
    """The identity of a model call's inputs (the timeout is not one: it changes no answer)."""
    raw = json.dumps([model, system, user, max_tokens, as_json], ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(raw.encode()).hexdigest()


class LoggedLLM:
    """An LLM whose answers are read from, and written to, the event log."""

    def __init__(self, inner: LLM, bus: Bus) -> None:
        self.inner = inner
        self.bus = bus
        self.name = inner.name
        self.extractive = inner.extractive
        self.asked = 0  # calls that reached the model
        self.reused = 0  # calls answered from the log

    async def complete(self, system: str, user: str, *, max_tokens: int = 512,
                       timeout_s: float | None = None, json: bool = False) -> Completion:
        if self.extractive:
            return await self.inner.complete(system, user, max_tokens=max_tokens, timeout_s=timeout_s, json=json)
        key = call_key(self.name, system, user, max_tokens, json)
        raw = await self.bus.last_event(f"{EVENT}.{key}")
        if raw:
            out = _dec.decode(raw)
            self.reused += 1
            return Completion(text=out.text, model=out.answered_by,
                              usage=Usage(prompt_tokens=out.prompt_tokens, completion_tokens=out.completion_tokens,
                                          total_tokens=out.total_tokens))
        c = await self.inner.complete(system, user, max_tokens=max_tokens, timeout_s=timeout_s, json=json)
        self.asked += 1
        event = ModelOutput(key=key, model=self.name, answered_by=c.model, text=c.text,
                            prompt_tokens=c.usage.prompt_tokens, completion_tokens=c.usage.completion_tokens,
                            total_tokens=c.usage.total_tokens, at=time.time())
        # Logged before the caller writes anything from it: an answer that cannot be logged is not used.
        await self.bus.publish_event(f"{EVENT}.{key}", event, f"model-{key}")
        return c


async def publish_answers(nc: NATS, prefix: str, answers: list[ModelOutput], tag: str) -> None:
    """Answers into a deployment's event log, where its `LoggedLLM` finds them (a replay, a restored
    snapshot). `tag` makes the message ids new: the answer's own id would be dropped inside the
    duplicate window of an earlier publish."""
    js = nc.jetstream(timeout=10.0)
    for a in answers:
        await js.publish(subjects.event(prefix, f"{EVENT}.{a.key}"), msgspec.json.encode(a),
                         headers={"Nats-Msg-Id": f"model-{a.key}-{tag}"})
