"""The three-host reference (`deploy/cluster/`) booted from exactly its files on one machine: the
nats-server configs, the unit files' command lines and `cluster.env`, with each host's addresses set
to 127.0.0.1 and its paths to a temporary disk of its own. Keys on (made as the README says). A
host is then SIGKILLed with its disk wiped under writes and messages, and brought back empty."""

from __future__ import annotations

import asyncio
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from skald.messages import errors
from skald.runtime.bus.natsserver import server_binary
from skald.runtime.client.api import SkaldClient
from support.processes import reap, wait_ready

DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "cluster"
SKALD = str(Path(sys.executable).parent / "skald")
PORTS = (4222, 4223, 4224, 6222, 6223, 6224, 8222, 8223, 8224)


def env_file(path: Path) -> dict[str, str]:
    """A systemd EnvironmentFile: KEY=VALUE lines, comments skipped."""
    out = {}
    for line in path.read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            k, _, v = line.partition("=")
            out[k.strip()] = v.strip()
    return out


def exec_start(unit: Path, instance: str = "") -> list[str]:
    """A unit's ExecStart, its %i filled, its binary this machine's."""
    line = next(x for x in unit.read_text().splitlines() if x.startswith("ExecStart="))
    args = shlex.split(line.removeprefix("ExecStart=").replace("%i", instance))
    binary = {"nats-server": server_binary(), "skald": SKALD}[Path(args[0]).name]
    return [binary, *args[1:]]


def ports_free() -> bool:
    for port in PORTS:
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the server's listener does
            try:
                s.bind(("0.0.0.0", port))
            except OSError:
                return False
    return True


class Host:
    """One host of the reference: its disk (a directory), its nats-server, its worker."""

    def __init__(self, n: int, base: Path, etc: Path, cluster_env: dict[str, str]) -> None:
        self.n = n
        self.disk = base / f"host{n}"
        self.etc = etc
        # The deployment's env file as an operator fills it for these hosts: every address 127.0.0.1,
        # every path on this host's own disk.
        self.env = {**os.environ, **{k: re.sub(r"10\.0\.0\.\d", "127.0.0.1", v) for k, v in cluster_env.items()},
                    "SKALD_NATS_STORE": str(self.disk / "nats"), "SKALD_DATA_DIR": str(self.disk / "data"),
                    "SKALD_KEYS_FILE": str(etc / "keys.json"), "SKALD_EMBEDDER": "hash",
                    "SKALD_LEASE_TTL_S": "2", "SKALD_WORK_ACK_WAIT_S": "3", "SKALD_PREFIX": "skald"}
        self.server: subprocess.Popen[str] | None = None
        self.worker: subprocess.Popen[str] | None = None

    def start_server(self) -> None:
        cmd = exec_start(DEPLOY / "skald-nats@.service", str(self.n))
        cmd = [c.replace("/etc/skald", str(self.etc)) for c in cmd]
        self.disk.mkdir(parents=True, exist_ok=True)
        log = open(self.disk / "nats.log", "a")  # noqa: SIM115 - the child's for its life
        self.server = subprocess.Popen(cmd, env=self.env, stdout=log, stderr=log, text=True, start_new_session=True)

    def start_worker(self) -> None:
        log = open(self.disk.parent / f"worker{self.n}.log", "a")  # noqa: SIM115 - the child's; off the disk a kill wipes
        self.worker = subprocess.Popen(exec_start(DEPLOY / "skald-worker.service"), env=self.env,
                                       stdout=subprocess.PIPE, stderr=log, text=True, start_new_session=True)

    async def serving(self, timeout_s: float = 90.0) -> None:
        """The worker's ready line. A worker that gives up first (a cluster still electing its
        JetStream leader past its minute of retries, as on a loaded machine) is started again
        after the unit's RestartSec, as its `Restart=always` has systemd do."""
        unit = (DEPLOY / "skald-worker.service").read_text()
        assert "Restart=always" in unit
        pause = float(next(x for x in unit.splitlines() if x.startswith("RestartSec=")).partition("=")[2])
        deadline = time.monotonic() + timeout_s
        while True:
            assert self.worker is not None
            try:
                await asyncio.to_thread(wait_ready, self.worker, max(1.0, deadline - time.monotonic()))
                return
            except AssertionError:
                try:
                    self.worker.wait(timeout=5)  # ended: restarted below; still running: no ready line in time
                except subprocess.TimeoutExpired:
                    raise AssertionError(f"worker {self.n}: no ready line in {timeout_s:.0f} s") from None
                if time.monotonic() + pause >= deadline:
                    log = (self.disk.parent / f"worker{self.n}.log").read_text()[-3000:]
                    raise AssertionError(f"worker {self.n} kept exiting before it was ready: {log}") from None
            await asyncio.sleep(pause)
            self.start_worker()

    def kill(self) -> None:
        reap([p for p in (self.worker, self.server) if p is not None])
        shutil.rmtree(self.disk)


async def test_the_reference_deployment_boots_from_its_files_and_survives_a_lost_host(tmp_path: Path) -> None:
    if not ports_free():
        pytest.fail(f"the reference deployment's ports {PORTS} are taken on this machine")
    etc = tmp_path / "etc"
    shutil.copytree(DEPLOY, etc)
    keys = subprocess.run([SKALD, "keys", "create", "--file", str(etc / "keys.json"), "--role", "root"],
                          capture_output=True, text=True, check=True)
    root = keys.stdout.strip().split()[-1]
    auth = subprocess.run([SKALD, "keys", "nats-config", "--file", str(etc / "keys.json")],
                          capture_output=True, text=True, check=True).stdout
    (etc / "auth.conf").write_text(auth)
    cluster_env = env_file(etc / "cluster.env")
    hosts = [Host(n, tmp_path, etc, cluster_env) for n in (1, 2, 3)]
    try:
        for h in hosts:
            h.start_server()
        for h in hosts:
            h.start_worker()
        for h in hosts:
            await h.serving()
        urls = hosts[0].env["SKALD_NATS_URL"].split(",")
        async with await SkaldClient.connect(urls, api_key=root) as c:
            for i in range(5):
                await c.write(f"viking://resources/ops/r{i}.md", f"# Runbook {i}\n\nRestart service {i}.\n")
                await c.call("sessions.add_message", {"session_id": "ops", "role": "user", "id": f"m{i}",
                                                      "parts": [{"type": "text", "text": f"step {i} done"}]})
            hosts[0].kill()  # host 1 with its disk: its server's store and its worker's data directory
            acked: list[int] = []
            for i in range(5, 25):
                for _ in range(100):
                    try:
                        text = [{"type": "text", "text": f"step {i} done"}]  # retried with its id: stored once
                        await c.call("sessions.add_message", {"session_id": "ops", "role": "user", "id": f"m{i}",
                                                              "parts": text}, timeout_s=3.0)
                        await c.call("fs.write", {"uri": f"viking://resources/ops/r{i}.md",
                                                  "content": f"# Runbook {i}\n\nRestart service {i}.\n"}, timeout_s=3.0)
                        acked.append(i)
                        break
                    except (errors.Unavailable, errors.DeadlineExceeded):
                        await asyncio.sleep(0.3)  # a leader being elected
            assert acked == list(range(5, 25))
            hosts[0].start_server()  # back on an empty disk
            hosts[0].start_worker()
            await hosts[0].serving()
            ctx = await c.session_context("ops")
            texts = [m.parts[0].text for m in ctx.messages]  # type: ignore[union-attr]
            assert texts == [f"step {i} done" for i in range(25)]  # each once, in order
            names = [e.name for e in (await c.ls("viking://resources/ops")).entries]
            assert names == sorted(f"r{i}.md" for i in range(25))
            assert "Restart service 24" in (await c.read("viking://resources/ops/r24.md")).content
    finally:
        for h in hosts:
            reap([p for p in (h.worker, h.server) if p is not None])
