"""Every subject answers garbage with exactly one INVALID_ARGUMENT reply and stays healthy."""

from __future__ import annotations

import msgspec
import pytest

from skald.runtime.client.api import SkaldClient
from support.requests import BAD_URIS, SUBJECTS


async def expect_invalid(client: SkaldClient, op: str, body: bytes) -> dict:
    resp, headers = await client.raw(op, body)
    assert resp.status == "error", (op, body[:80])
    assert resp.error and resp.error["code"] == "INVALID_ARGUMENT", (op, body[:80], resp.error)
    assert headers["Skald-Status"] == "INVALID_ARGUMENT"
    return resp.error


@pytest.mark.parametrize("op", sorted(SUBJECTS))
async def test_garbage_gets_invalid_argument(client: SkaldClient, op: str) -> None:
    valid, required, uri_field = SUBJECTS[op]
    for junk in (b"\xff\xfe not json", b"[1, 2]", b'"a string"', b"{", b"null", b"123"):
        await expect_invalid(client, op, junk)
    await expect_invalid(client, op, msgspec.json.encode({**valid, "no_such_field": 1}))
    for field in required:
        await expect_invalid(client, op, msgspec.json.encode({k: v for k, v in valid.items() if k != field}))
    for field, value in valid.items():
        wrong = 12345 if isinstance(value, str) else "wrong"
        err = await expect_invalid(client, op, msgspec.json.encode({**valid, field: wrong}))
        assert f"$.{field}" in err["message"]
    if uri_field:
        for bad in BAD_URIS:
            await expect_invalid(client, op, msgspec.json.encode({**valid, uri_field: bad}))
    health = await client.call("system.health")
    assert health["status"] == "ok"


async def test_oversized_body_is_refused(client: SkaldClient) -> None:
    big = msgspec.json.encode({"uri": "viking://resources/big.md", "content": "x" * (1024 * 1024 + 10)})
    err = await expect_invalid(client, "fs.write", big)
    assert err["details"]["max_bytes"] == 1024 * 1024


async def test_msgpack_bodies_get_msgpack_replies(client: SkaldClient) -> None:
    r = await client.call("fs.write", {"uri": "viking://resources/mp.md", "content": "msgpack works"}, msgpack=True)
    assert r["uri"] == "viking://resources/mp.md"
    resp, headers = await client.raw("fs.read", b"\xc1", {"Content-Type": "application/msgpack"})
    assert headers["Content-Type"] == "application/msgpack" and resp.error["code"] == "INVALID_ARGUMENT"


async def test_bad_identity_headers_are_refused(client: SkaldClient) -> None:
    for hdr in ({"Skald-User": "../root"}, {"Skald-Account": "a/b"}, {"Skald-Actor-Peer": "x y"}):
        resp, _ = await client.raw("fs.ls", msgspec.json.encode({"uri": "viking://resources"}), hdr)
        assert resp.error and resp.error["code"] == "INVALID_ARGUMENT"


async def test_context_mode_relayed_to_the_assembler_answers_msgpack_too(client: SkaldClient) -> None:
    """The retriever passes the assembler's result on as JSON text; a msgpack caller still gets msgpack."""
    await client.call("fs.write", {"uri": "viking://resources/relay.md", "content": "The relay carries tea."})
    body = {"query": "what does the relay carry", "mode": "context", "score_threshold": -1.0}
    as_json = await client.call("search.search", body)
    as_msgpack = await client.call("search.search", body, msgpack=True)
    assert isinstance(as_msgpack, dict) and as_msgpack["rendered"] == as_json["rendered"]
    assert "The relay carries tea." in as_json["rendered"]
