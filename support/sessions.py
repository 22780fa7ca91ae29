"""What the session tests share: a scripted Phase 2 model and the small steps of a conversation."""

from __future__ import annotations

import asyncio
from typing import Any

from skald.runtime.client.api import SkaldClient
from support.stubs import ModelStub, chat, phase2_answer


class Model:
    """A scripted chat server: Phase 2 calls follow `mode`, everything else gets a short summary."""

    def __init__(self) -> None:
        self.mode = "ok"
        self.delay = 0.0
        self.phase2_calls = 0
        self.stub = ModelStub(self.respond)

    def respond(self, path: str, body: dict) -> tuple[int, Any, float]:
        system = body["messages"][0]["content"]
        if "working memory" not in system:
            return 200, chat("A short summary."), 0
        self.phase2_calls += 1
        prompt = body["messages"][1]["content"]
        if self.mode == "fail" or (self.mode == "poison" and "POISON" in prompt):
            return 500, {"error": "down"}, 0
        if self.mode == "hang":
            return 200, phase2_answer(prompt), 3.0
        if self.mode == "malformed":
            return 200, chat("{not json"), 0
        if self.mode == "wrong_count":
            return 200, phase2_answer(prompt, extra=1), 0
        return 200, phase2_answer(prompt), self.delay


async def add(c: SkaldClient, sid: str, role: str, text: str, **kw: Any) -> dict:
    return await c.call("sessions.add_message", {"session_id": sid, "role": role,
                                                 "parts": [{"type": "text", "text": text}], **kw})


async def turn(c: SkaldClient, sid: str, n: int) -> None:
    await add(c, sid, "user", f"question {n}")
    await add(c, sid, "assistant", f"answer {n}")


async def states(c: SkaldClient, sid: str) -> list[str]:
    return [a["state"] for a in (await c.call("sessions.archives", {"session_id": sid}))["archives"]]


async def until(c: SkaldClient, sid: str, want: list[str], timeout: float = 20.0) -> None:
    for _ in range(int(timeout / 0.1)):
        if await states(c, sid) == want:
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"archives {await states(c, sid)} never became {want}")


def ids(ctx: dict) -> list[str]:
    return [m["id"] for m in ctx["messages"]]
