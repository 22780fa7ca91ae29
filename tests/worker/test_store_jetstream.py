"""`--store jetstream`: two workers, each with its own data directory (two hosts, no shared disk),
serve one deployment. What one wrote is read, found and continued by the other once the first is
gone with its disk; clients never reach the tree's buckets."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

import nats
import pytest
from click.testing import CliRunner

from skald.messages import errors
from skald.runtime.bus import keys as key_store
from skald.runtime.bus.tree_buckets import bucket_name
from skald.runtime.client.api import SkaldClient
from skald.runtime.client.login import client_login
from skald.runtime.host.worker import Worker
from skald.runtime.main import main
from tests.conftest import make_config


async def start(url: str, data: Path, prefix: str) -> Worker:
    w = Worker(make_config(url, data, prefix, store="jetstream"), embedded=False)
    await w.start()
    return w


async def test_what_one_host_wrote_another_serves_after_it_is_gone_with_its_disk(
        nats_url: str, tmp_path: Path) -> None:
    prefix = "sj1"
    a = await start(nats_url, tmp_path / "a", prefix)
    b: Worker | None = None
    try:
        async with await SkaldClient.connect(nats_url, prefix=prefix) as c:
            folder = tmp_path / "runbooks"
            (folder / "db").mkdir(parents=True)
            (folder / "db" / "failover.md").write_text("# Failover\n\nPromote the replica with pg_ctl promote.\n")
            (folder / "backups.md").write_text("# Backups\n\nThe backup window opens at 02:00 UTC.\n")
            r = await c.add_resource(upload=folder, wait=True)
            assert r.status == "done"
            for i in range(4):
                await c.add_message("s1", role="user", text=f"note {i}: the moulin survey starts Monday")
            assert not any((tmp_path / "a").rglob("failover.md"))  # nothing of the tree on A's disk
            await a.stop()
            shutil.rmtree(tmp_path / "a")  # host A and its disk are gone
            b = await start(nats_url, tmp_path / "b", prefix)
            read = await c.read("viking://resources/runbooks/db/failover.md")
            assert "pg_ctl promote" in read.content
            assert [e.name for e in (await c.ls("viking://resources/runbooks")).entries] == ["backups.md", "db"]
            hits = await c.find("how do I promote the replica")
            assert hits.resources[0].uri.startswith("viking://resources/runbooks/db/failover.md")
            assert (await c.grep("viking://resources", "02:00")).count == 1
            added = await c.add_message("s1", role="user", text="note 4: bring the crampons")
            assert added.total_message_count == 5  # the session A held, continued by B
            done = await c.commit("s1", keep_recent_count=1, wait=True)
            assert done.phase2 == "completed"
            ctx = await c.session_context("s1")
            assert ctx.stats.completed == 1 and [m.id for m in ctx.messages] == ["msg_00000005"]
    finally:
        if b is not None:
            await b.stop()
        if a.nc is not None and not a.nc.is_closed:
            await a.stop()


async def test_two_hosts_writing_at_once_see_each_others_writes(nats_url: str, tmp_path: Path) -> None:
    prefix = "sj2"
    a, b = await start(nats_url, tmp_path / "a", prefix), await start(nats_url, tmp_path / "b", prefix)
    try:
        async with await SkaldClient.connect(nats_url, prefix=prefix) as c:
            for i in range(12):  # requests land on either worker (one queue group)
                await c.write(f"viking://resources/notes/n{i}.md", f"# Note {i}\n\nbody {i}\n")
            names = [e.name for e in (await c.ls("viking://resources/notes")).entries]
            assert names == sorted(f"n{i}.md" for i in range(12))
            for i in range(12):
                assert (await c.read(f"viking://resources/notes/n{i}.md")).content == f"# Note {i}\n\nbody {i}\n"
            with pytest.raises(errors.Conflict):
                await c.write("viking://resources/notes/n0.md", "again", mode="create")
    finally:
        await a.stop()
        await b.stop()


@pytest.mark.slow  # its own embedded nats-server with keys
async def test_the_tree_is_the_workers_alone(tmp_path: Path) -> None:
    """`skald up --store jetstream` with keys: the tree's buckets take the worker's writes, and a
    client's bus user (even the root key's) cannot read them, publish into them or watch them."""
    path = tmp_path / "keys.json"
    root, _ = key_store.add(path, "root")
    cfg = make_config("", tmp_path / "data", keys_file=str(path), nats_port=-1, store="jetstream")
    cfg.nats_url = ""
    w = Worker(cfg, embedded=True)
    await w.start()
    seen: list[str] = []

    async def on_error(e: Exception) -> None:
        seen.append(str(e).lower())

    nc = await nats.connect(w.url, error_cb=on_error, **client_login(root))
    try:
        c = SkaldClient(nc, cfg.prefix, api_key=root)
        await c.write("viking://resources/secret.md", "the vault code is 4711")
        assert (await c.read("viking://resources/secret.md")).content == "the vault code is 4711"
        stream = f"KV_{bucket_name(f'{cfg.prefix}_tree', 'default')}"
        js = nc.jetstream(timeout=1)
        with pytest.raises(Exception):  # noqa: B017 - any refusal: the JetStream API is not the client's
            await js.get_msg(stream, subject=f"$KV.{stream[3:]}.>", direct=False)
        with pytest.raises((nats.errors.TimeoutError, nats.errors.NoRespondersError)):
            await nc.request(f"$KV.{stream[3:]}.n.accounts.default.resources.secret=2Emd", b"Fx", timeout=1)
        await nc.subscribe(f"$KV.{stream[3:]}.>")
        await nc.flush()
        await asyncio.sleep(0.3)
        assert any("permissions violation for subscription" in e for e in seen), seen
        assert (await c.read("viking://resources/secret.md")).content == "the vault code is 4711"  # unchanged
    finally:
        await nc.close()
        await w.stop()


async def test_a_local_deployment_migrates_into_jetstream_and_back(nats_url: str, tmp_path: Path) -> None:
    """`skald store migrate --to jetstream` from a stopped local deployment; a worker on an empty disk
    with --store jetstream then serves it all (the index rebuilt by reindex); `--to local` brings it
    back into a fresh data directory, byte for byte."""
    prefix = "sjm"
    local = Worker(make_config(nats_url, tmp_path / "old", prefix), embedded=False)
    await local.start()
    async with await SkaldClient.connect(nats_url, prefix=prefix) as c:
        await c.write("viking://resources/kb/glacier.md", "# Glacier\n\nMoulins drain meltwater.\n", wait=True)
        for i in range(3):
            await c.add_message("trip", role="user", text=f"day {i}: crossing the icefall")
        await c.commit("trip", keep_recent_count=1, wait=True)
    await local.stop()
    runner = CliRunner()
    env = {"SKALD_PREFIX": prefix}
    args = ["store", "migrate", "--data-dir", str(tmp_path / "old"), "--nats-url", nats_url]
    out = await asyncio.to_thread(runner.invoke, main, [*args, "--to", "jetstream"], env=env)
    assert out.exit_code == 0, out.output
    rep = json.loads(out.stdout.strip().splitlines()[-1])
    assert rep["copied"] >= 8 and rep["archives"] == 1 and rep["mismatched"] == []
    again = json.loads((await asyncio.to_thread(runner.invoke, main, [*args, "--to", "jetstream"],
                                                env=env)).stdout.strip().splitlines()[-1])
    assert again["copied"] == 0 and again["skipped"] == rep["copied"]  # resumable: nothing left to do
    swept = await asyncio.to_thread(runner.invoke, main, ["store", "sweep", "--older-than", "0", "--nats-url",
                                                          nats_url], env=env)
    assert swept.exit_code == 0, swept.output  # nothing to sweep, and nothing the worker below reads is gone
    assert json.loads(swept.stdout.strip().splitlines()[-1])["swept"] == []
    w = await start(nats_url, tmp_path / "new", prefix)
    try:
        async with await SkaldClient.connect(nats_url, prefix=prefix) as c:
            assert "Moulins" in (await c.read("viking://resources/kb/glacier.md")).content
            ctx = await c.session_context("trip")
            assert ctx.stats.completed == 1 and len(ctx.messages) == 1
            assert (await c.add_message("trip", role="user", text="day 3")).total_message_count == 4
    finally:
        await w.stop()
    back = await asyncio.to_thread(runner.invoke, main, ["store", "migrate", "--data-dir", str(tmp_path / "back"),
                                                         "--nats-url", nats_url, "--to", "local"], env=env)
    assert back.exit_code == 0, back.output
    assert json.loads(back.stdout.strip().splitlines()[-1])["copied"] >= 8, back.output
    moved = tmp_path / "back/accounts/default/resources/kb/glacier.md"
    assert moved.read_bytes() == (tmp_path / "old/accounts/default/resources/kb/glacier.md").read_bytes()
