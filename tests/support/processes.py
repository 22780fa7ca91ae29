"""Skald as separate processes: `skald worker` / `skald up` spawned with the hashed embedder,
started when they print their ready line, killed for real (SIGKILL) by the crash tests."""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import pytest

SKALD = [sys.executable, "-m", "skald.runtime.cli"]


def spawn(args: list[str], env: dict[str, str] | None = None, *,
          stderr: int | IO[str] = subprocess.PIPE) -> subprocess.Popen[str]:
    """`skald ARGS` in its own process (hashed embedder unless `env` says otherwise)."""
    full = {**os.environ, "SKALD_EMBEDDER": "hash", **(env or {})}
    # Its own process group, so reaping also takes the nats-server a `skald up` started.
    return subprocess.Popen([*SKALD, *args], stdout=subprocess.PIPE, stderr=stderr, text=True, env=full,
                            start_new_session=True)


def worker(url: str, data: Path, prefix: str, actors: str, *, ready: bool = False,
           stderr: int | IO[str] = subprocess.PIPE, **settings: str) -> subprocess.Popen[str]:
    """`skald worker --actors ACTORS` on `url`; each keyword is a `SKALD_<NAME>` setting
    (`lease_ttl_s="1"` -> SKALD_LEASE_TTL_S=1). With `ready`, returns once it is serving."""
    env = {"SKALD_PREFIX": prefix, "SKALD_SNAPSHOT_INTERVAL_S": "3600",
           **{f"SKALD_{k.upper()}": v for k, v in settings.items()}}
    p = spawn(["worker", "--nats-url", url, "--data-dir", str(data), "--actors", actors], env, stderr=stderr)
    if ready:
        wait_ready(p)
    return p


def wait_ready(p: subprocess.Popen[str], timeout: float = 30.0) -> str:
    """The URL from the process's `skald ready nats://...` line."""
    assert p.stdout is not None
    got, _, _ = select.select([p.stdout], [], [], timeout)
    assert got, "no ready line"
    line = p.stdout.readline().strip()
    assert line.startswith("skald ready nats://"), line
    return line.split()[-1]


def reap(ps: list[subprocess.Popen[str]]) -> None:
    """Kill each process and its group (an embedded nats-server included), then wait for it."""
    for p in ps:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(p.pid, signal.SIGKILL)
        if p.poll() is None:
            p.kill()
        p.wait()
        for f in (p.stdout, p.stderr):
            if f:
                f.close()


@pytest.fixture
def procs() -> Iterator[list[subprocess.Popen[str]]]:
    """Processes a test starts; every one is killed and reaped when it ends, pass or fail."""
    ps: list[subprocess.Popen[str]] = []
    yield ps
    reap(ps)
