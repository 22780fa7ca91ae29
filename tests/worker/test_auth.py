"""API keys and roles, enforced by every worker on every subject."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest

from skald.messages import errors
from skald.messages.catalog import OPS
from skald.runtime.bus import keys as key_store
from skald.runtime.client.api import SkaldClient
from skald.runtime.client.login import client_login, key_digest
from support.requests import SUBJECTS

SKALD = str(Path(sys.executable).parent / "skald")


@pytest.fixture
async def secured(deploy: Callable[..., Any], tmp_path: Path, nats_url: str) -> dict[str, Any]:
    path = tmp_path / "keys.json"
    root, _ = key_store.add(path, "root")
    admin, _ = key_store.add(path, "admin", "acme")
    alice, alice_rec = key_store.add(path, "user", "acme", "alice")
    bob, _ = key_store.add(path, "user", "acme", "bob")
    w, anon = await deploy(keys_file=str(path))

    def as_(key: str | None, **ident: str) -> SkaldClient:
        return SkaldClient(anon.nc, w.cfg.prefix, api_key=key, **ident)

    return {"w": w, "path": path, "anon": anon, "as": as_, "root": root, "admin": admin, "alice": alice,
            "bob": bob, "alice_id": alice_rec.id}


async def test_the_file_keeps_hashes_only(secured: dict[str, Any]) -> None:
    text = secured["path"].read_text()
    for k in ("root", "admin", "alice", "bob"):
        assert secured[k] not in text and key_digest(secured[k]) in text


async def test_no_key_or_a_wrong_key_is_unauthenticated_everywhere_and_reveals_nothing(
        secured: dict[str, Any]) -> None:
    messages = set()
    for key in (None, "sk_wrong", secured["alice"] + "x"):
        c = secured["as"](key)
        for op in sorted(OPS):
            valid = SUBJECTS[op][0]
            for body in (msgspec.json.encode(valid), b"{garbage"):
                resp, hdrs = await c.raw(op, body)
                assert resp.status == "error" and resp.error["code"] == "UNAUTHENTICATED", (op, key)
                assert hdrs["Skald-Status"] == "UNAUTHENTICATED"
                messages.add((resp.error["message"], json.dumps(resp.error.get("details", {}))))
    assert len(messages) == 1  # the same answer whatever was asked


async def test_user_key_is_pinned_to_its_account_and_user(secured: dict[str, Any]) -> None:
    alice = secured["as"](secured["alice"])
    r = await alice.remember("preferences", "Alice likes green tea.")
    assert r.root_uri.startswith("viking://user/alice/memories/")
    assert (await alice.find("green tea")).total >= 1
    for ident in ({"user": "bob"}, {"account": "other"}, {"user": "bob", "account": "acme"}):
        with pytest.raises(errors.PermissionDenied):
            await secured["as"](secured["alice"], **ident).find("green tea")
    assert (await secured["as"](secured["alice"], user="alice", account="acme").find("green tea")).total >= 1
    bob = secured["as"](secured["bob"])
    with pytest.raises(errors.PermissionDenied):
        await bob.read(r.root_uri)
    assert (await bob.find("green tea")).total == 0
    ctx = await bob.context("green tea", score_threshold=0.0)  # through the relay and the internal hop
    assert ctx.entries == []


async def test_admin_acts_in_its_account_and_root_anywhere(secured: dict[str, Any]) -> None:
    alice = secured["as"](secured["alice"])
    r = await alice.remember("entities", "Vega is the proxy host.")
    admin_as_alice = secured["as"](secured["admin"], user="alice")
    assert (await admin_as_alice.read(r.root_uri)).content.startswith("Vega")
    with pytest.raises(errors.PermissionDenied):
        await secured["as"](secured["admin"], account="other", user="alice").find("x")
    root = secured["as"](secured["root"], account="acme", user="carol")
    assert (await root.remember("entities", "Carol's note.")).root_uri.startswith("viking://user/carol/")
    assert (await secured["as"](secured["root"], account="acme").read(r.root_uri)).content.startswith("Vega")


async def test_revoked_key_stops_working(secured: dict[str, Any]) -> None:
    alice = secured["as"](secured["alice"])
    await alice.health()
    assert key_store.revoke(secured["path"], secured["alice_id"])
    await asyncio.sleep(1.2)  # the key store re-reads the file at most once a second
    with pytest.raises(errors.Unauthenticated):
        await alice.health()


async def test_worker_subjects_need_the_worker_secret(secured: dict[str, Any]) -> None:
    c = secured["as"](secured["root"])
    prefix = secured["w"].cfg.prefix
    body = msgspec.json.encode({"queries": ["x"], "buckets": [{"name": "all", "limit": 5}]})
    for subject in (f"{prefix}.internal.search.candidates",
                    f"{prefix}.direct.{secured['w'].host.worker_id}.search.find"):
        msg = await c.nc.request(subject, body, timeout=5, headers={"Skald-Api-Key": secured["root"],
                                                                    "Skald-Root": "1"})
        assert json.loads(msg.data)["error"]["code"] == "UNAUTHENTICATED"


async def test_keys_cli(tmp_path: Path) -> None:
    path = tmp_path / "k.json"

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([SKALD, "keys", *args, "--file", str(path)], capture_output=True, text=True, timeout=60)

    made = await asyncio.to_thread(run, "create", "--role", "user", "--account", "acme", "--user", "dora")
    assert made.returncode == 0 and made.stdout.startswith("sk_") and "created k" in made.stderr
    listed = await asyncio.to_thread(run, "list")
    key_id = listed.stdout.split()[0]
    assert "user" in listed.stdout and "acme/dora" in listed.stdout and made.stdout.strip() not in listed.stdout
    bad = await asyncio.to_thread(run, "create", "--role", "user", "--account", "acme")
    assert bad.returncode == 2 and "needs a user" in bad.stderr
    assert (await asyncio.to_thread(run, "revoke", key_id)).returncode == 0
    assert (await asyncio.to_thread(run, "revoke", key_id)).returncode == 4


async def test_server_paths_are_imported_by_root_or_admin_only(secured: dict[str, Any], tmp_path: Path) -> None:
    src = tmp_path / "handbook"
    src.mkdir()
    (src / "a.md").write_text("# Handbook\n\nOn call rules.\n")
    with pytest.raises(errors.PermissionDenied):
        await secured["as"](secured["alice"]).add_resource(path=str(src), wait=True)
    with pytest.raises(errors.PermissionDenied):
        await secured["as"](secured["alice"]).add_resource(path="/etc", wait=True)
    r = await secured["as"](secured["admin"], user="alice").add_resource(path=str(src), wait=True)
    assert r.status == "done" and r.files == 1


async def test_a_user_key_uploads_what_it_may_not_name_as_a_server_path(secured: dict[str, Any],
                                                                        tmp_path: Path) -> None:
    src = tmp_path / "handbook"
    src.mkdir()
    (src / "a.md").write_text("# Handbook\n\nOn call rules.\n")
    alice, bob = secured["as"](secured["alice"]), secured["as"](secured["bob"])
    r = await alice.add_resource(upload=src, target_uri="viking://user/alice/resources", wait=True)
    assert r.status == "done" and r.files == 1 and r.root_uri == "viking://user/alice/resources/handbook"
    uid = await alice.upload(src)
    with pytest.raises(errors.PermissionDenied):  # an upload is its sender's
        await bob.add_resource(upload_id=uid, target_uri="viking://user/bob/resources", wait=True)
    with pytest.raises(errors.PermissionDenied):
        await bob.call("resources.upload", {"path": "x.md", "data": "eA==", "upload_id": uid})
    with pytest.raises(errors.PermissionDenied):  # the server fetches URLs only for root and admin keys
        await alice.add_resource(url="http://127.0.0.1:9/x", wait=True)


async def test_import_roots_bound_server_paths(deploy: Callable[..., Any], tmp_path: Path) -> None:
    allowed = tmp_path / "allowed"
    (allowed / "docs").mkdir(parents=True)
    (allowed / "docs" / "a.md").write_text("# A\n")
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "b.md").write_text("# B\n")
    os.symlink(tmp_path / "elsewhere", allowed / "sneaky")
    _, c = await deploy(import_roots=(str(allowed),))
    assert (await c.add_resource(path=str(allowed / "docs"), wait=True)).files == 1
    for path in (tmp_path / "elsewhere", allowed / "docs" / ".." / ".." / "elsewhere"):
        with pytest.raises(errors.PermissionDenied):
            await c.add_resource(path=str(path), wait=True)
    with pytest.raises((errors.PermissionDenied, errors.InvalidArgument)):
        await c.add_resource(path=str(allowed / "sneaky"), wait=True)


@pytest.fixture
async def embedded_with_keys(tmp_path: Path) -> AsyncIterator[tuple[Any, Path, str]]:
    """`skald up` as it runs with a keys file: an embedded, locked-down nats-server and every actor."""
    from skald.runtime.host.worker import Worker
    from tests.conftest import make_config

    path = tmp_path / "keys.json"
    root, _ = key_store.add(path, "root")
    cfg = make_config("", tmp_path / "data", keys_file=str(path), nats_port=-1)
    cfg.nats_url = ""
    w = Worker(cfg, embedded=True)
    await w.start()
    yield w, path, root
    await w.stop()


@pytest.mark.slow  # its own embedded nats-server with keys
async def test_embedded_bus_locks_clients_out_of_worker_subjects(embedded_with_keys: Any, tmp_path: Path) -> None:
    w, path, root = embedded_with_keys
    cfg = w.cfg
    seen_errors: list[str] = []

    async def on_error(e: Exception) -> None:
        seen_errors.append(str(e))

    import nats as natsio
    with pytest.raises(Exception):  # noqa: B017 - no credentials: the bus refuses the connection
        await natsio.connect(w.url, allow_reconnect=False)
    nc = await natsio.connect(w.url, error_cb=on_error, **client_login(root))  # the root key's bus user
    try:
        c = SkaldClient(nc, cfg.prefix, api_key=root)
        assert (await c.health()).status == "ok"  # requests and replies work
        with pytest.raises((natsio.errors.TimeoutError, natsio.errors.NoRespondersError)):
            # publishing to a worker subject is refused by the server: nobody ever sees it
            await c.nc.request(f"{cfg.prefix}.internal.search.candidates", b"{}", timeout=1)
        for subject in (f"{cfg.prefix}.work.>", f"{cfg.prefix}.evt.session.>", f"{cfg.prefix}.index.>"):
            await nc.subscribe(subject)
        await nc.flush()
        await asyncio.sleep(0.3)
        assert sum("permissions violation for subscription" in e.lower() for e in seen_errors) == 3, seen_errors
        assert any("permissions violation for publish" in e.lower() for e in seen_errors)
        js = nc.jetstream(timeout=1)
        with pytest.raises(Exception):  # noqa: B017 - any refusal: the JetStream API is not the client's
            await js.stream_info(f"{cfg.prefix.upper()}_EVENTS")
        conf = (tmp_path / "data" / "nats" / "server.conf").read_text()
        assert "no_auth_user" not in conf and root not in conf
    finally:
        await nc.close()


@pytest.mark.slow  # runs `skald replay record` as a process
async def test_replay_record_logs_in_as_a_worker_when_keys_are_on(embedded_with_keys: Any, tmp_path: Path) -> None:
    w, path, root = embedded_with_keys
    cfg = w.cfg
    import nats as natsio

    nc = await natsio.connect(w.url, **client_login(root))
    await SkaldClient(nc, cfg.prefix, api_key=root).remember("entities", "Recorded by a worker login.")
    await nc.close()
    out = tmp_path / "j.jsonl"
    args = [SKALD, "replay", "record", "--out", str(out), "--nats-url", w.url, "--prefix", cfg.prefix]
    denied = await asyncio.to_thread(subprocess.run, args, capture_output=True, text=True, timeout=60)
    assert denied.returncode != 0  # an anonymous client may not read the event stream
    ok = await asyncio.to_thread(subprocess.run, [*args, "--keys-file", str(path)], capture_output=True,
                                 text=True, timeout=60)
    assert ok.returncode == 0 and "recorded 1 writes" in ok.stdout


async def test_a_user_key_reindexes_its_own_space_not_every_users(secured: dict[str, Any]) -> None:
    alice = secured["as"](secured["alice"])
    await alice.call("memories.write", {"category": "preferences", "content": "Alice drinks oolong"})
    for uri in ("viking://", "viking://user"):
        with pytest.raises(errors.PermissionDenied):
            await alice.reindex(uri)
    assert (await alice.reindex("viking://~")).indexed
    assert (await secured["as"](secured["admin"], user="alice").reindex("viking://user")).indexed
