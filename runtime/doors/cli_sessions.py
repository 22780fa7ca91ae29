"""`skald session ...` and `skald memory ...`: the conversation and memory commands of the client
CLI (output and connection handling shared with `cli_client.py`)."""

from __future__ import annotations

from typing import Any

import click

from skald.messages.sessions import AutoCommit
from skald.runtime.client.api import SkaldClient
from skald.runtime.doors.cli_client import connection, emit


@click.group()
def memory() -> None:
    """Memories: update, forget, history (every change keeps the text it replaced)."""


@memory.command("update")
@click.argument("uri")
@click.argument("content")
@connection
async def memory_update(client: SkaldClient, output: str, uri: str, content: str) -> None:
    """Replace a memory's text: skald memory update viking://~/memories/preferences/tea.md "Prefers coffee"."""
    emit(output, await client.update_memory(uri, content), lambda r: f"updated {r.root_uri}")


@memory.command("forget")
@click.argument("uri")
@connection
async def memory_forget(client: SkaldClient, output: str, uri: str) -> None:
    """Delete a memory (its versions are kept for `skald memory history`)."""
    emit(output, await client.forget(uri), lambda r: f"forgot {r.uri}")


@memory.command("history")
@click.argument("uri")
@connection
async def memory_history(client: SkaldClient, output: str, uri: str) -> None:
    """A memory's text now and every earlier version."""
    def text(r: Any) -> str:
        lines = [f"v{v.version} ({v.reason}): {v.content}" for v in r.versions]
        return "\n".join([*lines, f"now: {r.current if r.current is not None else '(forgotten)'}"])

    emit(output, await client.memory_history(uri), text)


@click.group()
def session() -> None:
    """Sessions: create, add messages, commit, read the context."""


@session.command("create")
@click.argument("session_id", required=False)
@click.option("--auto-commit-messages", type=click.IntRange(1, 100_000), help="commit once this many live messages")
@click.option("--auto-commit-tokens", type=click.IntRange(64, 10_000_000), help="... or this many live tokens")
@click.option("--auto-commit-idle", type=click.FloatRange(1.0, 30 * 86_400.0), help="... or this many idle seconds")
@connection
async def session_create(client: SkaldClient, output: str, session_id: str | None, auto_commit_messages: int | None,
                         auto_commit_tokens: int | None, auto_commit_idle: float | None) -> None:
    """Create a session; the --auto-commit-* options set its policy (the session commits itself)."""
    policy = None
    if auto_commit_messages or auto_commit_tokens or auto_commit_idle:
        policy = AutoCommit(pending_messages=auto_commit_messages, pending_tokens=auto_commit_tokens,
                            idle_s=auto_commit_idle)
    emit(output, await client.session_create(session_id, policy), lambda r: r.session_id)


@session.command("add")
@click.argument("session_id")
@click.argument("role", type=click.Choice(["user", "assistant"]))
@click.argument("text")
@connection
async def session_add(client: SkaldClient, output: str, session_id: str, role: str, text: str) -> None:
    """Append a text message (the first one to a session id starts that session, and says so)."""
    r = await client.add_message(session_id, role, text)
    if r.total_message_count == 1 and not r.duplicate:
        click.echo(f"note: {session_id!r} had no messages: this one starts it (`skald session list` shows the "
                   "others)", err=True)
    emit(output, r, lambda r: f"{r.message_id} ({r.message_count} live messages)")


@session.command("commit")
@click.argument("session_id")
@click.option("--keep", "keep_recent_count", type=int, help="Raw messages to keep live.")
@click.option("--wait", is_flag=True, help="Wait for the background summary (Phase 2).")
@connection
async def session_commit(client: SkaldClient, output: str, session_id: str, keep_recent_count: int | None,
                         wait: bool) -> None:
    """Archive the live messages (Phase 1, at once) and summarise them into memories (Phase 2)."""
    kw: dict[str, Any] = {"wait": wait}
    if keep_recent_count is not None:
        kw["keep_recent_count"] = keep_recent_count
    emit(output, await client.commit(session_id, **kw), lambda r: f"{r.status} {r.archive_uri or ''}".strip())


@session.command("context")
@click.argument("session_id")
@connection
async def session_context(client: SkaldClient, output: str, session_id: str) -> None:
    """The session's context: latest archive overview, then live messages."""

    def text(r: Any) -> str:
        lines = [r.latest_archive_overview.strip()] if r.latest_archive_overview else []
        lines += [f"[{m.role}] " + " ".join(getattr(p, "text", "") or f"<{p.__class__.__name__}>" for p in m.parts)
                  for m in r.messages]
        return "\n".join(lines) or "(empty)"

    emit(output, await client.session_context(session_id), text)


@session.command("list")
@connection
async def session_list(client: SkaldClient, output: str) -> None:
    """The caller's sessions and their message counts."""
    emit(output, await client.session_list(),
         lambda r: "\n".join(f"{s.session_id}  {s.total_message_count} messages ({s.message_count} live), "
                             f"{s.commit_count} commits" for s in r.sessions) or "(none)")


@session.command("get")
@click.argument("session_id")
@connection
async def session_get(client: SkaldClient, output: str, session_id: str) -> None:
    """A session's counters: live and total messages, commits, archives, auto-commit policy."""
    emit(output, await client.session_get(session_id),
         lambda r: f"{r.session_id}  {r.message_count} live / {r.total_message_count} messages, "
                   f"{r.commit_count} commits, {r.archives} archives")


@session.command("retry-archive")
@click.argument("session_id")
@click.argument("archive_id")
@connection
async def session_retry_archive(client: SkaldClient, output: str, session_id: str, archive_id: str) -> None:
    """Run a failed or quarantined archive's summary (Phase 2) again."""
    emit(output, await client.retry_archive(session_id, archive_id), lambda r: f"{r.archive_id}  {r.state}")


@session.command("delete")
@click.argument("session_id")
@connection
async def session_delete(client: SkaldClient, output: str, session_id: str) -> None:
    """Delete a session: its messages, archives and tool outputs."""
    emit(output, await client.session_delete(session_id), lambda r: f"deleted {r.session_id}")


@session.command("archives")
@click.argument("session_id")
@connection
async def session_archives(client: SkaldClient, output: str, session_id: str) -> None:
    """The session's archives and their Phase 2 state."""
    emit(output, await client.archives(session_id),
         lambda r: "\n".join(f"{a.archive_id}  {a.state}  {a.message_count} messages" for a in r.archives)
         or "(none)")


@session.command("used")
@click.argument("session_id")
@click.argument("uris", nargs=-1, required=True)
@connection
async def session_used(client: SkaldClient, output: str, session_id: str, uris: tuple[str, ...]) -> None:
    """Report what the agent used of what it was given: each node's use count goes up by one."""
    emit(output, await client.used(session_id, list(uris)), lambda r: "\n".join(f"counted {u}" for u in r.counted))


COMMANDS = (memory, session)


def register(group: click.Group) -> None:
    for cmd in COMMANDS:
        group.add_command(cmd)
