"""CLI commands for tree changes, a node's summaries and tags, and the system: mkdir, rm, mv, stat,
abstract, overview, tags, skill, health, stats, whoami."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from skald.runtime.client.api import SkaldClient
from skald.runtime.doors.cli_client import connection, emit


@click.command()
@click.argument("uri")
@connection
async def mkdir(client: SkaldClient, output: str, uri: str) -> None:
    """Create a directory (and its parents)."""
    emit(output, await client.mkdir(uri), lambda r: f"created {uri}")


@click.command()
@click.argument("uri")
@click.option("-r", "--recursive", is_flag=True, help="Remove a directory and everything under it.")
@connection
async def rm(client: SkaldClient, output: str, uri: str, recursive: bool) -> None:
    """Remove a file, or a directory with -r; its index rows go with it."""
    emit(output, await client.rm(uri, recursive=recursive), lambda r: f"removed {uri}")


@click.command()
@click.argument("from_uri")
@click.argument("to_uri")
@connection
async def mv(client: SkaldClient, output: str, from_uri: str, to_uri: str) -> None:
    """Move a file or directory; it is indexed under its new place."""
    emit(output, await client.mv(from_uri, to_uri), lambda r: f"moved {from_uri} -> {to_uri}")


@click.command()
@click.argument("uri")
@connection
async def stat(client: SkaldClient, output: str, uri: str) -> None:
    """Size, kind and times of a node."""
    emit(output, await client.stat(uri),
         lambda r: "\n".join(f"{k}: {v}" for k, v in sorted(_plain(r).items()) if v not in (None, "", [], {})))


@click.command()
@click.argument("uri")
@connection
async def abstract(client: SkaldClient, output: str, uri: str) -> None:
    """A node's one-line summary (L0): what a directory or file is about."""
    emit(output, await client.abstract(uri), lambda r: r.content)


@click.command()
@click.argument("uri")
@connection
async def overview(client: SkaldClient, output: str, uri: str) -> None:
    """A node's overview (L1): its summary and what lies under it."""
    emit(output, await client.overview(uri), lambda r: r.content)


@click.command()
@click.argument("uri")
@click.argument("tags", nargs=-1, required=True)
@click.option("--mode", type=click.Choice(["replace", "add", "remove"]), default="replace", show_default=True)
@connection
async def tags(client: SkaldClient, output: str, uri: str, tags: tuple[str, ...], mode: str) -> None:
    """Set a file's k=v tags (keys are case-insensitive); `search --tags` and `find` filter on them."""
    emit(output, await client.set_tags(uri, list(tags), mode=mode), lambda r: f"{r.uri}: {', '.join(r.tags) or '-'}")


@click.command()
@click.argument("uri")
@click.option("--no-wait", is_flag=True, help="Queue the job and return.")
@connection
async def reindex(client: SkaldClient, output: str, uri: str, no_wait: bool) -> None:
    """Embed a file or subtree again with the workers' current embedder (after it changed: health's
    `rows_other_model` counts the rows no search can use until then)."""
    emit(output, await client.reindex(uri, wait=not no_wait),
         lambda r: f"{r.uri}: {r.rows} rows" if r.indexed else f"{r.uri}: queued as {r.index_job}")


@click.command()
@click.argument("source", type=click.Path(path_type=Path))
@click.option("--scope", type=click.Choice(["agent", "user"]), default="agent", show_default=True,
              help="The agent's skills or the user's, shared by their agents.")
@click.option("--tag", "tag_list", multiple=True, help="A k=v tag (repeatable).")
@connection
async def skill(client: SkaldClient, output: str, source: Path, scope: str, tag_list: tuple[str, ...]) -> None:
    """Add a skill: a SKILL.md file (sent as text), or a skill directory the server may read."""
    kw: dict[str, Any] = {"scope": scope, "wait": True, "tags": list(tag_list) or None}
    if source.is_file():
        kw["content"] = source.read_text(encoding="utf-8")
    else:
        kw["path"] = str(source.resolve())
    emit(output, await client.add_skill(**kw), lambda r: f"added {r.root_uri}")


@click.command()
@connection
async def whoami(client: SkaldClient, output: str) -> None:
    """The identity this connection acts as (account, user, agent, role)."""
    emit(output, await client.whoami(), lambda r: f"{r.account}/{r.user}/{r.agent} ({r.role})")


@click.command()
@connection
async def health(client: SkaldClient, output: str) -> None:
    """The answering worker: version, actors and their state (index lag, journal backlog...)."""

    def text(r: Any) -> str:
        lines = [f"{r.status} (skald {r.version}, worker {r.worker.worker_id if r.worker else '?'})"]
        for name, h in sorted(r.actors.items()):
            facts = ", ".join(f"{k}={v}" for k, v in h.items() if isinstance(v, int | float | str) and k != "status")
            lines.append(f"  {name}: {h.get('status', 'ok')}  {facts}")
        return "\n".join(lines)

    emit(output, await client.health(), text)


@click.command()
@connection
async def stats(client: SkaldClient, output: str) -> None:
    """Retrieval counters and queue depths."""
    emit(output, await client.stats(), lambda r: "\n".join(f"{k}: {v}" for k, v in sorted(_plain(r).items())))


def _plain(value: Any) -> dict[str, Any]:
    import msgspec

    out = msgspec.to_builtins(value)
    return out if isinstance(out, dict) else {"value": out}


COMMANDS = (mkdir, rm, mv, stat, abstract, overview, tags, reindex, skill, health, stats, whoami)


def register(group: click.Group) -> None:
    for cmd in COMMANDS:
        group.add_command(cmd)
