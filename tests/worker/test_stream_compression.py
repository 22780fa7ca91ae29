"""The index and event streams are stored S2-compressed on a real server, and a stream an older
worker created plain is switched by the next start's declaration, its messages kept and read back."""

from __future__ import annotations

import dataclasses
import uuid

import nats
from nats.js import api

from skald.runtime.bus.streams import ensure_streams, stream_configs, stream_name


async def test_log_streams_are_compressed_and_an_older_plain_stream_is_switched(nats_url: str) -> None:
    prefix = f"s2{uuid.uuid4().hex[:8]}"
    nc = await nats.connect(nats_url)
    js = nc.jetstream(timeout=10.0)
    try:
        for cfg in stream_configs(prefix, 1):  # as a worker from before declared them: plain
            await js.add_stream(config=dataclasses.replace(cfg, compression=None))
        body = b"a section's text, written in full on the index stream " * 40
        for i in range(300):
            await js.publish(f"{prefix}.index.row.r{i}", body + str(i).encode())
        await ensure_streams(js, prefix)
        for kind in ("index", "events"):
            info = await js.stream_info(stream_name(prefix, kind))
            assert info.config.compression == api.StoreCompression.S2, kind
        info = await js.stream_info(stream_name(prefix, "index"))
        assert info.state.messages == 300
        for i in (0, 150, 299):
            got = await js.get_msg(stream_name(prefix, "index"), subject=f"{prefix}.index.row.r{i}")
            assert got.data == body + str(i).encode()
        work = await js.stream_info(stream_name(prefix, "work"))
        assert work.config.compression in (None, api.StoreCompression.NONE)  # a queue, not a log
    finally:
        for kind in ("work", "index", "usage", "events"):
            await js.delete_stream(stream_name(prefix, kind))
        await nc.close()
