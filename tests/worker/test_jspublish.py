"""The acked JetStream publish answers as nats-py's `js.publish` does, on a real server: the
stream's sequence, duplicates by `Nats-Msg-Id`, and the same typed failures."""

from __future__ import annotations

import asyncio

import nats
import pytest
from nats.js import api
from nats.js.errors import BadRequestError, NoStreamResponseError

from skald.runtime.bus.jspublish import AckedPublisher


async def test_acks_duplicates_and_failures_match_js_publish(nats_url: str) -> None:
    nc = await nats.connect(nats_url)
    js = nc.jetstream(timeout=10.0)
    try:
        await js.add_stream(api.StreamConfig(name="JSPUB", subjects=["jspub.>"]))
        pub = AckedPublisher(nc, 5.0)
        acks = await asyncio.gather(*(pub.publish(f"jspub.s{i % 7}", f"m{i}".encode(), {"Nats-Msg-Id": f"id-{i}"})
                                      for i in range(200)))
        assert sorted(a.seq for a in acks) == list(range(1, 201)) and not any(a.duplicate for a in acks)
        again = await pub.publish("jspub.s0", b"m0", {"Nats-Msg-Id": "id-0"})
        assert again.duplicate and again.seq == acks[0].seq
        assert (await js.stream_info("JSPUB")).state.messages == 200
        with pytest.raises(NoStreamResponseError):
            await pub.publish("nostream.here", b"x")
        with pytest.raises(BadRequestError) as err:  # the stream's own refusal, typed as js.publish types it
            await pub.publish("jspub.s1", b"late", {"Nats-Expected-Last-Subject-Sequence": "1"})
        assert err.value.err_code == 10071
    finally:
        await js.delete_stream("JSPUB")
        await nc.close()
