"""A reply as the bus carries it: JSON or msgpack (as the request came), a typed error when the
result cannot be encoded or does not fit in one message."""

from __future__ import annotations

import logging
from typing import Any

import msgspec

from skald.messages.envelope import CONTENT_TYPE, H_DEPRECATION, H_STATUS, MSGPACK, ErrorBody, Reply

log = logging.getLogger("skald.host")
json_encoder = msgspec.json.Encoder()
msgpack_encoder = msgspec.msgpack.Encoder()


def error_reply(code: str, message: str, details: dict[str, Any] | None = None) -> Reply:
    """A typed error reply."""
    return Reply(status="error", error=ErrorBody(code=code, message=message, details=details or {}))


def encode_reply(request_headers: dict[str, str] | None, reply: Reply, deprecated: list[str],
                 max_payload: int) -> tuple[bytes, dict[str, str]]:
    """The reply's bytes and headers, as the bus carries them."""
    msgpack = (request_headers or {}).get(CONTENT_TYPE, "").startswith(MSGPACK)
    if msgpack and isinstance(reply.result, msgspec.Raw):  # a relayed result is JSON text
        reply = msgspec.structs.replace(reply, result=msgspec.json.decode(reply.result))
    try:
        body = msgpack_encoder.encode(reply) if msgpack else json_encoder.encode(reply)
    except (TypeError, ValueError, OverflowError) as e:
        log.exception("unencodable reply")
        reply = error_reply("INTERNAL", f"reply could not be encoded ({type(e).__name__})")
        body = json_encoder.encode(reply)
    if len(body) > max_payload:
        reply = error_reply("INVALID_ARGUMENT", "reply too large for one message; lower the limit",
                            {"bytes": len(body), "max_payload": max_payload})
        body = msgpack_encoder.encode(reply) if msgpack else json_encoder.encode(reply)
    headers = {H_STATUS: reply.error.code if reply.error else "OK"}
    if msgpack:
        headers[CONTENT_TYPE] = MSGPACK
    if deprecated:
        headers[H_DEPRECATION] = "true"
    return body, headers
