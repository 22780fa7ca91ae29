"""CLI commands for tree changes and the system: mkdir, rm, mv, stat, health, stats."""

from __future__ import annotations

from typing import Any

import click

from skald.runtime.cli_client import connection, emit
from skald.runtime.client import SkaldClient


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


COMMANDS = (mkdir, rm, mv, stat, health, stats)


def register(group: click.Group) -> None:
    for cmd in COMMANDS:
        group.add_command(cmd)
