"""Work-queue consumption survives JetStream misbehaving under it: a job whose acknowledgement
fails is delivered again (never lost, never the end of the loop), and a consumer deleted under a
worker is subscribed again."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from skald.runtime.bus.streams import stream_name
from support.stubs import ModelStub, chat


async def test_a_job_whose_consumer_vanishes_mid_run_is_run_again_and_the_queue_keeps_going(
        deploy: Callable[..., Any]) -> None:
    """The ingest consumer is deleted while a job runs (its abstract waits on a slow model): the
    acknowledgement fails, the worker subscribes again, the job (still in the work-queue stream)
    runs again and completes; a later job completes too."""
    calls = 0

    def respond(path: str, body: dict) -> tuple[int, Any, float]:
        nonlocal calls
        calls += 1
        return 200, chat("An abstract about the note."), 1.5 if calls == 1 else 0.0

    stub = ModelStub(respond)
    try:
        w, c = await deploy(actors=("indexer", "retriever"), llm_base_url=stub.url)
        js = c.nc.jetstream(timeout=5.0)
        first = await c.call("resources.add", {"content": "# Note\n\nThe vault key rotates on Fridays.",
                                               "name": "vault.md", "wait": False})
        await asyncio.sleep(0.7)  # the job is running, waiting on the model
        await js.delete_consumer(stream_name(w.cfg.prefix, "work"), "ingest")
        for _ in range(200):
            found = await c.call("search.find", {"query": "vault key rotation", "level": 2})
            if any(m["uri"].endswith("vault.md") for m in found["resources"]):
                break
            await asyncio.sleep(0.1)
        else:
            raise AssertionError(f"the job of {first['job_id']} never completed after its consumer was deleted")
        later = await c.call("resources.add", {"content": "# Other\n\nThe backup runs at noon.", "name": "backup.md",
                                               "wait": True}, timeout_s=30)
        assert later["status"] == "done"
    finally:
        stub.close()
