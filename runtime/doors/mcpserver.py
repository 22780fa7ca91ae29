"""`skald mcp`: an MCP server on stdio (official MCP Python SDK) that talks to Skald over NATS
through the Python client. Tool descriptions are written for the model that reads them.

Only arguments the model actually gave are sent: the recall tool must resolve to exactly the
profile `search.recall` has (docs/design/context-assembly.md, finding 9), so it never forwards its
own signature defaults.
"""

from __future__ import annotations

import time
from typing import Annotated, Any, Literal

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import Field

from skald.messages import errors
from skald.runtime import __version__
from skald.runtime.client.api import SkaldClient

# Typed parameters: the schema the model reads names the allowed values and bounds, so a model's
# guess ("habits", "bot", limit 500) is refused by the tool call itself, not turned into a new
# directory or a huge answer.
Query = Annotated[str, Field(min_length=1, max_length=4000, description="What you want to know, in plain words.")]
SessionId = Annotated[str | None, Field(max_length=128, pattern=r"^[A-Za-z0-9_.:-]+$",
                                        description="The conversation's session id, if there is one.")]
Budget = Annotated[int | None, Field(ge=100, le=20_000,
                                     description="Token budget of the answer (default 1,600).")]
Uri = Annotated[str, Field(min_length=len("viking://"), max_length=2048, pattern=r"^viking://",
                           description="A viking:// URI, e.g. one cited in recall's output.")]
Category = Literal["preferences", "entities", "events", "experiences"]
Role = Literal["user", "assistant"]
# Plain enums with a named default (no null branch), so hosts show them as choices.
ContextType = Literal["any", "memory", "resource", "skill"]
Purpose = Literal["relevance", "chat", "coding"]


DirUri = Annotated[str, Field(min_length=len("viking://"), max_length=2048, pattern=r"^viking://",
                              description="A viking:// directory, e.g. viking://resources or viking://user.")]
Pattern = Annotated[str, Field(min_length=1, max_length=1000)]
SessionName = Annotated[str, Field(max_length=128, pattern=r"^[A-Za-z0-9_.:-]+$",
                                   description="The conversation's session id (letters, digits, _ . : -).")]
# The bus's names for what the model does with a tool: the instructions the assembler writes for
# every door name operations; served here, they name the tools the model actually has.
TOOL_NAMES = (('search(mode="context") or recall', "the search_context or recall tool"),
              ("memories.write (remember)", "the remember tool"))


def hint(e: errors.SkaldError) -> str:
    """What the model can do about an error, in terms of its tools."""
    if e.code == "NOT_FOUND":
        return " Check the URI with the ls or find tool."
    if "is a directory" in e.message:
        return " Use the ls tool to list it or the overview tool to summarise it."
    if e.code in ("UNAVAILABLE", "DEADLINE_EXCEEDED"):
        return " Skald is busy or restarting: try the same tool again shortly."
    return ""


def tool_error(e: errors.SkaldError) -> str:
    """A failed tool's text for the model: the code, the message as one sentence, what to do."""
    message = e.message.strip()
    if not message.endswith((".", "?", "!")):
        message += "."
    return f"{e.code}: {message}{hint(e)}"


def for_tools(text: str) -> str:
    for bus, tools in TOOL_NAMES:
        text = text.replace(bus, tools)
    return text


def given(**kw: Any) -> dict[str, Any]:
    return {k: v for k, v in kw.items() if v is not None}


def hits(r: Any) -> str:
    rows = sorted((*r.memories, *r.resources, *r.skills), key=lambda m: -m.score)
    if not rows:
        return "No results."
    return "\n".join(f"- {m.uri} (score {m.score:.2f}): {' '.join(m.abstract.split())}" for m in rows)


def build(nats_url: str, prefix: str = "skald", user: str | None = None, api_key: str | None = None) -> MCPServer:
    server = MCPServer("skald", version=__version__, instructions=(
        "Skald holds this user's memories, resources and skills as viking:// URIs. Call recall at the start of "
        "a task to get what you should know; read a URI to see more of it; remember durable facts the user "
        "tells you."))
    state: dict[str, SkaldClient] = {}

    async def client() -> SkaldClient:
        if "c" not in state:
            state["c"] = await SkaldClient.connect(nats_url, prefix=prefix, user=user, api_key=api_key)
        return state["c"]

    async def guarded(coro: Any) -> str:
        try:
            return await coro  # type: ignore[no-any-return]
        except errors.SkaldError as e:
            raise ToolError(tool_error(e)) from None

    @server.tool()
    async def recall(query: Query, session_id: SessionId = None, max_tokens: Budget = None) -> str:
        """Recall what you should know for the current task: memories, resources and skills relevant to
        `query`, assembled into flat <memory uri=... detail=...> elements under a token budget. Pass the
        conversation's session_id so memories already shown in the last few turns are not repeated. Each
        element carries its viking:// URI; use the read tool on it for more detail."""
        async def run() -> str:
            r = await (await client()).recall(query, **given(session_id=session_id, max_tokens=max_tokens))
            return r.digest or r.rendered or "Nothing relevant is remembered."
        return await guarded(run())

    @server.tool()
    async def bootstrap(session_id: SessionId = None, max_tokens: Budget = None) -> str:
        """Call once at the start of a conversation: who the user is (their profile), what they have been
        working on lately, where the previous session stopped (pass its session_id), how to use these
        memories, and what else is stored. No query needed; returns <memory> elements under a budget."""
        async def run() -> str:
            r = await (await client()).bootstrap(**given(session_id=session_id, max_tokens=max_tokens))
            return for_tools(r.rendered) or "Nothing is stored yet."
        return await guarded(run())

    @server.tool()
    async def search_context(query: Query, session_id: SessionId = None, max_tokens: Budget = None,
                             purpose: Annotated[Purpose, Field(
                                 description="Pure relevance order, or categories balanced for a chat or a "
                                             "coding task.")] = "relevance") -> str:
        """Assemble a context block for `query` across memories, resources and skills (pure relevance order;
        purpose "chat" or "coding" balances categories instead). Use when you need background on a topic
        rather than the automatic recall."""
        async def run() -> str:
            r = await (await client()).context(query, **given(
                session_id=session_id, max_tokens=max_tokens, purpose=None if purpose == "relevance" else purpose))
            return r.digest or r.rendered or "No relevant context."
        return await guarded(run())

    @server.tool()
    async def find(query: Query,
                   limit: Annotated[int, Field(ge=1, le=50, description="How many results.")] = 10,
                   context_type: Annotated[ContextType, Field(
                       description="Every kind, or only memories, resources or skills.")] = "any") -> str:
        """Find the most relevant items for `query` (one semantic search). Returns URIs with scores and
        one-line abstracts. context_type narrows to "memory", "resource" or "skill"."""
        async def run() -> str:
            return hits(await (await client()).find(query, **given(
                limit=limit, context_type=None if context_type == "any" else context_type)))
        return await guarded(run())

    @server.tool()
    async def read(uri: Uri,
                   offset: Annotated[int, Field(ge=0, description="First line to read (0-based).")] = 0,
                   limit: Annotated[int, Field(ge=1, le=2000, description="Lines to read.")] = 200) -> str:
        """Read a viking:// file or section URI (for example one cited in recall's output), `limit`
        lines from line `offset` (0-based). A section URI (`...handbook.md#backups`) reads just that
        section; a PDF or Office file reads as text. The answer ends with where the window stops and
        how many lines there are, so you can read on."""
        async def run() -> str:
            r = await (await client()).read(uri, offset=max(0, offset), limit=max(1, min(limit, 2_000)))
            if not r.truncated:
                return r.content
            end = r.start_line + r.content.count("\n") - 1
            return f"{r.content}\n[lines {r.start_line}-{end} of {r.lines}; read on with offset={end}]"
        return await guarded(run())

    @server.tool()
    async def ls(uri: DirUri = "viking://resources") -> str:
        """List a viking:// directory: one entry per line, directories end with '/'."""
        async def run() -> str:
            r = await (await client()).ls(uri)
            return "\n".join(f"{e.uri}{'/' if e.is_dir else ''}" for e in r.entries) or "(empty)"
        return await guarded(run())

    @server.tool()
    async def overview(uri: Uri) -> str:
        """Summarise a viking:// directory or file without reading all of it: what it is about and
        what lies under it (a directory's children with their one-line abstracts)."""
        async def run() -> str:
            return (await (await client()).overview(uri)).content or "(no overview yet)"
        return await guarded(run())

    @server.tool()
    async def glob(pattern: Annotated[Pattern, Field(description='A glob pattern such as "**/*.md".')],
                   uri: DirUri = "viking://") -> str:
        """List viking:// paths matching a glob pattern such as "**/*.md" under `uri`."""
        async def run() -> str:
            r = await (await client()).glob(pattern, uri=uri)
            return "\n".join(m if isinstance(m, str) else m["uri"] for m in r.matches) or "No matches."
        return await guarded(run())

    @server.tool()
    async def grep(pattern: Annotated[Pattern, Field(description="A regular expression (Python syntax).")],
                   uri: DirUri = "viking://resources",
                   ignore_case: Annotated[bool, Field(description="Match regardless of case.")] = False) -> str:
        """Search file contents under `uri` for a regular expression; returns uri:line: text per match."""
        async def run() -> str:
            r = await (await client()).grep(uri, pattern, case_insensitive=ignore_case)
            return "\n".join(f"{m.uri}:{m.line}: {m.content}" for m in r.matches) or "No matches."
        return await guarded(run())

    @server.tool()
    async def remember(category: Annotated[Category, Field(description="Which kind of memory this is.")],
                       content: Annotated[str, Field(min_length=1, max_length=8000,
                                                     description="One self-contained fact.")]) -> str:
        """Save a durable memory about the user or the work. category is one of "preferences" (how the user
        likes things), "entities" (people, systems, projects), "events" (what happened, with dates) or
        "experiences" (lessons learned). Write one self-contained fact per call."""
        async def run() -> str:
            r = await (await client()).remember(category, content)
            return f"Remembered as {r.root_uri}"
        return await guarded(run())

    @server.tool()
    async def update_memory(uri: Uri,
                            content: Annotated[str, Field(min_length=1, max_length=8000,
                                                          description="The memory's new text, whole.")]) -> str:
        """Correct a memory that is out of date or wrong (give its viking:// URI from recall or find and
        its whole new text) instead of adding a second one beside it. The text it replaces stays in the
        memory's history."""
        async def run() -> str:
            r = await (await client()).update_memory(uri, content)
            return f"Updated {r.root_uri}"
        return await guarded(run())

    @server.tool()
    async def memory_history(uri: Uri) -> str:
        """What a memory said before: its earlier texts, newest first, with when and why each was replaced
        (update, merge or delete), and its current text unless it was forgotten."""
        async def run() -> str:
            h = await (await client()).memory_history(uri)
            now = f"Current: {h.current}" if h.current is not None else "Forgotten (no current text)."
            rows = [f"- version {v.version}, {v.reason} at {time.strftime('%Y-%m-%d %H:%M', time.gmtime(v.at))} "
                    f"UTC: {v.content.strip()}" for v in sorted(h.versions, key=lambda v: -v.version)]
            return "\n".join([now, *rows] if rows else [now, "No earlier versions."])
        return await guarded(run())

    @server.tool()
    async def forget(uri: Uri) -> str:
        """Delete a memory the user asked you to forget, or one that is wrong (give its viking:// URI
        from recall or find). Its earlier text stays in the memory's history."""
        async def run() -> str:
            r = await (await client()).forget(uri)
            return f"Forgot {r.uri}"
        return await guarded(run())

    @server.tool()
    async def session_add(session_id: SessionName,
                          role: Annotated[Role, Field(description="Who said it.")],
                          text: Annotated[str, Field(min_length=1, description="What was said.")]) -> str:
        """Record one message of the conversation (role "user" or "assistant") in session `session_id`, so
        recall can avoid repeats and later commits can summarise the conversation."""
        async def run() -> str:
            r = await (await client()).add_message(session_id, role, text)
            return f"Added {r.message_id}; {r.message_count} live messages."
        return await guarded(run())

    @server.tool()
    async def session_commit(session_id: SessionName) -> str:
        """Archive the session's messages so far; a summary is written in the background."""
        async def run() -> str:
            r = await (await client()).commit(session_id)
            return f"{r.status}: {r.archive_uri or ''}".strip()
        return await guarded(run())

    @server.tool()
    async def session_used(session_id: SessionName,
                           uris: Annotated[list[Uri], Field(min_length=1, max_length=100, description=(
                               "viking:// URIs of what you used, from recall, search_context or find."))]) -> str:
        """Say which of the memories, resources or skills you were given you actually used: they rank
        higher next time (their use count goes up by one)."""
        async def run() -> str:
            r = await (await client()).used(session_id, uris)
            return f"Counted {len(r.counted)} use(s)."
        return await guarded(run())

    return server


def run(nats_url: str, prefix: str, user: str | None, api_key: str | None) -> None:
    build(nats_url, prefix, user, api_key).run("stdio")
