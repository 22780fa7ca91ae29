"""The embedded nats-server cannot wedge itself: its log goes to a rotating file under the data
directory, never to a pipe nobody reads, so a flood of bad connections (each one a log line)
leaves it serving, without sockets stuck in CLOSE-WAIT, and it still stops on SIGTERM. One
outlives an owner killed alone only until the directory's next owner starts."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

from skald.runtime.bus import natsserver
from skald.runtime.client.api import SkaldClient
from skald.runtime.host.worker import Worker
from support.processes import reap, spawn, wait_ready
from tests.conftest import make_config

CLOSE_WAIT = "08"


def close_wait_sockets(port: int) -> int:
    """Sockets on `port` in CLOSE-WAIT, from /proc/net/tcp (the server side of a dropped client)."""
    n = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except FileNotFoundError:
            continue
        for ln in lines:
            f = ln.split()
            if int(f[1].rsplit(":", 1)[1], 16) == port and f[3] == CLOSE_WAIT:
                n += 1
    return n


def bad_connections(port: int, n: int) -> None:
    for _ in range(n):
        with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
            s.sendall(b"NOT A NATS CLIENT\r\n")


async def test_a_flood_of_bad_connections_does_not_wedge_the_embedded_server(tmp_path: Path) -> None:
    cfg = make_config("", tmp_path / "data", nats_port=-1)
    cfg.nats_url = ""
    w = Worker(cfg, embedded=True)
    await w.start()
    port = int(w.url.rsplit(":", 1)[1])
    try:
        await asyncio.to_thread(bad_connections, port, 1_200)
        async with await SkaldClient.connect(w.url, prefix=cfg.prefix) as c:
            assert (await c.health()).status == "ok"
            await c.write("viking://resources/still.md", "still serving")
            assert (await c.read("viking://resources/still.md")).content == "still serving"
        await asyncio.sleep(0.5)
        assert close_wait_sockets(port) == 0
        log = tmp_path / "data" / "nats" / "nats-server.log"
        assert log.stat().st_size > 0  # the lines went to the file
    finally:
        server = w.server
        await w.stop()
    assert server is not None and server.proc is not None and server.proc.returncode != -9  # no SIGKILL needed


async def test_one_owner_per_data_directory_and_a_killed_owner_leaves_no_stale_lock(
        tmp_path: Path, procs: list, nats_url: str) -> None:
    """A second `skald up` on the same directory refuses with one line naming the holder; a
    `skald worker` on another bus may not use it either (one on the owner's own bus may: more
    retrievers for it); after SIGKILL the directory is free again."""
    data = tmp_path / "d"
    first = spawn(["up", "--data-dir", str(data), "--nats-port", "-1"])
    procs.append(first)
    url = wait_ready(first)
    second = spawn(["up", "--data-dir", str(data), "--nats-port", "-1"])
    out, err = second.communicate(timeout=60)
    assert second.returncode != 0 and "in use by pid" in err and "skald up" in err
    assert len(err.strip().splitlines()) == 1, err  # one line, no traceback
    stranger = spawn(["worker", "--nats-url", nats_url, "--data-dir", str(data), "--actors", "retriever"])
    _, err = stranger.communicate(timeout=60)
    assert stranger.returncode != 0 and f"pid {first.pid}" in err and url in err
    helper = spawn(["worker", "--nats-url", url, "--data-dir", str(data), "--actors", "retriever"])
    procs.append(helper)
    wait_ready(helper)
    reap([first])  # SIGKILL, and its nats-server with it
    again = spawn(["up", "--data-dir", str(data), "--nats-port", "-1"])
    procs.append(again)
    url = wait_ready(again)
    async with await SkaldClient.connect(url) as c:
        assert (await c.health()).status == "ok"


async def test_workers_share_a_data_directory(tmp_path: Path, nats_url: str) -> None:
    """Separate worker processes of one deployment share the directory (the Procfile layout)."""
    a = Worker(make_config(nats_url, tmp_path / "d", prefix="sharedir"), embedded=False)
    b = Worker(make_config(nats_url, tmp_path / "d", prefix="sharedir"), embedded=False)
    await a.start()
    try:
        await b.start()
        await b.stop()
    finally:
        await a.stop()


def test_port_in_use_and_unreachable_server_are_one_line_each(tmp_path: Path) -> None:
    """`skald up` on a taken port: one line naming the port, exit 7. A client command against a
    server that is not there: one line with the hint, exit 6, within its --timeout."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        p = spawn(["up", "--data-dir", str(tmp_path / "d"), "--nats-port", str(port)])
        _, err = p.communicate(timeout=60)
    assert p.returncode == 7 and len(err.strip().splitlines()) == 1
    assert "address already in use" in err and str(port) in err
    c = spawn(["find", "anything", "--nats-url", f"nats://127.0.0.1:{port}", "--timeout", "2"])
    _, err = c.communicate(timeout=60)
    assert c.returncode == 6 and len(err.strip().splitlines()) == 1 and "is `skald up` running?" in err


async def test_the_embedded_servers_monitoring_port_can_be_turned_on(tmp_path: Path) -> None:
    import httpx

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cfg = make_config("", tmp_path / "data", nats_port=-1, nats_monitor_port=port)
    cfg.nats_url = ""
    w = Worker(cfg, embedded=True)
    await w.start()
    try:
        async with httpx.AsyncClient() as http:
            varz = (await http.get(f"http://127.0.0.1:{port}/varz")).json()
        assert varz["jetstream"]["config"]["store_dir"].startswith(str(tmp_path))
    finally:
        await w.stop()


async def test_a_server_left_running_by_a_killed_owner_is_stopped_by_the_next(tmp_path: Path, procs: list) -> None:
    """`skald up` killed alone (the OOM killer's way, not its process group) leaves its nats-server
    running on the directory's JetStream store; the next `skald up` on the directory stops it
    before starting its own (two servers on one store would both write it), and what was written
    before is there."""
    data = tmp_path / "d"
    first = spawn(["up", "--data-dir", str(data), "--nats-port", "-1"])
    procs.append(first)
    async with await SkaldClient.connect(wait_ready(first)) as c:
        await c.write("viking://resources/notes/kept.md", "# Kept\n\nwritten before the owner died\n")
    (orphan,) = [int(p.stem.rpartition("_")[2]) for p in (data / "nats" / "ports").glob("nats-server_*.ports")]
    store = str(data / "nats" / "js")
    first.kill()  # the owner alone: its server is not in the signal's way
    first.wait()
    assert natsserver._serves(orphan, store)  # still running, with no owner
    again = spawn(["up", "--data-dir", str(data), "--nats-port", "-1"])
    procs.append(again)
    url = wait_ready(again)
    assert not natsserver._serves(orphan, store)
    async with await SkaldClient.connect(url) as c:
        assert "written before the owner died" in (await c.read("viking://resources/notes/kept.md")).content
