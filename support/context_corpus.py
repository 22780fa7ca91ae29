"""What the context-assembly tests share: a small corpus (an event, a preference, an entity, a
resource and a skill about one caddy upstream port), the dedup ledger's place, and a digest model."""

from __future__ import annotations

import re
from typing import Any

from support.corpus import remember
from support.stubs import ModelStub, chat

EVENT = "# Summary\nThe NPM vhost 27 upstream now points at caddy on port 1935.\n\n# Details\n" + \
    "We traced the caddy upstream port change step by step. " * 12
CTX = {"mode": "context", "score_threshold": 0.0}


async def seed(c: Any) -> dict[str, str]:
    written = await remember(c, [
        ("events", EVENT),
        ("preferences", "The user prefers caddy configs with explicit upstream port comments."),
        ("entities", "Caddy is the reverse proxy on host vega, upstream port 1935."),
    ])
    uris = dict(zip(("event", "pref", "entity"), written, strict=True))
    r = await c.call("resources.add", {"content": "# Caddy deploy guide\n\nHow to set the caddy upstream port.\n\n"
                                       "## Steps\nEdit the Caddyfile upstream port.", "name": "caddy.md", "wait": True})
    uris["resource"] = r["root_uri"]
    skill = "---\nname: caddy-port\ndescription: Change the caddy upstream port safely\n---\n# Steps\nEdit it.\n"
    r = await c.call("skills.add", {"content": skill, "wait": True})
    uris["skill"] = r["root_uri"]
    return uris


def ledger_key(session_id: str) -> str:
    """A session's dedup ledger, as a key of the tree."""
    return f"accounts/default/user/default/sessions/{session_id}/.recall_log.json"


def digest_stub(mode: dict[str, Any]) -> ModelStub:
    def respond(path: str, body: dict[str, Any]) -> tuple[int, Any, float]:
        system = body["messages"][0]["content"]
        if "condense retrieved memories" not in system:
            return 200, chat("{}"), 0
        if mode["kind"] == "fail":
            return 500, {"error": "boom"}, 0
        if mode["kind"] == "hang":
            return 200, chat("- late"), 2.0
        if mode["kind"] == "none":
            return 200, chat("NO_RELEVANT_MEMORY"), 0
        uris = re.findall(r'uri="(viking://[^"]+)"', body["messages"][1]["content"])
        return 200, chat(f"- Port is 1935 [{uris[0]}]\n- Uncited\n- Forged [viking://user/mallory/x.md]", 321), 0

    return ModelStub(respond)
