"""nats-py imported without aiohttp (runtime/natsload.py): a Skald process starts without it, and a
`ws://` server is still reached, by Skald's client and by nats-py used directly beside it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from skald.runtime.bus.natsserver import EmbeddedNats
from support.cluster import free_port

PROBE = """
import asyncio, sys
import skald.runtime.client
from skald.runtime.client.api import SkaldClient
print("after import", "aiohttp" in sys.modules)
import nats

async def echo(m):
    await m.respond(m.data)

async def main(url):
    nc = await nats.connect(url)  # nats-py directly, as another library of the process would
    sub = await nc.subscribe("probe.echo", cb=echo)
    print("reply", (await nc.request("probe.echo", b"over websocket", timeout=5)).data.decode())
    async with await SkaldClient.connect(url, prefix="probe") as c:  # Skald's own client over ws://
        print("client", type(c).__name__)
    await sub.unsubscribe()
    await nc.close()
    print("after ws", "aiohttp" in sys.modules)

asyncio.run(main(sys.argv[1]))
"""


def test_a_process_starts_without_aiohttp_and_still_reaches_a_websocket_server(tmp_path: Path) -> None:
    ws = free_port()
    srv = EmbeddedNats(tmp_path / "nats", port=-1, extra=f"websocket {{\n  port: {ws}\n  no_tls: true\n}}")
    srv.start()
    try:
        out = subprocess.run([sys.executable, "-c", PROBE, f"ws://127.0.0.1:{ws}"], capture_output=True, text=True,
                             timeout=60)
    finally:
        srv.stop()
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[:4] == ["after import False", "reply over websocket", "client SkaldClient",
                                          "after ws True"], out.stdout
