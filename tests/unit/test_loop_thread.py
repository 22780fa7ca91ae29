"""The private event loop on a thread that the JetStream tree and the blocking client run on."""

from __future__ import annotations

import asyncio
import threading

import pytest

from skald.runtime.client.loop_thread import LoopClosed, LoopThread


def test_closing_ends_the_calls_in_flight_and_refuses_the_next() -> None:
    """A call another thread is waiting on when the loop closes ends with LoopClosed (it does not
    wait out its timeout on a stopped loop), no task is left pending on the loop, and a call after
    the close is refused at once."""
    lt = LoopThread("test-loop")
    assert lt.run(asyncio.sleep(0, result=7)) == 7
    started, ended = threading.Event(), []

    async def forever() -> None:
        started.set()
        await asyncio.sleep(3600)

    def caller() -> None:
        try:
            lt.run(forever(), timeout_s=3600)
        except LoopClosed as e:
            ended.append(e)

    th = threading.Thread(target=caller)
    th.start()
    assert started.wait(10)
    lt.close()
    th.join(10)
    assert not th.is_alive() and len(ended) == 1
    assert not asyncio.all_tasks(lt.loop) and not lt.loop.is_running()

    async def never() -> None:
        raise AssertionError("not run")

    with pytest.raises(LoopClosed):
        lt.run(never())
