"""`skald store reshard`: an index of one shard moved to two (and back) with its workers stopped;
each shard's replica then holds its rows alone (the stored rows, vectors and all, republished: no
ingest job runs), a search spanning both finds what the one index found, and a second run moves
nothing."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest

from skald.runtime.bus.streams import stream_name
from skald.runtime.host.reshard import reshard, target
from skald.store.index.shards import shard_of
from support.replaying import settle

PREFIX = "reshardt"


def test_a_rows_subject_under_a_shard_count() -> None:
    from skald.messages.index import IndexChange, IndexDelete

    gone = msgspec.msgpack.encode(IndexChange(delete=IndexDelete(account="a", uri="viking://resources/p/x.md",
                                                                 level=2)))
    k = shard_of("a", "viking://resources/p/x.md", 3)
    assert target("p", "abc", gone, 3) == f"p.index.row.s{k}.abc"  # a delete moves with its row
    assert target("p", f"s{k}.abc", gone, 1) == "p.index.row.abc"
    assert target("p", f"s{k}.abc", gone, 3) == f"p.index.row.s{k}.abc"


async def found(c: Any, query: str) -> list[tuple[str, float]]:
    r = await c.call("search.find", {"query": query, "target_uri": "viking://resources", "limit": 50})
    return sorted((h["uri"], h["score"]) for h in r["resources"])


async def subjects_of(js: Any) -> list[str]:
    info = await js.stream_info(stream_name(PREFIX, "index"), subjects_filter=f"{PREFIX}.index.row.>")
    return sorted(info.state.subjects or {})


async def test_one_shard_to_two_and_back(deploy: Callable[..., Any], nats_url: str, tmp_path: Path) -> None:
    w, c = await deploy(prefix=PREFIX, snapshot_interval_s=0.2)
    for i in range(8):
        await c.write(f"viking://resources/proj{i}/notes.md", f"# Notes {i}\n\nThe caddy proxy of project {i} "
                                                             f"listens on port {8000 + i}.")
    await c.write("viking://resources/proj3/gone.md", "Removed later: its delete is a row too.")
    await c.call("fs.rm", {"uri": "viking://resources/proj3/gone.md"})
    await settle(c)
    for _ in range(200):  # the one index's replica snapshot, holding every row
        r = (await c.health()).actors["retriever"]
        if r["snapshot_seq"] >= r["applied_seq"] > 0:
            break
        await asyncio.sleep(0.05)
    one = await found(c, "caddy proxy port")
    assert len({u for u, _ in one}) >= 8
    js = c.nc.jetstream()
    before = await subjects_of(js)
    held = w.host.actors["retriever"].index.stats()["rows"]
    await w.stop()

    rep = await reshard(js, PREFIX, 2)
    assert (rep.rows, rep.moved, rep.kept) == (len(before), len(before), 0)
    after = await subjects_of(js)
    assert len(after) == len(before) and all(".row.s0." in s or ".row.s1." in s for s in after)
    again = await reshard(js, PREFIX, 2)  # a second run (or one after an interruption) moves nothing more
    assert (again.moved, again.kept) == (0, len(before))

    data = tmp_path / "two"
    w0, c0 = await deploy(prefix=PREFIX, data_dir=data, index_shards=2, index_shard=0)
    w1, _ = await deploy(prefix=PREFIX, data_dir=data, index_shards=2, index_shard=1, actors=("retriever",))
    await settle(c0)
    rows = [w0.host.actors["retriever"].index.stats()["rows"], w1.host.actors["retriever"].index.stats()["rows"]]
    assert all(rows) and sum(rows) == held  # split between them, each row on one shard
    assert await found(c0, "caddy proxy port") == one
    await w0.stop()
    await w1.stop()

    r = await asyncio.to_thread(subprocess.run, [str(Path(sys.executable).parent / "skald"), "store", "reshard",
                                                 "--shards", "1", "--nats-url", nats_url, "--prefix", PREFIX],
                                capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert msgspec.json.decode(r.stdout.splitlines()[-1])["moved"] == len(before)
    assert await subjects_of(js) == before
    # On the first worker's disk: its replica's snapshot of the one index, taken before both
    # reshards, is followed from where it stood, and every moved row comes after it.
    assert any(w.cfg.data_dir.glob(".skald/index/replica-*/meta.json"))
    w2, c2 = await deploy(prefix=PREFIX, data_dir=w.cfg.data_dir)
    await settle(c2)
    assert await found(c2, "caddy proxy port") == one
    assert w2.host.actors["retriever"].index.stats()["rows"] == held


@pytest.mark.parametrize("fault", ["reshard.window", "reshard.published"])
async def test_a_reshard_killed_part_way_is_finished_by_running_it_again(nats_url: str, fault: str) -> None:
    """SIGKILLed after its first window of publishes (rows under both subjects, the rest under the
    old one only) or after every publish (no old subject purged), the command run again leaves each
    row once, under its new subject, with the bytes it had."""
    import nats

    from skald.messages import subjects as subj
    from skald.messages.index import IndexChange, IndexRow
    from skald.runtime.bus.streams import ensure_streams
    from skald.store.index.types import row_subject_token

    prefix = f"rsk{len(fault)}"
    nc = await nats.connect(nats_url)
    js = nc.jetstream()
    await ensure_streams(js, prefix)
    rows: dict[str, tuple[str, bytes]] = {}
    for i in range(600):
        uri = f"viking://resources/p{i % 37}/f{i}.md"
        token = row_subject_token("default", uri, 2)
        data = msgspec.msgpack.encode(IndexChange(upsert=IndexRow(account="default", uri=uri, level=2,
                                                                  parent_uri=uri.rsplit("/", 1)[0],
                                                                  context_type="resource", text=f"row {i}")))
        await js.publish(subj.index_row(prefix, token), data)
        rows[subj.index_row(prefix, token, shard_of("default", uri, 3))] = (uri, data)
    cmd = [str(Path(sys.executable).parent / "skald"), "store", "reshard", "--shards", "3", "--nats-url", nats_url,
           "--prefix", prefix]
    killed = await asyncio.to_thread(subprocess.run, cmd, capture_output=True, text=True,
                                     env={**os.environ, "SKALD_FAULT": fault})
    assert killed.returncode == -9, killed.stderr
    info = await js.stream_info(stream_name(prefix, "index"), subjects_filter=f"{prefix}.index.row.>")
    assert len(info.state.subjects or {}) > 600  # left part way: some rows under two subjects
    again = await asyncio.to_thread(subprocess.run, cmd, capture_output=True, text=True)
    assert again.returncode == 0, again.stderr
    info = await js.stream_info(stream_name(prefix, "index"), subjects_filter=f"{prefix}.index.row.>")
    assert sorted(info.state.subjects or {}) == sorted(rows)
    for subject, (_, data) in rows.items():
        assert bytes((await js.get_last_msg(stream_name(prefix, "index"), subject)).data or b"") == data
    await nc.close()
