"""`index-changes/<job id>`: a move or removal noted before it changes the tree, with the index
job that follows it, dropped once that job is queued; `index-changes/writes/<minute>/<job id>`: a
write noted before it, dropped with its minute's group.

A move or removal retried after its worker died between the tree change and the job finds nothing
at its source and answers NOT_FOUND: without this note the index would keep the source's rows for
ever. An import (`resources.add` of a folder, file, URL or upload) notes its job the same way,
with the rows of the files it removes because they vanished from the source: retried, it would
no longer see them. A write is not retried by the client on its own (an append sent twice appends twice), so
one whose worker died there left a file the tree serves and no search finds until somebody writes
it again. An indexer finishes the notes a dead request left (`actors/indexer/changes.py`), by
whether the node the note watches stands: a move's or removal's source gone, or a write's file
there with its job not done, means the change may have happened and its job is queued again
(every step of a job is by key, so a job queued twice, or a file indexed again as it stands, does
no harm); otherwise the note goes. Notes live outside every account, in one directory, so a pass
is a listing or two.

A write's note costs one unsynced put before the file and no removal of its own: a move's way, a
synced note before the change and a removal after it, made fs.write about twice as slow on the
JetStream tree (docs/design/storage.md).
"""

from __future__ import annotations

import msgspec

from skald.messages.ingest import IngestJob
from skald.store import treeops
from skald.store.treeport import Tree

CHANGES_DIR = "index-changes"
WRITES_DIR = f"{CHANGES_DIR}/writes"  # writes' notes, in groups by minute (`note_write`)
WRITE_GROUP_S = 60


class PendingChange(msgspec.Struct, kw_only=True, frozen=True):
    """A change about to be made to the tree: the node it takes away (a tree key; empty for a
    write or an import), where a move, write or import puts it, when the note was written (wall
    clock) and the job that updates the index. `until`: the deadline of a request that may run
    longer than a pass waits (an import's, 600 s), 0 for the rest. `lease`: a key the request
    holds while it runs (an import's); once it has lapsed the request is dead, and a pass need
    not wait for the deadline."""

    source: str
    destination: str = ""  # empty for a removal
    at: float
    job: IngestJob
    until: float = 0.0
    lease: str = ""

    def ripe(self, now: float, older_than_s: float) -> bool:
        """Old enough for a pass: no request can still be making the change (the note is
        `older_than_s` old, counted from the request's deadline when it gave one)."""
        return now >= self.ripe_at(older_than_s)

    def ripe_at(self, older_than_s: float) -> float:
        """When the note becomes old enough for a pass (wall clock)."""
        return max(self.at, self.until) + older_than_s

    @property
    def watched(self) -> str:
        """The node whose presence says whether the change may have happened: the source taken
        away (a move or removal), or the file written."""
        return self.source or self.destination


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


def note_write(tree: Tree, change: PendingChange) -> None:
    """A write's note, put before its file as a note of the tree's (`Tree.put_note`: one unsynced
    put; it only has to outlive the worker, which the page cache or the stream does) into the
    group of its minute. It is never dropped one by one: a pass takes a group once its minute is
    past the recovery age, queues the jobs no worker finished, and drops the group at once."""
    tree.put_note(write_note_key(change), _enc.encode(change))


def drop_write(tree: Tree, change: PendingChange) -> None:
    """One write's note gone (a refused write's: it changed nothing)."""
    try:
        tree.remove(write_note_key(change))
    except FileNotFoundError:
        pass


def write_group(at: float) -> str:
    return f"{WRITES_DIR}/{int(at // WRITE_GROUP_S)}"


def write_note_key(change: PendingChange) -> str:
    return f"{write_group(change.at)}/{change.job.job_id}"


def write_groups(tree: Tree) -> list[tuple[float, str]]:
    """(when its minute began, its key) of every group of write notes, oldest first."""
    found = [e.name for e in treeops.listdir(tree, WRITES_DIR, missing_ok=True, details=False)
             if e.is_dir and e.name.isdigit()]
    return sorted((int(n) * WRITE_GROUP_S, f"{WRITES_DIR}/{n}") for n in found)


def writes_in(tree: Tree, group: str) -> list[PendingChange]:
    """A group's notes (one that cannot be read is skipped: the group goes with it)."""
    names = [e.name for e in treeops.listdir(tree, group, missing_ok=True, details=False)]
    return _decoded(tree.read_many([f"{group}/{n}" for n in names]))


def _decoded(found: list[bytes | None]) -> list[PendingChange]:
    """The notes that read and decode (a missing or torn one is left out)."""
    out = []
    for data in found:
        try:
            if data is not None:
                out.append(_dec.decode(data))
        except (msgspec.DecodeError, msgspec.ValidationError):
            continue
    return out


def drop_group(tree: Tree, group: str) -> None:
    """A group of write notes gone at once (one purge on the JetStream tree)."""
    try:
        tree.remove(group, recursive=True)
    except FileNotFoundError:
        pass


def pending(tree: Tree) -> list[PendingChange]:
    """Every note, oldest first; one that cannot be read (a torn or foreign file) is skipped and
    left for an operator, never guessed at."""
    names = [e.name for e in treeops.listdir(tree, CHANGES_DIR, missing_ok=True, details=False) if not e.is_dir]
    return sorted(_decoded(tree.read_many([note_key(n) for n in names])), key=lambda c: c.at)


def to_finish(change: PendingChange, watched_exists: bool) -> IngestJob | None:
    """The job a dead request's note still owes the index. A move or removal: none while its source
    stands (the change never happened, or the node was made again since and its own writes index
    it), else the noted job (its rows of the source dropped, the destination indexed if it is still
    there). A write or import whose job is not done (the caller asks the events first): the job
    while its destination stands (written or not, indexing it as it is now is right); once it is
    gone (never written, or removed since by a request of its own), only the removals an import
    noted (rows of the files it took away, which nothing under a gone destination can need)."""
    if not change.source:
        if watched_exists:
            return change.job
        return msgspec.structs.replace(change.job, index_roots=(), refresh_dirs=()) if change.job.remove_rows \
            else None
    return None if watched_exists else change.job
