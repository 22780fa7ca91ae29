"""Sessions over NATS: restarts on the same data directory, one writer across workers, JetStream
outages and the opt-in auto-commit (the rest of the acceptance table is `tests/logic/test_sessions.py`)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import pytest

from skald.messages import errors
from skald.runtime.bus import nats_bus
from skald.runtime.bus.streams import ensure_streams, stream_name
from skald.runtime.client.api import SkaldClient
from skald.runtime.replay import journal as replay
from support.sessions import Model, add, ids, turn


async def test_failed_phase2_raw_stays_visible_until_rolled_forward(deploy: Callable[..., Any],
                                                                    model: Model) -> None:
    model.mode = "fail"
    w, c = await deploy(llm_base_url=model.stub.url)
    await turn(c, "s", 1)
    r = await c.call("sessions.commit", {"session_id": "s", "wait": True})
    assert r["phase2"] == "failed"
    arch = (await c.call("sessions.archives", {"session_id": "s"}))["archives"][0]
    assert arch["state"] == "failed" and arch["failure"]["stage"] == "llm"
    ctx = await c.call("sessions.context", {"session_id": "s"})
    assert ids(ctx) == ["msg_00000001", "msg_00000002"] and ctx["stats"]["failed"] == 1
    model.mode = "ok"
    await turn(c, "s", 2)
    r2 = await c.call("sessions.commit", {"session_id": "s", "wait": True})
    assert r2["phase2"] == "completed"
    archives = (await c.call("sessions.archives", {"session_id": "s"}))["archives"]
    assert archives[1]["coverage"]["covered_failed_archives"] == ["archive_001"]
    assert archives[1]["coverage"]["starting_message_id"] == "msg_00000001"
    ctx = await c.call("sessions.context", {"session_id": "s"})
    assert ids(ctx) == [] and ctx["latest_archive_overview"]
    # The same state comes back from the markers alone in a fresh worker.
    cfg = w.cfg
    await w.stop()
    w2, c2 = await deploy(data_dir=cfg.data_dir, prefix=cfg.prefix, llm_base_url=model.stub.url)
    assert await c2.call("sessions.context", {"session_id": "s"}) == ctx


async def test_two_workers_one_writer_per_session(deploy: Callable[..., Any]) -> None:
    """Clients hit two session workers at random; each session keeps every message once, in each
    client's order."""
    w1, c = await deploy()
    w2, _ = await deploy(data_dir=w1.cfg.data_dir, prefix=w1.cfg.prefix)
    clients = [c.as_identity() for _ in range(6)]
    for x in clients:
        x.prefix = c.prefix

    async def writer(k: int, x: SkaldClient) -> None:
        for n in range(25):
            await add(x, f"s{n % 3}", "user", f"c{k}-{n}", id=f"c{k}-{n:03d}")

    await asyncio.gather(*(writer(k, x) for k, x in enumerate(clients)))
    forwarded = [w.host.actors["session"].added for w in (w1, w2)]  # type: ignore[union-attr]
    assert sum(forwarded) == 150
    assert sum(w.host.actors["session"].owners.forwards for w in (w1, w2)) > 0  # type: ignore[union-attr]
    for s in range(3):
        ctx = await c.call("sessions.context", {"session_id": f"s{s}"})
        got = ids(ctx)
        assert len(got) == len(set(got)) == 6 * len([n for n in range(25) if n % 3 == s])
        for k in range(6):
            mine = [i for i in got if i.startswith(f"c{k}-")]
            assert mine == sorted(mine)
    owners = {w.host.worker_id: w.host.actors["session"].owners.owned for w in (w1, w2)}  # type: ignore
    assert sum(owners.values()) == 3


async def test_counters_after_a_restart_come_from_the_archives_and_messages(deploy: Callable[..., Any]) -> None:
    """A commit does not rewrite the session's meta (one durable rename saved per commit): a new
    owner reads the counters back from what is on disk, and the listing counts archives too."""
    w, c = await deploy()
    await c.call("sessions.create", {"session_id": "n", "auto_commit": {"pending_messages": 50}})
    for k in range(3):
        await turn(c, "n", k)
        await c.call("sessions.commit", {"session_id": "n"})
    await add(c, "n", "user", "live")
    for other in ("a", "z"):  # listed around it, in name order, each counted on its own
        await add(c, other, "user", f"only {other}")
    meta = w.cfg.data_dir / "accounts" / "default" / "user" / "default" / "sessions" / "n" / ".meta.json"
    assert json.loads(meta.read_bytes())["commit_count"] == 0  # as created
    listed = (await c.call("sessions.list", {}))["sessions"]
    assert [(x["commit_count"], x["total_message_count"]) for x in listed if x["session_id"] == "n"] == [(3, 7)]
    cfg = w.cfg
    await w.stop()
    _, c2 = await deploy(data_dir=cfg.data_dir, prefix=cfg.prefix)
    listed = (await c2.call("sessions.list", {}))["sessions"]  # not loaded by the new worker yet
    assert [(x["session_id"], x["commit_count"], x["total_message_count"], x["message_count"], x["archives"])
            for x in listed] == [("a", 0, 1, 1, 0), ("n", 3, 7, 1, 3), ("z", 0, 1, 1, 0)]
    info = await c2.call("sessions.get", {"session_id": "n"})
    assert (info["commit_count"], info["total_message_count"], info["message_count"]) == (3, 7, 1)
    assert info["auto_commit"] == {"pending_messages": 50}
    r = await add(c2, "n", "assistant", "after the restart")
    assert r["message_id"] == "msg_00000008"


async def test_corrupt_session_meta_is_rebuilt_from_disk_not_reset(deploy: Callable[..., Any],
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    """A torn `.meta.json` is an explicit, logged recovery: the next owner rebuilds the counters
    from the messages and archives on disk, so message ids never restart at 1."""
    w, c = await deploy()
    await turn(c, "s", 1)
    await c.call("sessions.commit", {"session_id": "s"})
    await add(c, "s", "user", "after the commit")
    cfg = w.cfg
    await w.stop()
    meta = cfg.data_dir / "accounts" / "default" / "user" / "default" / "sessions" / "s" / ".meta.json"
    assert meta.exists()
    meta.write_bytes(b'{"total_message_count": 3, "commit_co')  # a write torn mid-way
    _, c2 = await deploy(data_dir=cfg.data_dir, prefix=cfg.prefix)
    with caplog.at_level("WARNING", logger="skald.session"):
        info = await c2.call("sessions.get", {"session_id": "s"})
    assert info["total_message_count"] == 3 and info["commit_count"] == 1
    assert any("corrupt" in r.getMessage() and "rebuilt" in r.getMessage() for r in caplog.records)
    assert json.loads(meta.read_bytes())["total_message_count"] == 3  # repaired on disk
    r = await add(c2, "s", "user", "one more")
    assert r["message_id"] == "msg_00000004" and not r.get("duplicate")


async def test_a_session_whose_meta_was_lost_is_rebuilt_with_its_counters(deploy: Callable[..., Any],
                                                                         caplog: pytest.LogCaptureFixture) -> None:
    """A session created by its first message writes `.meta.json` without fsync (the message's
    group commit follows): a power cut may lose that file, never the messages. Deleting it stands
    for that: the next owner rebuilds it (logged) and ids go on from where they were."""
    w, c = await deploy()
    for k in range(3):
        await add(c, "lazy", "user", f"message {k}")
    cfg = w.cfg
    await w.stop()
    meta = cfg.data_dir / "accounts" / "default" / "user" / "default" / "sessions" / "lazy" / ".meta.json"
    meta.unlink()
    _, c2 = await deploy(data_dir=cfg.data_dir, prefix=cfg.prefix)
    with caplog.at_level("WARNING", logger="skald.session"):
        info = await c2.call("sessions.get", {"session_id": "lazy"})
    assert info["total_message_count"] == 3 and info["message_count"] == 3 and info["created_at"]
    assert any("missing" in r.getMessage() and "rebuilt" in r.getMessage() for r in caplog.records)
    assert json.loads(meta.read_bytes())["total_message_count"] == 3  # written back
    r = await add(c2, "lazy", "user", "one more")
    assert r["message_id"] == "msg_00000004" and not r.get("duplicate")


async def test_adds_survive_an_events_outage_once_each_and_commit_waits_for_the_journal(
        deploy: Callable[..., Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """The events stream gone (a JetStream outage for that stream): adds are still accepted once their
    line is durable, a commit refuses with UNAVAILABLE instead of archiving messages the journal lacks,
    and once the stream is back the journal holds every message exactly once, in order."""
    monkeypatch.setattr(nats_bus, "PUBLISH_RETRY_S", 1.0)  # an outage outlasts the retry window sooner
    w, c = await deploy(actors=("session", "archive", "indexer"))
    js = c.nc.jetstream(timeout=5.0)
    await c.add_message("out", "user", "before the outage")
    await js.delete_stream(stream_name(w.cfg.prefix, "events"))
    results = [await c.add_message("out", "user", f"during the outage {i}") for i in range(5)]
    assert [r.duplicate for r in results] == [False] * 5
    assert [r.message_id for r in results] == [f"msg_{i:08d}" for i in range(2, 7)]
    c.retries = False
    with pytest.raises(errors.Unavailable) as err:
        await c.commit("out")
    assert err.value.details["backlog"] >= 1
    health = (await c.health()).actors["session"]
    assert health["journal_backlog"] >= 1 and health["journal_publish_failures"] >= 1
    await ensure_streams(js, w.cfg.prefix)
    for _ in range(100):
        if (await c.health()).actors["session"]["journal_backlog"] == 0:
            break
        await asyncio.sleep(0.2)
    entries = await replay.record(c.nc, w.cfg.prefix)
    ids = [e.ids["message_id"] for e in entries if e.op == "sessions.add_message"]
    assert ids == [f"msg_{i:08d}" for i in range(2, 7)]  # the first one's event went with the old stream
    assert (await c.commit("out")).status == "accepted"


async def test_a_commit_whose_phase2_job_cannot_be_queued_rolls_forward(deploy: Callable[..., Any],
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """The work stream gone at commit time (a leader election): the archive is durable, so the
    commit is accepted and its job queued later, root is rewritten, and the next commit archives
    only what came after (before: the commit failed after its archive was written, root kept the
    messages, and the client's retry archived them a second time)."""
    monkeypatch.setattr(nats_bus, "PUBLISH_RETRY_S", 1.0)  # an outage outlasts the retry window sooner
    w, c = await deploy(actors=("session", "indexer"))
    js = c.nc.jetstream(timeout=5.0)
    for i in range(4):
        await c.add_message("roll", "user", f"first batch {i}", id=f"a{i}")
    await js.delete_stream(stream_name(w.cfg.prefix, "work"))
    first = await c.commit("roll")
    assert first.status == "accepted" and first.archived_messages == 4
    for i in range(2):
        await c.add_message("roll", "user", f"second batch {i}", id=f"b{i}")
    second = await c.commit("roll")
    assert second.status == "accepted" and second.archived_messages == 2
    sdir = w.cfg.data_dir / "accounts/default/user/default/sessions/roll/history"
    lines = [json.loads(x)["id"] for f in sorted(sdir.glob("archive_*/messages.jsonl"))
             for x in f.read_text().splitlines() if x.strip()]
    assert lines == ["a0", "a1", "a2", "a3", "b0", "b1"]
    await ensure_streams(js, w.cfg.prefix)


async def test_a_session_that_opts_in_commits_by_itself(deploy: Callable[..., Any]) -> None:
    """Auto-commit: a message-count policy commits when the limit is reached, an idle policy once
    the session has been quiet for its time; the policy is kept in the session's meta, bad
    policies are refused, and a session without one never commits by itself."""
    _, c = await deploy()
    with pytest.raises(errors.InvalidArgument):
        await c.call("sessions.create", {"session_id": "bad", "auto_commit": {"pending_messages": 0}})
    with pytest.raises(errors.InvalidArgument):
        await c.call("sessions.create", {"session_id": "bad", "auto_commit": {"every": 3}})
    info = await c.call("sessions.create", {"session_id": "a", "auto_commit": {"pending_messages": 4}})
    assert info["auto_commit"] == {"pending_messages": 4}
    await c.call("sessions.create", {"session_id": "plain"})
    for n in range(4):
        await add(c, "a", "user" if n % 2 == 0 else "assistant", f"message {n}")
        await add(c, "plain", "user" if n % 2 == 0 else "assistant", f"message {n}")
    for _ in range(100):
        got = await c.call("sessions.get", {"session_id": "a"})
        if got["commit_count"] == 1:
            break
        await asyncio.sleep(0.1)
    assert got["commit_count"] == 1 and got["message_count"] < 4
    assert (await c.call("sessions.get", {"session_id": "plain"}))["commit_count"] == 0

    await c.call("sessions.create", {"session_id": "i", "auto_commit": {"idle_s": 1.0}})
    await add(c, "i", "user", "the idle one")
    assert (await c.call("sessions.get", {"session_id": "i"}))["commit_count"] == 0  # not yet idle
    for _ in range(60):
        got = await c.call("sessions.get", {"session_id": "i"})
        if got["commit_count"] == 1:
            break
        await asyncio.sleep(0.1)
    assert got["commit_count"] == 1 and got["auto_commit"] == {"idle_s": 1.0}
    for _ in range(50):  # counted once the commit's reply is back at the session actor
        if (await c.health()).actors["session"]["auto_commits"] == 2:
            break
        await asyncio.sleep(0.1)
    assert (await c.health()).actors["session"]["auto_commits"] == 2
