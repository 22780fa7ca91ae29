"""`index-changes/<job id>`: a move or removal noted before it changes the tree, with the index
job that follows it, dropped once that job is queued.

A write that is retried converges by itself (the retry writes and indexes again), but a move or
removal retried after its worker died between the tree change and the job finds nothing at its
source and answers NOT_FOUND: without this note the index would keep the source's rows for ever.
An indexer finishes the notes a dead request left (`actors/indexer/changes.py`): where the source
is gone the change happened and its job is queued again (every step of a job is by key, so a job
queued twice does no harm); where the source still stands the change never happened and the note
is dropped. Notes live outside every account, in one directory, so a pass is one listing.
"""

from __future__ import annotations

import msgspec

from skald.messages.ingest import IngestJob
from skald.store import treeops
from skald.store.treeport import Tree

CHANGES_DIR = "index-changes"


class PendingChange(msgspec.Struct, kw_only=True, frozen=True):
    """A move or removal about to change the tree: the node it takes away (a tree key), where a
    move puts it, when the note was written (wall clock) and the job that updates the index."""

    source: str
    destination: str = ""  # empty for a removal
    at: float
    job: IngestJob


_dec = msgspec.msgpack.Decoder(PendingChange)
_enc = msgspec.msgpack.Encoder()


def note_key(job_id: str) -> str:
    return f"{CHANGES_DIR}/{job_id}"


def note(tree: Tree, change: PendingChange) -> None:
    """Durable before the tree changes (the tree's write is atomic and synced)."""
    tree.write(note_key(change.job.job_id), _enc.encode(change))


def drop(tree: Tree, job_id: str) -> None:
    """The note gone (already gone is fine: a recovering indexer may have finished it)."""
    try:
        tree.remove(note_key(job_id))
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
        pass


def pending(tree: Tree) -> list[PendingChange]:
    """Every note, oldest first; one that cannot be read (a torn or foreign file) is skipped and
    left for an operator, never guessed at."""
    out = []
    for e in treeops.listdir(tree, CHANGES_DIR, missing_ok=True):
        if e.is_dir:
            continue
        try:
            out.append(_dec.decode(tree.read(note_key(e.name))))
        except (FileNotFoundError, msgspec.DecodeError, msgspec.ValidationError):
            continue
    return sorted(out, key=lambda c: c.at)


def to_finish(change: PendingChange, source_exists: bool) -> IngestJob | None:
    """The job a dead request's note still owes the index: none while its source stands (the
    change never happened, or the node was made again since and its own writes index it), else the
    noted job (its rows of the source dropped, the destination indexed if it is still there)."""
    return None if source_exists else change.job
