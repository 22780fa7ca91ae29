"""`skald store`: where a deployment's state lives, moved and tidied: the tree copied between the
data directory and JetStream, JetStream's unreferenced objects swept, the index's rows moved to
another shard count."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
import msgspec

from skald.runtime.host.command_config import command_config, config_option


@click.group()
def store() -> None:
    """Where the state lives: copy the tree (sessions and markers with it) between the data directory
    and JetStream, sweep JetStream's unreferenced objects, move the index to another shard count."""


@store.command("migrate")
@click.option("--to", "to", type=click.Choice(["jetstream", "local"]), required=True,
              help="jetstream: the data directory's tree into the bus's buckets; local: back into the data directory.")
@click.option("--data-dir", type=click.Path(path_type=Path), help="The data directory (default $SKALD_DATA_DIR).")
@click.option("--nats-url", help="NATS server URL(s), comma-separated (default $SKALD_NATS_URL).")
@click.option("--stream-replicas", type=click.IntRange(1, 5), help="Replicas of buckets it creates (default "
              "$SKALD_STREAM_REPLICAS or 1).")
@config_option
def store_migrate(to: str, data_dir: Path | None, nats_url: str | None, stream_replicas: int | None) -> None:
    """Copy the tree from one store to the other, every file verified by its SHA-256 read back.

    Resumable: run it again after an interruption and it copies only what is missing or different.
    Stop Skald first (files written during the copy may be missed). Prints a JSON report last.
    """
    from skald.runtime.host.migrate import migrate
    from skald.runtime.host.worker import worker_tree
    from skald.store.local_tree import LocalTree

    cfg = command_config(data_dir, nats_url, None)
    if stream_replicas is not None:
        cfg.stream_replicas = stream_replicas
    remote = worker_tree(cfg)
    local = LocalTree(cfg.data_dir)
    src, dst = (local, remote) if to == "jetstream" else (remote, local)
    try:
        rep = migrate(src, dst, progress=lambda r: click.echo(f"... {r.copied} copied, {r.skipped} already there",
                                                            err=True))
    finally:
        remote.close()
    click.echo(f"{rep.copied} files copied ({rep.bytes} bytes, {rep.archives} archives whole), {rep.skipped} "
               f"already there, {len(rep.mismatched)} failed verification", err=True)
    click.echo(msgspec.json.encode(rep).decode())
    if rep.mismatched:
        raise SystemExit(1)


@store.command("sweep")
@click.option("--older-than", "older_than", type=click.FloatRange(0), default=3600.0, show_default=True,
              help="Seconds: a younger object may belong to a write still in flight and is left alone.")
@click.option("--data-dir", type=click.Path(path_type=Path), help="The data directory (default $SKALD_DATA_DIR).")
@click.option("--nats-url", help="NATS server URL(s), comma-separated (default $SKALD_NATS_URL).")
@config_option
def store_sweep(older_than: float, data_dir: Path | None, nats_url: str | None) -> None:
    """Delete the JetStream tree's big-file objects that no file points at (left by a worker killed
    between storing an object and pointing a file at it, or between a file's change and its old
    object's deletion). Prints a JSON report last."""
    from skald.runtime.host.worker import worker_tree

    tree = worker_tree(command_config(data_dir, nats_url, None))
    try:
        rep = tree.sweep(older_than)
    finally:
        tree.close()
    click.echo(f"{len(rep.swept)} of {rep.objects} objects deleted ({rep.bytes} bytes) in {rep.accounts + 1} "
               f"buckets; {rep.young} too young to judge", err=True)
    click.echo(msgspec.json.encode(rep).decode())


@store.command("reshard")
@click.option("--shards", type=click.IntRange(1, 1024), required=True,
              help="The new shard count (then start the workers with SKALD_INDEX_SHARDS set to it).")
@click.option("--nats-url", help="NATS server URL(s), comma-separated (default $SKALD_NATS_URL).")
@click.option("--prefix", help="The deployment's subject prefix (default $SKALD_PREFIX).")
@config_option
def store_reshard(shards: int, nats_url: str | None, prefix: str | None) -> None:
    """Move the index's rows to the subjects of another shard count, embedding nothing again.

    Stop the workers first; run it again if it is interrupted. Prints a JSON report last.
    """
    import asyncio

    import nats

    from skald.messages import subjects
    from skald.runtime.bus.auth import WORKER_USER
    from skald.runtime.host.reshard import reshard
    from skald.runtime.host.worker import make_keys

    cfg = command_config(None, nats_url, None)
    if prefix:
        cfg.prefix = prefix
    keys = make_keys(cfg)
    login = {"user": WORKER_USER, "password": keys.worker_secret} if keys.enabled else {}

    async def run() -> Any:
        nc = await nats.connect(cfg.nats_urls or ["nats://127.0.0.1:4222"], inbox_prefix=subjects.WORKER_INBOX,
                                connect_timeout=5, max_reconnect_attempts=2, **login)
        try:
            return await reshard(nc.jetstream(timeout=30.0), cfg.prefix, shards,
                                 progress=lambda r: click.echo(f"... {r.rows} rows read, {r.moved} moved", err=True))
        finally:
            await nc.close()

    rep = asyncio.run(run())
    click.echo(f"{rep.rows} rows: {rep.moved} moved, {rep.kept} already under shard count {shards}", err=True)
    click.echo(msgspec.json.encode(rep).decode())


def register(group: click.Group) -> None:
    group.add_command(store)
