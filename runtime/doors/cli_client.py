"""`skald find|search|recall|grep|glob|ls|tree|read|write|add|remember|session ...`: the client
commands. Human output by default, `-o json` for scripts; progress bars only on a terminal.

Exit codes: 0 ok, 2 usage, 3 invalid argument, 4 not found, 5 not allowed (permission or
authentication), 6 try again (unavailable or deadline), 1 anything else.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import inspect
import json
import sys
import textwrap
from collections.abc import Awaitable, Callable
from typing import Any

import click
import msgspec
from nats.errors import NoServersError

from skald.messages import errors
from skald.messages.catalog import OPS
from skald.runtime.client import stacks
from skald.runtime.client.api import SkaldClient

EXIT = {"INVALID_ARGUMENT": 3, "NOT_FOUND": 4, "PERMISSION_DENIED": 5, "UNAUTHENTICATED": 5,
        "UNAVAILABLE": 6, "DEADLINE_EXCEEDED": 6}


def connection(fn: Callable[..., Awaitable[Any]]) -> Callable[..., None]:
    """Common options; runs the coroutine with a connected client and maps errors to exit codes."""

    @click.option("--nats-url", envvar="SKALD_NATS_URL", default="nats://127.0.0.1:4222", show_default=True,
                  help="NATS server(s), comma-separated.")
    @click.option("--prefix", envvar="SKALD_PREFIX", default="skald", show_default=True, help="Subject prefix.")
    @click.option("--user", envvar="SKALD_USER", help="Act as this user (default: default).")
    @click.option("--account", envvar="SKALD_ACCOUNT", help="Act in this account (default: default).")
    @click.option("--peer", envvar="SKALD_PEER", help="Narrow to this actor peer.")
    @click.option("--api-key", envvar="SKALD_API_KEY", help="API key, when the deployment requires one.")
    @click.option("-o", "--output", type=click.Choice(["text", "json"]), default="text", show_default=True,
                  help="Human-readable text or the reply as JSON.")
    @click.option("--timeout", type=float, default=30.0, show_default=True, help="Seconds to wait for a reply.")
    @functools.wraps(fn)
    def wrapper(nats_url: str, prefix: str, user: str | None, account: str | None, peer: str | None,
                api_key: str | None, output: str, timeout: float, **kw: Any) -> None:
        async def run() -> Any:
            client = await SkaldClient.connect(nats_url, prefix=prefix, user=user, account=account, peer=peer,
                                               api_key=api_key, timeout_s=timeout)
            try:
                return await fn(client, output, **kw)
            finally:
                await client.close()

        stacks.on_usr1()  # `kill -USR1 <pid>`: where a command that does not finish is waiting
        try:
            asyncio.run(run())
        except errors.SkaldError as e:
            if output == "json":
                click.echo(json.dumps({"error": {"code": e.code, "message": e.message, "details": e.details}}))
            else:
                click.echo(f"error: {e.code}: {e.message}", err=True)
            raise SystemExit(EXIT.get(e.code, 1)) from None
        except (OSError, NoServersError) as e:
            click.echo(f"error: cannot reach NATS at {nats_url}: {e or type(e).__name__}", err=True)
            raise SystemExit(6) from None
        except KeyboardInterrupt:
            raise SystemExit(130) from None  # what was cut short said so itself (an ingest: its job goes on)

    return wrapper


def emit(output: str, value: Any, text: Callable[[Any], str]) -> None:
    if output == "json":
        click.echo(msgspec.json.encode(value).decode())
    else:
        out = text(value)
        if out:
            click.echo(out)


def hits_text(r: Any, query: str) -> str:
    """Hits, best first, each abstract on one line cut at a word (an empty query lists rows by
    their filters, newest first, and says so)."""
    rows = sorted((*r.memories, *r.resources, *r.skills), key=lambda m: -m.score)
    head = [] if query.strip() else ["(no query: the newest rows the filters select, unranked)"]
    if not rows:
        return "\n".join([*head, "no results"])
    width = shutil_width()
    lines = head
    for m in rows:
        lines.append(f"{m.score:6.3f}  {click.style(m.uri, bold=True)}")
        if m.abstract:
            lines.append("        " + textwrap.shorten(m.abstract, width=width - 8, placeholder=" ..."))
    return "\n".join(lines)


def shutil_width() -> int:
    import shutil

    return max(40, shutil.get_terminal_size((100, 20)).columns)


def tree_text(node: Any, prefix: str = "") -> str:
    lines = [node.name + ("/" if node.is_dir else "")] if not prefix else []
    kids = node.children or []
    for i, c in enumerate(kids):
        last = i == len(kids) - 1
        lines.append(f"{prefix}{'└── ' if last else '├── '}{c.name}{'/' if c.is_dir else ''}")
        if c.children:
            sub = tree_text(c, prefix + ("    " if last else "│   "))
            lines.extend(sub.splitlines())
    return "\n".join(lines)


@click.command()
@click.argument("query")
@click.option("--uri", "target_uri", default="", help="Only under this URI.")
@click.option("--type", "context_type", type=click.Choice(["memory", "resource", "skill"]))
@click.option("-n", "--limit", default=10, show_default=True)
@connection
async def find(client: SkaldClient, output: str, query: str, target_uri: str, context_type: str | None,
               limit: int) -> None:
    """Semantic find: one vector search, ranked hits with their abstracts.

    \b
    skald find "how do we deploy caddy"
    skald find "tea" --type memory -o json
    """
    emit(output, await client.find(query, target_uri=target_uri, context_type=context_type, limit=limit),
         lambda r: hits_text(r, query))


@click.command()
@click.argument("query")
@click.option("--mode", type=click.Choice(["list", "context"]), default="list", show_default=True,
              help="A ranked list, or a ready-to-inject context block.")
@click.option("--session", "session_id", help="Session whose conversation informs the query.")
@click.option("--max-tokens", type=int, help="Context budget (context mode; default 1600).")
@click.option("--search-type", type=click.Choice(["semantic", "keywords", "hybrid"]),
              help="Dense, keyword (BM25) or both fused (default: the server's, semantic with keyword lift).")
@click.option("-n", "--limit", default=10, show_default=True)
@connection
async def search(client: SkaldClient, output: str, query: str, mode: str, session_id: str | None,
                 max_tokens: int | None, search_type: str | None, limit: int) -> None:
    """Search with session awareness; `--mode context` prints the assembled block.

    \b
    skald search "what did we decide about ports" --session s1
    skald search "deploy steps" --mode context --max-tokens 800
    """
    kw: dict[str, Any] = {"session_id": session_id, "limit": limit}
    if search_type:
        kw["search_type"] = search_type
    if mode == "context":
        if max_tokens:
            kw["max_tokens"] = max_tokens
        block = await client.context(query, **kw)
        note_new_session(block, session_id)
        emit(output, block, lambda r: r.digest or r.rendered or "no context")
    else:
        emit(output, await client.search(query, **kw), lambda r: hits_text(r, query))


@click.command()
@click.argument("query")
@click.option("--session", "session_id", help="Session for cross-turn dedup and query expansion.")
@click.option("--max-tokens", type=int, help="Budget (default 1600).")
@connection
async def recall(client: SkaldClient, output: str, query: str, session_id: str | None,
                 max_tokens: int | None) -> None:
    """The auto-recall preset: coding purpose, a higher score floor, dedup across turns.

    \b
    skald recall "fix the failing billing test" --session s1
    """
    kw: dict[str, Any] = {"session_id": session_id}
    if max_tokens:
        kw["max_tokens"] = max_tokens
    block = await client.recall(query, **kw)
    note_new_session(block, session_id)
    emit(output, block, lambda r: r.digest or r.rendered or "nothing to recall")


def note_new_session(block: Any, session_id: str | None) -> None:
    """Say on stderr when the session named did not exist and the call created it (a typo shows)."""
    if session_id and block.stats.session_created:
        click.echo(f"note: session {session_id!r} did not exist; it was created (`skald session list` "
                   "shows the others)", err=True)


@click.command()
@click.argument("pattern")
@click.option("--uri", default="viking://resources", show_default=True)
@click.option("-i", "--ignore-case", is_flag=True)
@connection
async def grep(client: SkaldClient, output: str, pattern: str, uri: str, ignore_case: bool) -> None:
    """Regular-expression search over file contents under a URI."""
    emit(output, await client.grep(uri, pattern, case_insensitive=ignore_case),
         lambda r: "\n".join(f"{m.uri}:{m.line}: {m.content}" for m in r.matches) or "no matches")


@click.command()
@click.argument("pattern")
@click.option("--uri", default="viking://", show_default=True)
@connection
async def glob(client: SkaldClient, output: str, pattern: str, uri: str) -> None:
    """Paths matching a glob pattern (`**/*.md`)."""
    emit(output, await client.glob(pattern, uri=uri),
         lambda r: "\n".join(m if isinstance(m, str) else m["uri"] for m in r.matches) or "no matches")


@click.command()
@click.argument("uri", default="viking://resources")
@connection
async def ls(client: SkaldClient, output: str, uri: str) -> None:
    """List a directory."""
    emit(output, await client.ls(uri),
         lambda r: "\n".join(f"{e.name}{'/' if e.is_dir else ''}" for e in r.entries) or "(empty)")


@click.command()
@click.argument("uri", default="viking://")
@click.option("-L", "--level", "level_limit", default=3, show_default=True, help="Depth.")
@connection
async def tree(client: SkaldClient, output: str, uri: str, level_limit: int) -> None:
    """A tree view of a directory."""
    emit(output, await client.tree(uri, level_limit=level_limit), lambda r: tree_text(r.tree))


@click.command()
@click.argument("uri")
@click.option("--offset", type=click.IntRange(min=0), default=0, help="First line (0-based).")
@click.option("--limit", type=click.IntRange(min=-1), default=-1, help="Lines to print (-1: to the end).")
@click.option("--raw", is_flag=True, help="The file's own bytes (a PDF's, not its text); written to stdout as is.")
@connection
async def read(client: SkaldClient, output: str, uri: str, offset: int, limit: int, raw: bool) -> None:
    """Print a file or a section (URI#anchor); PDF and Office files print as text."""
    r = await client.read(uri, offset=offset, limit=limit, raw=raw)
    if raw and output == "text":
        data = base64.b64decode(r.content) if r.encoding == "base64" else r.content.encode()
        sys.stdout.buffer.write(data)
        sys.stdout.flush()
        return
    emit(output, r, lambda r: r.content)


@click.command()
@click.argument("uri")
@click.argument("content", required=False)
@click.option("--append", is_flag=True, help="Append instead of replacing.")
@connection
async def write(client: SkaldClient, output: str, uri: str, content: str | None, append: bool) -> None:
    """Write a file (CONTENT, or standard input) and index it."""
    text = content if content is not None else sys.stdin.read()
    emit(output, await client.write(uri, text, mode="append" if append else "replace"),
         lambda r: f"wrote {r.uri} ({r.size} bytes)")


@click.command()
@click.argument("category")
@click.argument("content")
@connection
async def remember(client: SkaldClient, output: str, category: str, content: str) -> None:
    """Write a memory: skald remember preferences "Prefers tea"."""
    emit(output, await client.remember(category, content), lambda r: f"remembered {r.root_uri}")


@click.command("call")
@click.argument("operation")
@click.argument("body", required=False)
@connection
async def call(client: SkaldClient, output: str, operation: str, body: str | None) -> None:
    """Any operation by its name, with a JSON body (the argument, or standard input with `-`; none
    is `{}`): what any NATS client sends to `skald.v1.<operation>`, its result printed as JSON."""
    raw = sys.stdin.read() if body == "-" else body or "{}"
    try:
        payload = json.loads(raw)
    except json.JSONDecodeError as e:
        raise click.BadParameter(f"not JSON: {e}", param_hint="BODY") from None
    if operation not in OPS:
        raise click.BadParameter(f"no operation {operation!r}; `skald call --help` lists them",
                                 param_hint="OPERATION")
    click.echo(json.dumps(await client.call(operation, payload), ensure_ascii=False,
                          indent=None if output == "json" else 2))


call.help = inspect.cleandoc(call.help or "") + "\n\nOperations: " + ", ".join(sorted(OPS)) + "."

COMMANDS = (find, search, recall, grep, glob, ls, tree, read, write, remember, call)


def register(group: click.Group) -> None:
    for cmd in COMMANDS:
        group.add_command(cmd)
