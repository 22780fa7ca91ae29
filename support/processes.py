"""Skald as separate processes: `skald worker` / `skald up` spawned with the hashed embedder,
started when they print their ready line, killed for real (SIGKILL) by the crash tests."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Iterator
from pathlib import Path
from typing import IO, Any, TypeVar

import msgspec
import pytest
from nats.js.errors import NotFoundError

from skald.messages import errors
from skald.runtime.bus.streams import stream_name
from skald.runtime.client.api import SkaldClient

SKALD = [sys.executable, "-m", "skald.runtime.main"]
T = TypeVar("T")


def command(env: dict[str, str] | None) -> list[str]:
    """The `skald` command of the code a process runs: this tree's, or an earlier commit's put first
    on PYTHONPATH (`bench/deploy.py: code_at`), whose command module may predate `skald.runtime.main`
    (it was `skald.runtime.cli` before the runtime was laid out by role)."""
    code = Path((env or {}).get("PYTHONPATH") or "")
    if code.parts and not (code / "skald/runtime/main.py").exists() and (code / "skald/runtime/cli.py").exists():
        return [sys.executable, "-m", "skald.runtime.cli"]
    return SKALD


def _as_a_shell_starts_it() -> None:
    """In the child before it runs: SIGINT as a shell's foreground command gets it. A test run
    whose process ignores SIGINT (SIG_IGN is inherited through exec) would otherwise start every
    command deaf to the Ctrl-C the tests send it."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def spawn(args: list[str], env: dict[str, str] | None = None, *,
          stderr: int | IO[str] = subprocess.PIPE) -> subprocess.Popen[str]:
    """`skald ARGS` in its own process (hashed embedder unless `env` says otherwise)."""
    full = {**os.environ, "SKALD_EMBEDDER": "hash", **(env or {})}
    # Its own process group, so reaping also takes the nats-server a `skald up` started.
    return subprocess.Popen([*command(env), *args], stdout=subprocess.PIPE, stderr=stderr, text=True, env=full,
                            start_new_session=True, preexec_fn=_as_a_shell_starts_it)


def worker(url: str, data: Path, prefix: str, actors: str, *, ready: bool = False,
           stderr: int | IO[str] = subprocess.PIPE, env: dict[str, str] | None = None,
           **settings: str) -> subprocess.Popen[str]:
    """`skald worker --actors ACTORS` on `url`; each keyword is a `SKALD_<NAME>` setting
    (`lease_ttl_s="1"` -> SKALD_LEASE_TTL_S=1), `env` any other variable. With `ready`, returns
    once it is serving."""
    env = {"SKALD_PREFIX": prefix, "SKALD_SNAPSHOT_INTERVAL_S": "3600", **(env or {}),
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
    if not line.startswith("skald ready nats://"):
        why = ""
        if p.poll() is not None and p.stderr is not None:  # it ended: say how, from what it said last
            why = f" (exited {p.returncode}: {p.stderr.read()[-3000:]})"
        raise AssertionError(f"no ready line: {line!r}{why}")
    return line.split()[-1]


def finished(p: subprocess.Popen[str], timeout: float) -> tuple[str, str]:
    """`p.communicate(timeout)`; a client command still running then is asked for its threads'
    stacks (SIGUSR1, `cli_client.connection`) and the test fails with them and all it printed."""
    try:
        return p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.send_signal(signal.SIGUSR1)
        with contextlib.suppress(subprocess.TimeoutExpired):
            p.wait(timeout=2)
        p.kill()
        out, err = p.communicate()
        raise AssertionError(f"{p.args} did not finish within {timeout} s; it printed:\n{out}\n{err}") from None


def silence(pid: int, within_s: float = 5.0) -> None:
    """SIGSTOP `pid` (alive, not answering: a server mid-election) and return once every thread of
    it has stopped: a signal takes effect when the process next runs, so on a busy machine a
    request sent right after `kill` could still be answered. SIGCONT undoes it."""
    os.kill(pid, signal.SIGSTOP)
    deadline = time.monotonic() + within_s
    tasks = Path(f"/proc/{pid}/task")
    while time.monotonic() < deadline:
        states = []
        for t in tasks.iterdir():
            with contextlib.suppress(FileNotFoundError):  # a thread that ended meanwhile
                states.append((t / "stat").read_text().rpartition(")")[2].split()[0])
        if states and all(st in ("T", "t") for st in states):
            return
        time.sleep(0.005)
    raise AssertionError(f"process {pid} did not stop within {within_s} s")


async def unless_dead(p: subprocess.Popen[str], work: Awaitable[T], grace_s: float = 0.25) -> T | None:
    """`work`'s result, or None once `p` has died and `grace_s` has passed without it. A reply the
    process sent before it died reaches the client within the grace (it is in the kernel's and the
    server's hands by then: under a millisecond on loopback), and none comes after: a request a
    crash test's worker dies under need not wait out the client's whole timeout (2-3 s a kill, a
    minute and more of CI's time). A None is what a timeout gives: applied or not, the caller
    cannot know, so a reply that came later still would only make a check count less as
    acknowledged, never fail it."""
    task = asyncio.ensure_future(work)
    while not task.done():
        if p.poll() is not None:
            await asyncio.wait({task}, timeout=grace_s)
            if not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
                return None
            break
        await asyncio.wait({task}, timeout=0.02)
    return task.result()


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


async def worker_ids(c: SkaldClient, actor: str, want: int) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    for _ in range(400):
        try:
            h = await c.call("system.health", timeout_s=1.0)
        except (errors.DeadlineExceeded, errors.Unavailable):
            continue
        if actor in h["actors"]:
            seen[h["worker"]["worker_id"]] = h
        if len(seen) >= want:
            break
    return seen


async def converged_replicas(c: SkaldClient, want: int) -> dict[str, Any]:
    """The retriever health of `want` live replicas once they agree (same content hash, no lag), or
    after 20 s, whatever they say then."""
    alive = await worker_ids(c, "retriever", want)
    assert len(alive) == want
    hashes: dict[str, Any] = {}
    for _ in range(100):
        hashes = {wid: (await direct_health(c, wid))["actors"]["retriever"] for wid in alive}
        if len({h["content_hash"] for h in hashes.values()}) == 1 and all(h["lag"] == 0 for h in hashes.values()):
            break
        await asyncio.sleep(0.2)
    return hashes


async def direct_health(c: SkaldClient, worker_id: str) -> dict[str, Any]:
    msg = await c.nc.request(f"{c.prefix}.direct.{worker_id}.system.health", b"{}", timeout=5)
    return msgspec.json.decode(msg.data)["result"]  # type: ignore[no-any-return]


async def journal_counts(nc: Any, prefix: str) -> dict[tuple[str, str], int]:
    """(session id, message id) -> how many `messages_added` events carry it, read from the stream."""
    js = nc.jetstream(timeout=5.0)
    counts: dict[tuple[str, str], int] = {}
    seq = 1
    while True:
        try:
            msg = await js.get_msg(stream_name(prefix, "events"), seq=seq, subject=f"{prefix}.evt.session.>", next=True)
        except NotFoundError:
            return counts
        if ".messages_added" in (msg.subject or ""):
            for e in json.loads(msg.data or b"{}")["entries"]:
                k = (e["session_id"], e["message"]["id"])
                counts[k] = counts.get(k, 0) + 1
        seq = (msg.seq or seq) + 1
