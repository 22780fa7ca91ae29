"""Group commit for add_message, and the session's write journal.

Appends waiting at the same moment, across sessions, share one thread hop and one flush (a write
per file, then one `syncfs` for them all). Once a line is on the disk the message is accepted,
whatever happens next: the caller is never told an add failed after its line reached the disk (a
retry would then store it twice).

The journal of add_message is one `session.messages_added.<session key>` event per session per
batch, published in order by that session's publisher. The file is the outbox: when JetStream
cannot take the event (a leader election), the caller is answered anyway and the publisher keeps
trying; after a crash the session's next owner compares the stream's last event for the session
with the live messages and publishes what is missing (`recover`). Each event carries a
`Nats-Msg-Id` derived from its message ids, so a publish retried inside the stream's duplicate
window is stored once.

A request whose deadline passes while its line is still queued is dropped before the write
(DEADLINE_EXCEEDED, nothing stored); one whose line is already being written waits for it and is
answered as accepted.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from skald.actors.kit.ports import Events
from skald.messages.sessions import AddedEntry, Message, MessagesAdded
from skald.store import faults, groupsync, message_lines
from skald.store.local_tree import LocalTree
from skald.store.treeport import Tree

log = logging.getLogger("skald.session")
MAX_BATCH = 256
EVENT_WAIT_S = 2.0  # how long a caller waits for its batch's event before being answered anyway
_added = msgspec.json.Decoder(MessagesAdded)


def event_name(key: str) -> str:
    return f"session.messages_added.{key}"


def event_id(key: str, messages: list[Message]) -> str:
    ids = ";".join(m.id for m in messages)
    return "added-" + hashlib.sha1(f"{key}/{ids}".encode()).hexdigest()


def unpublished(root: list[Message], last_published: str | None) -> list[Message]:
    """Live messages the journal does not have yet. Messages are appended in order and a commit
    waits for the journal before archiving, so everything after the last published id is missing;
    when that id is no longer live (archived), every live message came after it."""
    ids = [m.id for m in root]
    if last_published in ids:
        return root[ids.index(last_published) + 1:]
    return list(root)


@dataclass(slots=True)
class _Entry:
    """One queued line. `durable` and `published` are awaited by the caller alone (never shielded:
    a cancelled caller cancels only its own future); the entry's own state is in its fields, and
    the drain settles each entry exactly once (`_settle`)."""
    key: str
    session_id: str
    log: str  # the live log's key in the tree
    msg: Message
    ident: Any
    durable: asyncio.Future[None]
    published: asyncio.Future[None]
    fence: Callable[[], None]  # raises when this worker may no longer write the session
    claimed: bool = False  # taken into a batch being written
    dropped: bool = False  # its caller gave up before the write
    settled: asyncio.Future[None] | None = None  # its batch's end, for a caller cancelled mid-write
    error: BaseException | None = None  # why its line was not accepted


@dataclass(slots=True)
class _Pending:
    event: MessagesAdded
    msg_id: str
    waiters: list[asyncio.Future[None]] = field(default_factory=list)


class _LocalAppended:
    """A batch's lines on this host's disk: written to the page cache now, made durable for every
    file by one flush (`groupsync`) in `sync`; failures by key."""

    def __init__(self, tree: LocalTree) -> None:
        self.tree = tree
        self.out = groupsync.Appended()
        self.keys: dict[Path, str] = {}

    def write(self, key: str, lines: bytes) -> None:
        path = self.tree.path(key)
        self.keys[path] = key
        self.out.write(path, lines)

    def sync(self) -> None:
        self.out.sync()

    def close(self) -> dict[str, BaseException]:
        return {self.keys[p]: exc for p, exc in self.out.close().items()}


class _PortAppended:
    """A batch's lines on a tree elsewhere (JetStream): each log's lines appended through the port
    in `sync` (durable, replicated, when the call returns); failures by key."""

    def __init__(self, tree: Tree) -> None:
        self.tree = tree
        self.lines: dict[str, bytes] = {}
        self.failed: dict[str, BaseException] = {}

    def write(self, key: str, lines: bytes) -> None:
        self.lines[key] = self.lines.get(key, b"") + lines

    def sync(self) -> None:
        many = getattr(self.tree, "append_many", None)  # a tree that appends to many logs at once
        if many is not None:
            self.failed = many(self.lines)
            return
        for key, data in self.lines.items():
            try:
                self.tree.append(key, data)
            except Exception as exc:  # noqa: BLE001 - its callers hear it; nothing of theirs was accepted
                self.failed[key] = exc

    def close(self) -> dict[str, BaseException]:
        return self.failed


def _write(batch: list[_Entry], tree: Tree) -> _LocalAppended | _PortAppended:
    """Each session log's lines appended (not yet durable: `sync` does that for all)."""
    by_log: dict[str, list[Message]] = {}
    for e in batch:
        by_log.setdefault(e.log, []).append(e.msg)
    out = _LocalAppended(tree) if isinstance(tree, LocalTree) else _PortAppended(tree)
    for key, msgs in by_log.items():
        out.write(key, message_lines.encode_lines(msgs))
    return out


def _release(futs: list[asyncio.Future[None]]) -> None:
    for f in futs:
        if not f.done():
            f.set_result(None)


class AppendBatcher:
    """add_message's journal events published in batches, each acknowledged before its message's reply."""

    def __init__(self, bus: Events, tree: Tree) -> None:
        self.bus = bus
        self.tree = tree
        self._queue: list[_Entry] = []
        self._task: asyncio.Task[None] | None = None
        self._pending: dict[str, deque[_Pending]] = {}
        self._publishers: dict[str, asyncio.Task[None]] = {}
        self._failing: set[str] = set()  # sessions whose last publish failed
        self._open: dict[str, int] = {}  # appends queued or being written, per session
        self._quiet: dict[str, list[asyncio.Future[None]]] = {}
        self.batches = 0
        self.publish_failures = 0
        self.recovered = 0

    async def append(self, key: str, session_id: str, log: str, msg: Message, ident: Any,
                     fence: Callable[[], None] = lambda: None) -> None:
        loop = asyncio.get_running_loop()
        e = _Entry(key, session_id, log, msg, ident, loop.create_future(), loop.create_future(), fence)
        self._queue.append(e)
        self._open[key] = self._open.get(key, 0) + 1
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._drain())
        try:
            await e.durable
        except asyncio.CancelledError:
            if not e.claimed:
                e.dropped = True  # never written: the caller's DEADLINE_EXCEEDED is the truth
                raise
            assert e.settled is not None
            await asyncio.shield(e.settled)  # being written: it will be accepted, so say so
            if e.error is not None:
                raise e.error from None
            return
        if key in self._failing:  # JetStream is not taking this session's events: do not wait for them
            return
        # Released by the event's ack, or by its batch's timer after EVENT_WAIT_S (one timer per
        # batch, not a wait_for per caller: this path runs for every message).
        with contextlib.suppress(asyncio.CancelledError):
            await e.published

    def _settle(self, e: _Entry, error: BaseException | None = None) -> None:
        """The entry's outcome, told to its caller; the session's count of open appends closed."""
        e.error = error
        if not e.durable.done():
            if error is None:
                e.durable.set_result(None)
            else:
                e.durable.set_exception(error)
        self._close(e.key)

    def _close(self, key: str) -> None:
        n = self._open.get(key, 1) - 1
        if n > 0:
            self._open[key] = n
            return
        self._open.pop(key, None)
        for w in self._quiet.pop(key, []):
            if not w.done():
                w.set_result(None)

    async def quiet(self, key: str) -> None:
        """Until no append of this session is queued or being written here: a session loaded from
        disk while its line is still on the way would accept that message's retry a second time."""
        if self._open.get(key):
            w: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._quiet.setdefault(key, []).append(w)
            await w

    def backlog(self, key: str | None = None) -> int:
        """Events (of one session, or all) durable on disk but not yet in the stream."""
        if key is None:
            return sum(len(q) for q in self._pending.values())
        return len(self._pending.get(key, ()))

    async def flush(self, key: str, timeout_s: float) -> bool:
        """Wait until the session's journal has every accepted message (a commit needs that)."""
        task = self._publishers.get(key)
        if task is None:
            return True
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(task), timeout_s)
        return self.backlog(key) == 0

    async def recover(self, key: str, session_id: str, root: list[Message], ident: Any) -> int:
        """After a load: publish the live messages the stream's journal is missing (a crash between
        the fsync and the publish). Agent and peer are the loading request's (not kept per line)."""
        if not root or key in self._pending:
            return 0
        raw = await self.bus.last_event(event_name(key))
        last = None
        if raw:
            with contextlib.suppress(msgspec.DecodeError, msgspec.ValidationError):
                entries = _added.decode(raw).entries
                last = entries[-1].message.id if entries else None
        missing = unpublished(root, last)
        if missing:
            self._stage(key, _event(key, session_id, missing, ident), event_id(key, missing), [])
            self.recovered += len(missing)
            log.info("session %s: %d accepted message(s) missing from the journal; publishing", session_id,
                     len(missing))
        return len(missing)

    async def _drain(self) -> None:
        while self._queue:
            batch = []
            for e in self._queue[:MAX_BATCH]:
                if e.dropped:
                    self._settle(e)
                    continue
                try:
                    e.fence()  # the lease may have lapsed while it waited: then it is not written
                except Exception as exc:  # noqa: BLE001 - the caller hears it (UNAVAILABLE)
                    self._settle(e, exc)
                    continue
                batch.append(e)
            self._queue = self._queue[MAX_BATCH:]
            if not batch:
                continue
            settled = asyncio.get_running_loop().create_future()
            for e in batch:
                e.claimed, e.settled = True, settled
            out = _write(batch, self.tree)
            job = asyncio.ensure_future(asyncio.to_thread(out.sync))
            try:
                await asyncio.shield(job)
            except asyncio.CancelledError:  # the flush still runs on its thread: close after it
                job.add_done_callback(lambda _, out=out: out.close())
                raise
            failed = out.close()
            if failed:  # those callers hear about it: their lines were not accepted
                for e in batch:
                    if (exc := failed.get(e.log)) is not None:
                        self._settle(e, exc)
                batch = [e for e in batch if e.log not in failed]
                if not batch:
                    settled.set_result(None)
                    continue
            faults.point("session.after_append")
            self.batches += 1
            by_key: dict[str, list[_Entry]] = {}
            for e in batch:
                by_key.setdefault(e.key, []).append(e)
            asyncio.get_running_loop().call_later(EVENT_WAIT_S, _release, [e.published for e in batch])
            try:
                for key, entries in by_key.items():
                    msgs = [e.msg for e in entries]
                    self._stage(key, _event(key, entries[0].session_id, msgs, entries[0].ident, entries),
                                event_id(key, msgs), [e.published for e in entries])
            except Exception:  # a bug here must not leave durable lines unanswered, nor stop the loop
                log.exception("journal events of a written batch not staged; the session's next load "
                              "publishes what is missing")
                _release([e.published for e in batch])
            finally:
                for e in batch:
                    self._settle(e)
                settled.set_result(None)

    def _stage(self, key: str, event: MessagesAdded, msg_id: str, waiters: list[asyncio.Future[None]]) -> None:
        self._pending.setdefault(key, deque()).append(_Pending(event, msg_id, waiters))
        if key not in self._publishers:
            self._publishers[key] = asyncio.create_task(self._publish(key), name=f"journal-{key}")

    async def _publish(self, key: str) -> None:
        """This session's events, in order, until none is left; a failure answers the waiting
        callers (their messages are durable) and is retried with backoff."""
        queue = self._pending[key]
        pause = 0.2
        try:
            while queue:
                item = queue[0]
                try:
                    await self.bus.publish_event(event_name(key), item.event, item.msg_id)
                except Exception as exc:  # noqa: BLE001 - the file is the outbox: try again
                    self.publish_failures += 1
                    self._failing.add(key)
                    log.warning("journal event for session key %s not stored yet (%s); retrying in %.1fs",
                                key, type(exc).__name__, pause)
                    _release(item.waiters)
                    await asyncio.sleep(pause)
                    pause = min(pause * 2, 5.0)
                    continue
                queue.popleft()
                _release(item.waiters)
                self._failing.discard(key)
                pause = 0.2
        finally:
            self._publishers.pop(key, None)
            if not queue:
                self._pending.pop(key, None)


def _event(key: str, session_id: str, msgs: list[Message], ident: Any,
           entries: list[_Entry] | None = None) -> MessagesAdded:
    idents = [e.ident for e in entries] if entries else [ident] * len(msgs)
    return MessagesAdded(entries=[AddedEntry(session_key=key, session_id=session_id, message=m, account=i.account,
                                             user=i.user, agent=i.agent, peer=i.peer)
                                  for m, i in zip(msgs, idents, strict=True)])
