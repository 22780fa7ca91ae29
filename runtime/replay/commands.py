"""`skald replay`: record a deployment's journal, apply it elsewhere, and keep it short with
snapshots (`compact` rolls one forward and may drop the events it covers; `restore` starts a
new deployment from one).

Moving a deployment with a snapshot:

    skald replay compact --snapshot snap/                    # on the old deployment
    skald replay record --after-snapshot snap/ --out tail.jsonl
    skald replay restore --snapshot snap/ --data-dir new/    # before the new deployment starts
                                                             # (--store jetstream: into the bus's buckets)
    skald up --data-dir new/ &                               # (or its workers)
    skald replay apply --snapshot snap/ --in tail.jsonl      # rows and answers, then the tail
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import click

# A command, not a service: a refused or unreachable bus is an error now, not after minutes of retries.
FAIL_FAST = {"connect_timeout": 2, "max_reconnect_attempts": 2, "reconnect_time_wait": 0.5}

_conn = [click.option("--nats-url", envvar="SKALD_NATS_URL", default="nats://127.0.0.1:4222", show_default=True),
         click.option("--prefix", envvar="SKALD_PREFIX", default="skald", show_default=True)]
_keys = click.option("--keys-file", envvar="SKALD_KEYS_FILE", type=click.Path(dir_okay=False, path_type=Path),
                     help="With keys configured the event stream is for workers: log in with the file's worker secret.")
_snapshot = click.option("--snapshot", "snap", type=click.Path(file_okay=False, path_type=Path),
                         help="A snapshot directory (`skald replay compact` writes it).")


def _with_conn(fn):  # type: ignore[no-untyped-def]
    for opt in reversed(_conn):
        fn = opt(fn)
    return fn


def _worker_login(keys_file: Path | None) -> dict[str, Any]:
    from skald.messages import subjects
    from skald.runtime.bus import keys as key_store
    from skald.runtime.bus.auth import WORKER_USER

    login: dict[str, Any] = {"inbox_prefix": subjects.WORKER_INBOX, **FAIL_FAST}
    if keys_file:
        login.update(user=WORKER_USER, password=str(key_store.load(keys_file).get("worker_secret", "")))
    return login


@click.group()
def replay() -> None:
    """Record a deployment's write journal to a file; replay it into another deployment; snapshots."""


@replay.command("record")
@_with_conn
@click.option("--out", "out", type=click.Path(dir_okay=False, path_type=Path), required=True)
@_keys
@click.option("--after-snapshot", "snap", type=click.Path(file_okay=False, exists=True, path_type=Path),
              help="Only what came after this snapshot (its tail).")
def replay_record(nats_url: str, prefix: str, out: Path, keys_file: Path | None, snap: Path | None) -> None:
    """Write every journaled write and model answer (oldest first) to a JSON-lines file."""
    import nats as natsio

    from skald.runtime.replay import journal as journal_replay
    from skald.runtime.replay import snapshots

    after = snapshots.load_meta(snap).events_seq if snap else 0

    async def run() -> list[Any]:
        nc = await natsio.connect(nats_url, **_worker_login(keys_file))
        try:
            return await journal_replay.record(nc, prefix, after=after)
        finally:
            await nc.close()

    entries = asyncio.run(run())
    journal_replay.save(entries, out)
    answers = sum(e.op == journal_replay.MODEL_OP for e in entries)
    click.echo(f"recorded {len(entries) - answers} writes and {answers} model answers to {out}")


@replay.command("apply")
@_with_conn
@click.option("--in", "src", type=click.Path(exists=True, dir_okay=False, path_type=Path), required=True)
@click.option("--api-key", envvar="SKALD_API_KEY", help="A root key, when the target requires keys.")
@_keys
@_snapshot
def replay_apply(nats_url: str, prefix: str, src: Path, api_key: str | None, keys_file: Path | None,
                 snap: Path | None) -> None:
    """Re-send a recorded journal, in order, with its original identities and clock; with
    --snapshot, the snapshot's index rows and model answers go in first (after `replay restore`)."""
    import nats as natsio

    from skald.runtime.client.login import client_login
    from skald.runtime.replay import journal as journal_replay
    from skald.runtime.replay import snapshots

    entries = journal_replay.load(src)

    async def run() -> int:
        if snap:
            nc = await natsio.connect(nats_url, **_worker_login(keys_file))
            try:
                rows, answers = await snapshots.publish_state(nc, prefix, snap)
                click.echo(f"snapshot: {rows} index rows and {answers} model answers published")
            finally:
                await nc.close()
        nc = await natsio.connect(nats_url, **FAIL_FAST, **(client_login(api_key) if api_key else {}))
        try:
            if sys.stderr.isatty():
                with click.progressbar(length=len(entries), label="replaying", file=sys.stderr) as bar:
                    return await journal_replay.apply(nc, prefix, entries, api_key=api_key,
                                                      progress=lambda n: bar.update(n - bar.pos))
            return await journal_replay.apply(nc, prefix, entries, api_key=api_key)
        finally:
            await nc.close()

    click.echo(f"replayed {asyncio.run(run())} writes")


@replay.command("compact")
@_with_conn
@_keys
@click.option("--snapshot", "snap", type=click.Path(file_okay=False, path_type=Path), required=True,
              help="The snapshot directory: created, or rolled forward from where it stands.")
@click.option("--purge", is_flag=True, help="Then drop the events the snapshot covers from the stream.")
@click.option("--timeout", "timeout_s", type=float, default=600.0, show_default=True,
              help="Seconds to wait for the work queue to settle, and for the replay.")
def replay_compact(nats_url: str, prefix: str, keys_file: Path | None, snap: Path, purge: bool,
                   timeout_s: float) -> None:
    """Roll a snapshot forward to the deployment's settled head, by replaying the tail in a scratch
    deployment (run it with the workers' settings: the same embedder and model)."""
    import nats as natsio

    from skald.runtime.host.config import Config
    from skald.runtime.replay import compaction

    cfg = Config.from_env()  # SKALD_* settings (and SKALD_CONFIG), as the workers have them

    async def run() -> Any:
        nc = await natsio.connect(nats_url, **_worker_login(keys_file))
        try:
            return await compaction.compact(nc, prefix, snap, cfg, purge=purge, timeout_s=timeout_s)
        finally:
            await nc.close()

    try:
        meta = asyncio.run(run())
    except compaction.CompactError as e:
        raise click.ClickException(str(e)) from e
    click.echo(f"snapshot {snap} at event {meta.events_seq}: {meta.files} files, {meta.rows} index rows, "
               f"{meta.answers} model answers{' (covered events purged)' if purge else ''}")


@replay.command("restore")
@click.option("--snapshot", "snap", type=click.Path(file_okay=False, exists=True, path_type=Path), required=True)
@click.option("--data-dir", type=click.Path(file_okay=False, path_type=Path), required=True,
              help="The new deployment's data directory (with --store jetstream, only its scratch space).")
@click.option("--store", type=click.Choice(["local", "jetstream"]), default="local", show_default=True,
              help="Where the tree goes: the data directory, or the bus's buckets (a deployment with no shared disk).")
@_with_conn
@_keys
def replay_restore(snap: Path, data_dir: Path, store: str, nats_url: str, prefix: str,
                   keys_file: Path | None) -> None:
    """Put a snapshot's tree into an empty store, before its deployment starts; then
    `replay apply --snapshot` puts its index rows and model answers in, with the tail."""
    from skald.runtime.replay import snapshots

    try:
        if store == "local":
            n = snapshots.restore_tree(snap, data_dir)
        else:
            n = _restore_jetstream(snap, data_dir, nats_url, prefix, keys_file)
    except FileExistsError as e:
        raise click.ClickException(str(e)) from e
    meta = snapshots.load_meta(snap)
    where = data_dir if store == "local" else f"the {prefix}_tree buckets"
    click.echo(f"restored {n} files (event {meta.events_seq}) into {where}")


def _restore_jetstream(snap: Path, data_dir: Path, nats_url: str, prefix: str, keys_file: Path | None) -> int:
    from skald.runtime.host.config import Config
    from skald.runtime.host.worker import worker_tree
    from skald.runtime.replay import snapshots

    cfg = Config.from_env(data_dir=data_dir, nats_url=nats_url)  # replicas and placement as the workers have them
    cfg.prefix = prefix
    if keys_file is not None:
        cfg.keys_file = str(keys_file)
    tree = worker_tree(cfg)
    data_dir.mkdir(parents=True, exist_ok=True)
    try:
        return snapshots.restore_into(snap, tree, data_dir)
    finally:
        tree.close()


def register(group: click.Group) -> None:
    group.add_command(replay)
