"""The OpenViking-compatible HTTP gateway, driven by OpenViking's own Python SDK (openviking-sdk
from PyPI, unchanged) and by plain HTTP where the SDK has no call (status codes, keys, the OpenAPI
document and metrics are test_gateway_http.py)."""

from __future__ import annotations

import asyncio
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import nats
import openviking_sdk as ov
import pytest
from openviking_sdk import errors as ov_errors

from skald.messages.envelope import H_INDEX_SEQ
from skald.runtime.bus import keys as key_store
from skald.runtime.client.api import SkaldClient
from support import documents as sample_docs


async def test_openviking_sdk_works_unchanged(gateway: str) -> None:
    sdk = ov.AsyncHTTPClient(url=gateway, api_key="any", user="default", timeout=30)
    await sdk.initialize()
    try:
        async with httpx.AsyncClient(base_url=gateway) as http:
            r = await http.post("/api/v1/memories", json={"category": "preferences",
                                                          "content": "The user prefers caddy on port 1935."})
            assert r.status_code == 200
            r = await http.post("/api/v1/content/write", json={"uri": "viking://resources/caddy.md",
                                                               "content": "# Caddy\n\nUpstream port 1935.\n"})
            assert r.status_code == 200
        found = await sdk.find("caddy upstream port", limit=5)
        assert found["total"] >= 1 and any(h["uri"] == "viking://resources/caddy.md" for h in found["resources"])
        listed = await sdk.search("caddy upstream port", limit=5, options={"level": 2})
        assert "query_plan" in listed and listed["total"] >= 1
        ctx = await sdk.search_context("caddy upstream port", options={"max_tokens": 400, "score_threshold": 0.0})
        assert ctx["entries"] and ctx["rendered"].startswith("<memory uri=")
        assert ctx["stats"]["max_tokens"] == 400
        grep = await sdk.grep("viking://resources", "1935")
        assert grep["count"] == 1 and grep["matches"][0]["uri"] == "viking://resources/caddy.md"
        glob = await sdk.glob("**/*.md", uri="viking://resources")
        assert "viking://resources/caddy.md" in glob["matches"]
        created = await sdk.create_session("ov-1")
        assert created["session_id"] == "ov-1"
        s = sdk.session("ov-1")
        await s.add_message("user", content="We moved caddy to port 1935.")
        await s.add_message("assistant", parts=[{"type": "text", "text": "Noted."}])
        got = await sdk.get_session("ov-1")
        assert got["total_message_count"] == 2
        committed = await s.commit(keep_recent_count=0)
        assert committed["status"] == "accepted" and committed["archive_uri"]
        context = await s.get_session_context()
        assert "messages" in context and "latest_archive_overview" in context
        auto = await sdk.get_session("ov-new", auto_create=True)
        assert auto["session_id"] == "ov-new"
        with pytest.raises(ov_errors.NotFoundError):
            await sdk.get_session("ov-missing")
        with pytest.raises(ov_errors.InvalidArgumentError):
            await sdk.search_context("caddy", target_uri="viking://resources")
    finally:
        await sdk.close()


async def test_openviking_sdk_adds_local_files_and_folders_through_temp_upload(gateway: str, tmp_path: Path) -> None:
    """The SDK uploads a file as it is and a folder as a zip (`temp_upload`), then adds it by
    `temp_file_id`; the folder arrives unpacked under its own name, binaries reported."""
    (tmp_path / "guide").mkdir()
    (tmp_path / "guide" / "deploy.md").write_text("# Deploy\n\nCaddy listens on port 1935 behind the load balancer.\n")
    (tmp_path / "guide" / "ops").mkdir()
    (tmp_path / "guide" / "ops" / "backups.md").write_text("# Backups\n\nNightly at 02:00 UTC.\n")
    (tmp_path / "handbook.pdf").write_bytes(sample_docs.handbook_pdf())
    sdk = ov.AsyncHTTPClient(url=gateway, api_key="any", user="default", timeout=60)
    await sdk.initialize()
    try:
        folder = await sdk.add_resource(str(tmp_path / "guide"), parent="viking://resources", wait=True)
        assert folder["root_uri"] == "viking://resources/guide" and folder["files"] == 2
        pdf = await sdk.add_resource(str(tmp_path / "handbook.pdf"), to="viking://resources/manuals/ops.pdf",
                                     wait=True)
        assert pdf["root_uri"] == "viking://resources/manuals/ops.pdf" and pdf["sections"] >= 30
        found = await sdk.find("recovery point objective", limit=3)
        assert any(h["uri"].startswith("viking://resources/manuals/ops.pdf#") for h in found["resources"])
        found = await sdk.find("nightly backups time", limit=3)
        assert any(h["uri"] == "viking://resources/guide/ops/backups.md" for h in found["resources"])
    finally:
        await sdk.close()


async def test_a_read_after_a_write_through_the_gateway_waits_for_that_write(
        gateway: str, skald: Any, nats_url: str) -> None:
    """HTTP callers hold no index sequence of their own: the gateway passes on the highest one its
    writes were acknowledged at, so a find after `wait: true` (or any write) sees what was written,
    however far the retriever's replica lags."""
    nc = await nats.connect(nats_url)
    seen: list[dict[str, str]] = []

    async def note(m: Any) -> None:
        seen.append(dict(m.headers or {}))

    sub = await nc.subscribe(f"{skald.cfg.prefix}.v1.search.find", cb=note)
    try:
        async with httpx.AsyncClient(base_url=gateway) as http:
            r = await http.post("/api/v1/content/write", json={"uri": "viking://resources/rpo.md",
                                                               "content": "# RPO\n\nFifteen minutes.\n"})
            assert r.status_code == 200
            acked = r.json()["result"]["index_seq"]
            found = await http.post("/api/v1/search/find", json={"query": "recovery point", "limit": 3})
            assert found.status_code == 200
        await nc.flush()
        assert acked > 0 and seen and int(seen[-1][H_INDEX_SEQ]) >= acked
    finally:
        await sub.unsubscribe()
        await nc.close()


async def test_recall_route_and_deprecation_header(gateway: str) -> None:
    async with httpx.AsyncClient(base_url=gateway) as http:
        r = await http.post("/api/v1/search/recall", json={"query": "anything", "max_chars": 2000})
        assert r.status_code == 200 and r.headers["Deprecation"] == "true"
        assert r.json()["result"]["stats"]["max_tokens"] == 500
        r = await http.post("/api/v1/search/recall", json={"query": "anything"})
        assert r.status_code == 200 and "Deprecation" not in r.headers


async def test_openviking_capabilities_skald_lacks_are_typed_unimplemented(gateway: str) -> None:
    """The SDK raises UnimplementedError with the reason, not NotFoundError for a route it thinks exists."""
    sdk = ov.AsyncHTTPClient(url=gateway, api_key="any", user="default", timeout=30)
    await sdk.initialize()
    try:
        for call in (sdk.acl_get("viking://resources"), sdk.list_tasks(), sdk.git_log(),
                     sdk.admin_list_accounts(), sdk.list_watches()):
            with pytest.raises(ov_errors.UnimplementedError) as e:
                await call
            assert "Skald has no " in str(e.value)
    finally:
        await sdk.close()


async def test_session_times_are_iso_8601_as_openviking_gives_them(gateway: str) -> None:
    async with httpx.AsyncClient(base_url=gateway) as http:
        await http.post("/api/v1/sessions/iso1/messages", json={"role": "user", "content": "hello"})
        got = (await http.get("/api/v1/sessions/iso1")).json()["result"]
        listed = (await http.get("/api/v1/sessions")).json()["result"]
    created = datetime.fromisoformat(got["created_at"])
    assert created.tzinfo is not None and abs(created.timestamp() - time.time()) < 600
    assert all(isinstance(s["created_at"], str) for s in listed["sessions"])


async def test_openviking_sdk_wait_status_skills_and_batches(gateway: str) -> None:
    """The SDK's wait_processed, observer pages (what get_status / is_healthy read), list_skills and
    batch_add_messages, which answered 404 or 405 before."""
    sdk = ov.AsyncHTTPClient(url=gateway, api_key="any", user="default", timeout=30)
    await sdk.initialize()
    try:
        async with httpx.AsyncClient(base_url=gateway) as http:
            r = await http.post("/api/v1/skills", json={"data": "---\nname: deploy\ndescription: Deploy the app "
                                                                "with caddy.\n---\n\n# Deploy\n\nRun caddy.\n"})
            assert r.status_code == 200, r.text
        waited = await sdk.wait_processed()
        assert waited["processed"] is True and waited["pending_jobs"] == 0
        system = await sdk._get_system_status()
        assert system["is_healthy"] is True and "retriever" in system["components"]
        assert "work" in await sdk._get_queue_status()
        assert (await sdk._get_vikingdb_status())["index"]["rows"] >= 1
        assert (await sdk._get_models_status())["embedder"]
        skills = await sdk.list_skills()
        assert any(e["name"] == "deploy" and e["uri"] == "viking://agent/skills/deploy" for e in skills["skills"]), \
            skills
        added = await sdk.batch_add_messages("batch-1", [{"role": "user", "content": "first"},
                                                         {"role": "assistant", "content": "second"}])
        assert added["added"] == 2 and len(added["message_ids"]) == 2
        got = await sdk.get_session("batch-1")
        assert got["message_count"] == 2
        with pytest.raises(ov_errors.OpenVikingError):
            await sdk.batch_add_messages("batch-1", [{"role": "robot", "content": "third"}])
    finally:
        await sdk.close()


async def test_skills_managed_through_openviking_routes(gateway: str, tmp_path: Path) -> None:
    """A skill folder uploaded as a zip (OpenViking's CLI names it `.tmpXXXX.zip`, a hidden name)
    installs; the `list_only` preview names it and writes nothing; show, validate, replace and
    remove work on it; an invalid SKILL.md validates as invalid with skills.add's own reason."""
    import io
    import zipfile

    skill = "---\nname: rotate-keys\ndescription: Rotate the API keys\n---\n# Steps\nRun skald keys.\n"
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("SKILL.md", skill)
        z.writestr("scripts/rotate.sh", "skald keys create\n")
    async with httpx.AsyncClient(base_url=gateway, timeout=60) as http:
        async def upload() -> str:
            r = await http.post("/api/v1/resources/temp_upload", files={"file": (".tmpAb12Cd.zip", buf.getvalue())})
            assert r.status_code == 200, r.text
            return str(r.json()["result"]["temp_file_id"])

        preview = (await http.post("/api/v1/skills", json={"temp_file_id": await upload(), "list_only": True})).json()
        assert preview["result"]["skills"][0]["name"] == "rotate-keys", preview
        assert (await http.get("/api/v1/skills")).json()["result"]["total"] == 0  # nothing written
        added = (await http.post("/api/v1/skills", json={"temp_file_id": await upload(), "wait": True})).json()
        assert added["result"]["root_uri"] == "viking://agent/skills/rotate-keys", added
        script = await http.get("/api/v1/content/read", params={"uri": "viking://agent/skills/rotate-keys/scripts/rotate.sh"})
        assert script.json()["result"]["content"] == "skald keys create\n"
        shown = (await http.get("/api/v1/skills/rotate-keys")).json()["result"]
        assert shown["description"] == "Rotate the API keys" and shown["content"] == skill
        bad = (await http.post("/api/v1/skills/validate", json={"data": "---\nname: x\n---\nno description\n"})).json()
        assert bad["result"]["valid"] is False and "description" in bad["result"]["errors"][0]["message"]
        good = (await http.post("/api/v1/skills/validate", json={"data": skill})).json()["result"]
        assert good["valid"] is True and good["name"] == "rotate-keys"
        other = skill.replace("rotate-keys", "other-skill")
        r = await http.put("/api/v1/skills/rotate-keys", json={"data": other})
        assert r.status_code == 400 and "another skill" in r.json()["error"]["message"]
        r = await http.put("/api/v1/skills/rotate-keys", json={"data": skill.replace("Run skald keys.", "Run it.")})
        assert r.status_code == 200, r.text
        assert "Run it." in (await http.get("/api/v1/skills/rotate-keys")).json()["result"]["content"]
        assert (await http.delete("/api/v1/skills/rotate-keys")).status_code == 200
        gone = await http.get("/api/v1/skills/rotate-keys")
        assert gone.status_code == 404 and gone.json()["error"]["code"] == "NOT_FOUND"


async def test_download_gives_a_files_own_bytes_and_scope_roots_always_list(gateway: str) -> None:
    """`content/download` returns the bytes as stored (a binary too); `ls viking://resources` on a
    deployment with nothing in it is an empty listing, as OpenViking's CLI expects, not a 404."""
    async with httpx.AsyncClient(base_url=gateway, timeout=60) as http:
        empty = await http.get("/api/v1/fs/ls", params={"uri": "viking://resources"})
        assert empty.status_code == 200 and empty.json()["result"]["entries"] == []
        assert (await http.get("/api/v1/skills")).json()["result"]["skills"] == []
        pdf = sample_docs.handbook_pdf()
        r = await http.post("/api/v1/resources/temp_upload", files={"file": ("h.pdf", pdf)})
        uid = r.json()["result"]["temp_file_id"]
        r = await http.post("/api/v1/resources", json={"temp_file_id": uid, "to": "viking://resources/h.pdf",
                                                       "wait": True})
        assert r.status_code == 200, r.text
        got = await http.get("/api/v1/content/download", params={"uri": "viking://resources/h.pdf"})
        assert got.status_code == 200 and got.content == pdf
        stat = (await http.get("/api/v1/fs/stat", params={"uri": "viking://resources/h.pdf"})).json()["result"]
        assert datetime.fromisoformat(stat["created_at"]).tzinfo is not None
        missing = await http.get("/api/v1/content/download", params={"uri": "viking://resources/nope.pdf"})
        assert missing.status_code == 404 and missing.json()["error"]["code"] == "NOT_FOUND"


async def test_up_serves_http_in_its_own_process_without_the_bus(deploy: Any, tmp_path: Path) -> None:
    """`skald up --http-port` (`http_port`): the gateway in the actors' process serves what they
    serve without a bus hop, with the same answers, errors and key checks as over NATS."""
    path = tmp_path / "keys.json"
    alice, _ = key_store.add(path, "user", "acme", "alice")
    w, c = await deploy(http_port=-1, keys_file=str(path))
    base = f"http://127.0.0.1:{w.http.addresses[0][1]}"
    over_bus = SkaldClient(c.nc, w.cfg.prefix, api_key=alice)
    async with httpx.AsyncClient(base_url=base, headers={"X-API-Key": alice}) as http:
        r = await http.post("/api/v1/content/write", json={"uri": "viking://resources/caddy.md",
                                                           "content": "# Caddy\n\nUpstream port 1935.\n"})
        assert r.status_code == 200
        before = w.host.local_requests
        r = await http.post("/api/v1/search/find", json={"query": "caddy upstream port", "limit": 5})
        assert r.status_code == 200 and w.host.local_requests == before + 1
        found = r.json()["result"]
        nats = await over_bus.call("search.find", {"query": "caddy upstream port", "limit": 5})
        assert [(h["uri"], h["score"]) for h in found["resources"]] == [(h["uri"], h["score"])
                                                                         for h in nats["resources"]]
        assert found["resources"][0]["uri"] == "viking://resources/caddy.md"
        bad = await http.post("/api/v1/search/find", json={"query": "x", "limit": "many"})
        assert bad.status_code == 400 and bad.json()["error"]["code"] == "INVALID_ARGUMENT"
        # the host checks the key, as on the bus: a user key is pinned to its user
        denied = await http.post("/api/v1/search/find", json={"query": "caddy"}, headers={"X-OpenViking-User": "bob"})
        assert denied.status_code == 403
    async with httpx.AsyncClient(base_url=base) as anon:
        r = await anon.post("/api/v1/search/find", json={"query": "caddy"})
        assert r.status_code == 401


async def test_get_task_follows_an_ingest_job_and_an_unknown_id_is_none(gateway: str) -> None:
    """OpenViking's get_task on the job id resources.add gives: running, then completed with the
    ingest's result; an id that is no job is a 404, which the SDK turns into None."""
    async with httpx.AsyncClient(base_url=gateway, timeout=60) as http:
        queued = await http.post("/api/v1/resources", json={"content": "# Pager\n\nMondays.\n", "name": "p.md",
                                                            "wait": False})
        job = queued.json()["result"]["job_id"]
    sdk = ov.AsyncHTTPClient(url=gateway, api_key="any", user="default", timeout=60)
    await sdk.initialize()
    try:
        for _ in range(200):
            task = await sdk.get_task(job)
            assert task is not None and task["task_id"] == job and task["status"] in ("running", "completed")
            if task["status"] == "completed":
                break
            await asyncio.sleep(0.05)
        assert task["status"] == "completed" and task["result"]["root_uri"] == "viking://resources/p.md"
        assert await sdk.get_task("0" * 32) is None and await sdk.get_task("not-a-job") is None
    finally:
        await sdk.close()
