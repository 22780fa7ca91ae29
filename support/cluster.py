"""A three-node NATS JetStream cluster on loopback, made of the nats-server the project ships:
fixed ports so a killed node comes back where its peers and clients expect it, each node its own
JetStream store. Used by the failover tests and the bus-isolation tests."""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

import nats
from nats.js.api import StorageType, StreamConfig

from skald.runtime.bus.natsserver import EmbeddedNats, ServerStartError


def free_port() -> int:
    """A free port below the kernel's ephemeral range: a killed node must get its port back when it
    restarts, and a port from the ephemeral range may meanwhile be the local end of some outgoing
    connection (the other nodes' routes among them). Each pytest-xdist worker draws from a slice
    of its own: a port is free when drawn, not for the cluster's life, and two workers' clusters
    drawing the same one left a node unable to bind its route port through all its retries."""
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    first, last = max(1025, low - 12000), low
    worker, workers = os.environ.get("PYTEST_XDIST_WORKER", ""), os.environ.get("PYTEST_XDIST_WORKER_COUNT", "")
    if worker[2:].isdigit() and workers.isdigit() and int(workers) > 1:
        width = (last - first) // int(workers)
        first += width * int(worker[2:])
        last = first + width
    rng = random.Random()
    for _ in range(1000):
        port = rng.randrange(first, last)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port below the ephemeral range")


async def started(make: Callable[[], EmbeddedNats]) -> EmbeddedNats:
    """A nats-server made and started, retrying while its port is still held by the process
    killed a moment ago (TIME_WAIT)."""
    for attempt in range(20):
        node = make()
        try:
            await asyncio.to_thread(node.start)
            return node
        except ServerStartError as e:
            if "address already in use" not in str(e) or attempt == 19:
                raise
            await asyncio.sleep(0.5)
    raise AssertionError("unreachable")


class Cluster:
    def __init__(self, base: Path, size: int = 3, auth: str | None = None, tags: list[str] | None = None) -> None:
        self.base = Path(base)
        self.tags = tags or []  # JetStream placement tags every node carries
        self.ports = [free_port() for _ in range(size)]
        self.cports = [free_port() for _ in range(size)]
        self.auth = auth
        self.nodes: list[EmbeddedNats] = [self._node(i) for i in range(size)]

    def _node(self, i: int) -> EmbeddedNats:
        routes = [f"nats://127.0.0.1:{p}" for j, p in enumerate(self.cports) if j != i]
        extra = (f'server_name: "n{i}"\ncluster {{\n  name: "skald-test"\n  listen: "127.0.0.1:{self.cports[i]}"\n'
                 f"  routes: {json.dumps(routes)}\n}}\n")
        if self.tags:
            extra += f"server_tags: {json.dumps(self.tags)}\n"
        return EmbeddedNats(self.base / f"n{i}", port=self.ports[i], auth=self.auth, extra=extra)

    @property
    def urls(self) -> list[str]:
        return [f"nats://127.0.0.1:{p}" for p in self.ports]

    @property
    def url(self) -> str:
        return ",".join(self.urls)

    async def start(self, *which: int) -> None:
        for i in which or range(len(self.nodes)):
            self.nodes[i] = await started(lambda i=i: self._node(i))

    def kill(self, i: int) -> None:
        """SIGKILL: no goodbye to the peers, as when a host dies."""
        proc = self.nodes[i].proc
        if proc is not None and proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()

    def stop(self) -> None:
        for n in self.nodes:
            n.stop()

    def index_of(self, server_name: str) -> int:
        return int(server_name.lstrip("n"))

    async def ready(self, timeout_s: float = 30.0, **connect: Any) -> None:
        """Until JetStream answers (the meta leader is elected) and the meta leader knows every
        running node: a probe stream on all of them is created (then deleted). Right after an
        election, under load, the leader may not have heard from every peer yet, and a stream
        placed on them is refused ("no suitable peers for placement"), which a test would take
        for its own failure."""
        running = sum(1 for n in self.nodes if n.proc is not None and n.proc.poll() is None)
        probe = StreamConfig(name="READY_PROBE", subjects=["_ready_probe"], num_replicas=max(1, running),
                             storage=StorageType.MEMORY)
        nc = await nats.connect(self.urls, **connect)
        try:
            js = nc.jetstream(timeout=2.0)
            for _ in range(int(timeout_s / 0.25)):
                try:
                    await js.account_info()
                    await js.add_stream(probe)
                    await js.delete_stream(probe.name)
                    return
                except Exception:  # noqa: BLE001 - the meta leader is still being elected, or hearing from its peers
                    await asyncio.sleep(0.25)
            raise AssertionError("JetStream never became ready")
        finally:
            await nc.close()
