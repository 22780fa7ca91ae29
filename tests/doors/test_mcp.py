"""`skald mcp` driven by a real MCP client session (the official SDK) over stdio."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from mcp import Client, StdioServerParameters

from skald.runtime import __version__

SKALD = str(Path(sys.executable).parent / "skald")


def text(result: Any) -> str:
    return "\n".join(getattr(c, "text", "") for c in result.content)


async def test_mcp_session_lists_and_calls_every_tool(skald: Any, nats_url: str) -> None:
    params = StdioServerParameters(command=SKALD, args=["mcp"], env={
        **{k: v for k, v in os.environ.items() if k in ("PATH", "HOME")},
        "SKALD_NATS_URL": nats_url, "SKALD_PREFIX": skald.cfg.prefix})
    async with Client(params) as mcp:
        assert mcp.server_info is not None and mcp.server_info.version == __version__  # was empty
        tools = {t.name: t for t in (await mcp.list_tools()).tools}
        assert set(tools) == {"recall", "bootstrap", "search_context", "find", "read", "ls", "overview", "glob",
                              "grep", "remember", "update_memory", "memory_history", "forget", "session_add",
                              "session_commit", "session_used"}
        assert all(len(t.description or "") > 60 for t in tools.values())
        undescribed = [(t.name, p) for t in tools.values() for p, spec in t.input_schema["properties"].items()
                       if not spec.get("description")]
        assert undescribed == []
        schema = tools["remember"].input_schema
        assert set(schema["properties"]["category"]["enum"]) == {"preferences", "entities", "events", "experiences"}
        assert tools["find"].input_schema["properties"]["limit"]["maximum"] == 50
        kinds = tools["find"].input_schema["properties"]["context_type"]  # plain enums: hosts show choices
        assert kinds["enum"] == ["any", "memory", "resource", "skill"] and kinds["default"] == "any"
        assert tools["search_context"].input_schema["properties"]["purpose"]["enum"] == ["relevance", "chat", "coding"]
        assert "description" in tools["read"].input_schema["properties"]["offset"]
        bad = await mcp.call_tool("remember", {"category": "habits", "content": "Likes long walks."})
        assert bad.is_error  # refused by the schema, no memories/habits/ directory made
        assert all(v in text(bad) for v in ("preferences", "entities", "events", "experiences")), text(bad)
        bad = await mcp.call_tool("session_add", {"session_id": "m1", "role": "bot", "text": "x"})
        assert bad.is_error
        r = await mcp.call_tool("remember", {"category": "preferences",
                                             "content": "The user deploys with caddy on port 1935."})
        assert not r.is_error and "Remembered as viking://user/default/memories/preferences/" in text(r)
        uri = text(r).split("Remembered as ")[1].strip()
        r = await mcp.call_tool("find", {"query": "caddy port deploy"})
        assert uri in text(r)
        assert uri in text(await mcp.call_tool("find", {"query": "caddy port deploy", "context_type": "memory"}))
        assert uri not in text(await mcp.call_tool("find", {"query": "caddy port deploy", "context_type": "skill"}))
        r = await mcp.call_tool("read", {"uri": uri})
        assert "port 1935" in text(r)
        r = await mcp.call_tool("ls", {"uri": "viking://user/default/memories/preferences"})
        assert uri in text(r)
        r = await mcp.call_tool("glob", {"pattern": "**/*.md", "uri": "viking://user/default/memories"})
        assert uri in text(r)
        r = await mcp.call_tool("grep", {"pattern": "1935", "uri": "viking://user/default/memories"})
        assert f"{uri}:1:" in text(r)
        r = await mcp.call_tool("session_add", {"session_id": "m1", "role": "user", "text": "deploying caddy"})
        assert "1 live messages" in text(r)
        r = await mcp.call_tool("search_context", {"query": "caddy port", "max_tokens": 300})
        assert f'<memory uri="{uri}"' in text(r)
        r = await mcp.call_tool("search_context", {"query": "caddy port", "max_tokens": 300, "purpose": "coding"})
        assert not r.is_error
        # recall sends only what the model gave: its profile is the preset's (score floor 0.35)
        r = await mcp.call_tool("recall", {"query": "caddy port", "session_id": "m1"})
        assert not r.is_error
        r = await mcp.call_tool("bootstrap", {"session_id": "m1"})
        assert 'type="instructions"' in text(r) and 'type="continuity"' in text(r)
        assert "the search_context or recall tool" in text(r) and "memories.write" not in text(r)
        r = await mcp.call_tool("overview", {"uri": "viking://user/default/memories"})
        assert not r.is_error and "preferences" in text(r)
        r = await mcp.call_tool("read", {"uri": "viking://user/default/memories"})
        assert r.is_error and "ls tool" in text(r) and "overview tool" in text(r)
        r = await mcp.call_tool("session_commit", {"session_id": "m1"})
        assert text(r).startswith("accepted")
        r = await mcp.call_tool("update_memory", {"uri": uri, "content": "The user deploys with caddy on port 2019."})
        assert text(r) == f"Updated {uri}"
        r = await mcp.call_tool("memory_history", {"uri": uri})
        assert "Current: The user deploys with caddy on port 2019." in text(r), text(r)
        assert "version 1, update" in text(r) and "port 1935" in text(r)
        r = await mcp.call_tool("forget", {"uri": uri})
        assert text(r) == f"Forgot {uri}"
        r = await mcp.call_tool("memory_history", {"uri": uri})
        assert text(r).startswith("Forgotten") and "port 2019" in text(r) and "port 1935" in text(r)
        r = await mcp.call_tool("find", {"query": "caddy port deploy"})
        assert uri not in text(r)
        r = await mcp.call_tool("read", {"uri": "viking://resources/../../etc/passwd"})
        assert r.is_error and "INVALID_ARGUMENT" in text(r)
