"""Snapshots: a deployment's state at one sequence of its event stream, so that replay starts
there and applies only the tail, and the stream may drop what a snapshot covers.

A snapshot is a directory:

    snapshot.json   the events-stream sequence it stands for, and what it holds
    tree.tar        the data directory's tree (not the worker's caches, the bus's store or locks)
    index.bin       the index stream's rows, each a length-prefixed row key and msgpack change (as
                    on the stream): replicas rebuild from them, so nothing is embedded again
    answers.jsonl   every model answer logged up to then (a replay re-applies them, never re-asks)
    usage.bin       the use counters' messages (active_count of each node), as on their stream

Restoring is two steps around starting the deployment: `restore_tree` (a data directory) or
`restore_into` (any store's tree, the JetStream one among them) before (the tree is the workers'
own state), `publish_state` after (rows and answers go into its streams).
"""

from __future__ import annotations

import asyncio
import shutil
import struct
import tarfile
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import msgspec
from nats.aio.client import Client as NATS
from nats.js.errors import NotFoundError

from skald.messages import subjects
from skald.messages.index import IndexChange
from skald.messages.journal import ModelOutput
from skald.runtime.bus.nats_bus import H_USAGE_NODE
from skald.runtime.bus.streams import stream_name
from skald.runtime.host.migrate import ROOTS, migrate
from skald.runtime.models import model_log
from skald.store import treeops
from skald.store.local_tree import LocalTree
from skald.store.treeport import Tree

META, TREE, INDEX, ANSWERS, USAGE = "snapshot.json", "tree.tar", "index.bin", "answers.jsonl", "usage.bin"
_change = msgspec.msgpack.Decoder(IndexChange)
_u32 = struct.Struct("<I")
FORMAT = 1
# Not part of a deployment's state: the worker's caches and replica snapshots, the bus's store, locks,
# and the notes of requests in flight (store/index_changes.py: job ids of the deployment that wrote them).
SKIPPED_TOP = (".skald", "nats", "index-changes")
RESTORING = "restoring"  # a tree key standing while `restore_into` copies (what it restores)


class SnapshotMeta(msgspec.Struct, kw_only=True):
    """What a snapshot holds: the events-stream sequence it stands for and its contents."""

    format: int = FORMAT
    events_seq: int  # the snapshot holds every write up to this sequence of the events stream
    created_at: float
    files: int
    rows: int
    answers: int
    models: list[str] = []  # the embedders that built the rows
    uses: int = 0  # use counters (nodes with an active_count)


def in_tree(rel: Path) -> bool:
    return bool(rel.parts) and rel.parts[0] not in SKIPPED_TOP and not rel.name.endswith(".lock")


def load_meta(snap: Path) -> SnapshotMeta:
    return msgspec.json.decode((snap / META).read_bytes(), type=SnapshotMeta)


def load_answers(snap: Path) -> list[ModelOutput]:
    dec = msgspec.json.Decoder(ModelOutput)
    path = snap / ANSWERS
    return [dec.decode(line) for line in path.read_bytes().splitlines() if line.strip()] if path.exists() else []


async def _messages(nc: NATS, stream: str, head: str) -> AsyncIterator[tuple[str, Any]]:
    """Every message of a stream under `head`, oldest first, with its subject's tail."""
    js = nc.jetstream(timeout=10.0)
    seq = 1
    while True:
        try:
            msg = await js.get_msg(stream, seq=seq, subject=f"{head}>", next=True)
        except NotFoundError:
            return
        yield (msg.subject or "")[len(head):], msg
        seq = (msg.seq or seq) + 1


async def index_rows(nc: NATS, prefix: str) -> list[tuple[str, bytes]]:
    """The index stream's rows (row key, change), oldest first: its latest state, one per row."""
    return [(key, bytes(msg.data or b"")) async for key, msg in
            _messages(nc, stream_name(prefix, "index"), f"{prefix}.index.row.")]


async def use_counters(nc: NATS, prefix: str) -> list[tuple[str, bytes]]:
    """The use counters (subject token, [node header, total])."""
    out = []
    async for token, msg in _messages(nc, stream_name(prefix, "usage"), f"{prefix}.usage."):
        total = int(msgspec.json.decode(msg.data or b'{"val": "0"}')["val"])
        out.append((token, msgspec.json.encode([(msg.headers or {}).get(H_USAGE_NODE, ""), total])))
    return out


async def capture(nc: NATS, prefix: str, data_dir: Path, out: Path, *, events_seq: int,
                  answers: list[ModelOutput]) -> SnapshotMeta:
    """Write a snapshot of a deployment whose writes are settled (nothing queued, replicas caught
    up); `events_seq` is the sequence it stands for. Written beside `out` and renamed into place."""
    rows = await index_rows(nc, prefix)
    uses = await use_counters(nc, prefix)
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    files = await asyncio.to_thread(_tar_tree, data_dir, tmp / TREE)
    _write_records(tmp / INDEX, rows)
    _write_records(tmp / USAGE, uses)
    models = {m for _, data in rows if (m := getattr(_change.decode(data).upsert, "model", ""))}
    unique = {a.key: a for a in answers}  # the latest answer per key, as the log is read
    with (tmp / ANSWERS).open("wb") as f:
        for a in unique.values():
            f.write(msgspec.json.encode(a) + b"\n")
    meta = SnapshotMeta(events_seq=events_seq, created_at=time.time(), files=files, rows=len(rows),
                        answers=len(unique), models=sorted(models), uses=len(uses))
    (tmp / META).write_bytes(msgspec.json.format(msgspec.json.encode(meta)))
    if out.exists():
        old = out.with_name(out.name + ".old")
        shutil.rmtree(old, ignore_errors=True)
        out.rename(old)
        tmp.rename(out)
        shutil.rmtree(old, ignore_errors=True)
    else:
        tmp.rename(out)
    return meta


def _tar_tree(data_dir: Path, dest: Path) -> int:
    n = 0
    with tarfile.open(dest, "w") as tar:
        for p in sorted(data_dir.rglob("*")):
            rel = p.relative_to(data_dir)
            if not in_tree(rel) or p.is_symlink():
                continue
            if p.is_file():
                tar.add(p, arcname=str(rel), recursive=False)
                n += 1
            elif p.is_dir():
                tar.add(p, arcname=str(rel), recursive=False)
    return n


def restore_tree(snap: Path, data_dir: Path) -> int:
    """Unpack the snapshot's tree into a data directory that has none yet (before its workers start)."""
    data_dir.mkdir(parents=True, exist_ok=True)
    if any(in_tree(p.relative_to(data_dir)) for p in data_dir.iterdir()):
        raise FileExistsError(f"{data_dir} already holds a tree: restore into an empty data directory")
    with tarfile.open(snap / TREE) as tar:
        members = tar.getmembers()
        tar.extractall(data_dir, filter="data")
    return sum(m.isfile() for m in members)


def restore_into(snap: Path, tree: Tree, scratch: Path) -> int:
    """Put the snapshot's tree into a store's tree that holds none yet (a JetStream deployment's,
    before its workers start): unpacked into `scratch`, then copied file by file, each verified by
    its digest read back (`skald store migrate`'s copy). A `restoring` key stands while it runs, so
    an interrupted restore is finished by running it again, and only that is let into a tree that
    holds something. The number of files the tree holds from the snapshot."""
    held = [r for r in ROOTS if treeops.listdir(tree, r, show_hidden=True, missing_ok=True, details=False)]
    if held and tree.stat(RESTORING) is None:
        raise FileExistsError(f"the store already holds a tree ({', '.join(held)}): restore into an empty one")
    tree.write(RESTORING, (snap / META).read_bytes())
    work = Path(tempfile.mkdtemp(prefix="restore-", dir=scratch))
    try:
        restore_tree(snap, work)
        rep = migrate(LocalTree(work), tree)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if rep.mismatched:
        raise OSError(f"{len(rep.mismatched)} files did not read back as written: {rep.mismatched[:5]}")
    tree.remove(RESTORING)
    return rep.copied + rep.skipped


def _write_records(path: Path, records: list[tuple[str, bytes]]) -> None:
    """Length-prefixed (key, data) pairs."""
    with path.open("wb") as f:
        for key, data in records:
            k = key.encode()
            f.write(_u32.pack(len(k)) + k + _u32.pack(len(data)) + data)


def read_rows(snap: Path, name: str = INDEX) -> Iterator[tuple[str, bytes]]:
    if not (snap / name).exists():
        return
    buf = memoryview((snap / name).read_bytes())
    at = 0
    while at < len(buf):
        (n,) = _u32.unpack_from(buf, at)
        key = bytes(buf[at + 4 : at + 4 + n]).decode()
        at += 4 + n
        (n,) = _u32.unpack_from(buf, at)
        yield key, bytes(buf[at + 4 : at + 4 + n])
        at += 4 + n


async def publish_state(nc: NATS, prefix: str, snap: Path, window: int = 256) -> tuple[int, int]:
    """Put the snapshot's index rows and model answers into a deployment's streams (its workers
    running: the replicas follow the index stream). Returns (rows, answers)."""
    js = nc.jetstream(timeout=10.0)
    rows = 0
    pending: list[Any] = []
    for key, data in read_rows(snap):
        pending.append(js.publish(subjects.index_row(prefix, key), data))
        rows += 1
        if len(pending) >= window:
            await asyncio.gather(*pending)
            pending = []
    await asyncio.gather(*pending)
    pending = []
    for token, data in read_rows(snap, USAGE):  # a counter starts again from its total
        node, total = msgspec.json.decode(data)
        pending.append(js.publish(subjects.usage(prefix, token), b"",
                                  headers={"Nats-Incr": f"+{int(total)}", H_USAGE_NODE: node}))
    await asyncio.gather(*pending)
    answers = load_answers(snap)
    await model_log.publish_answers(nc, prefix, answers, "restore")
    return rows, len(answers)

