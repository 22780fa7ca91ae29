"""Many keys read from a stream's leader at once (`runtime/bus/leader_reads.py`): JetStream's
refusals raised as nats-py raises them, so the tree's callers still see the port's
`StoreUnavailable`. (The same answer, key by key, as nats-py's `get_msg`: in test_tree_jetstream.py.)"""

from __future__ import annotations

import json

import nats
import pytest
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeout
from nats.js.errors import ServiceUnavailableError

from skald.runtime.bus import leader_reads
from skald.runtime.bus.natsserver import EmbeddedNats


def test_headers_are_read_as_nats_writes_them() -> None:
    block = b"NATS/1.0\r\nSkald-Size: 12\r\nKV-Operation: DEL\r\nSkald-Size: 13\r\n\r\n"
    assert leader_reads.headers_of(block) == {"Skald-Size": "13", "KV-Operation": "DEL"}
    assert leader_reads.headers_of(b"NATS/1.0\r\n\r\n") == {}


def test_times_are_cut_to_microseconds_as_nats_py_cuts_them() -> None:
    assert leader_reads.seconds("1970-01-01T00:00:01.123456789Z") == 1.123456
    assert leader_reads.seconds("1970-01-01T00:00:02Z") == 2.0
    assert leader_reads.seconds("1970-01-01T00:00:02.5Z") == 2.5


async def test_a_refusal_or_silence_is_raised_as_nats_py_raises_it(nats_server: EmbeddedNats) -> None:
    """A stream without a leader answers 503 (nats-py: `ServiceUnavailableError`, transient for
    the tree); no answer within the timeout is nats-py's timeout; "no message" is None. Answered
    here by a subscriber on an API prefix of its own (JetStream answers its own prefix first), over
    the real server."""
    nc = await nats.connect(nats_server.url)
    try:
        async def answer(msg: nats.aio.msg.Msg) -> None:
            asked = json.loads(msg.data)["last_by_subj"]
            if asked == "silent":
                return
            code = 503 if asked == "busy" else 404
            await msg.respond(json.dumps({"type": "io.nats.jetstream.api.v1.stream_msg_get_response",
                                          "error": {"code": code, "err_code": 10008, "description": "no"}}).encode())

        await nc.subscribe("FAKE.API.STREAM.MSG.GET.S", cb=answer)
        await nc.flush()
        assert await leader_reads.last_messages(nc, "FAKE.API", "S", ["a", "b"], 2.0) == [None, None]
        with pytest.raises(ServiceUnavailableError):
            await leader_reads.last_messages(nc, "FAKE.API", "S", ["a", "busy"], 2.0)
        with pytest.raises(NatsTimeout):
            await leader_reads.last_messages(nc, "FAKE.API", "S", ["a", "silent"], 0.3)
        with pytest.raises(NoRespondersError):  # nothing behind the subject: the server says so at once
            await leader_reads.last_messages(nc, "FAKE.API", "NOBODY", ["a"], 2.0)
    finally:
        await nc.close()
