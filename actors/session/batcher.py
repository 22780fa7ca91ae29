"""Group commit for add_message: appends waiting at the same moment, across sessions, share one
thread hop (one write + fsync per file) and one event on the bus. Each caller is answered only
after its line is fsync'd and the batch's event is stored."""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path
from typing import Any

import msgspec

from actors.common import session_files as Fs
from messages.sessions import Message
from store import faults

MAX_BATCH = 256


class AddedEntry(msgspec.Struct, kw_only=True):
    session_key: str
    session_id: str
    message: Message


class MessagesAdded(msgspec.Struct, kw_only=True):
    entries: list[AddedEntry]


def _write(batch: list[tuple[str, str, Path, Message, Any]]) -> None:
    by_path: dict[Path, list[Message]] = {}
    for _, _, path, msg, _ in batch:
        by_path.setdefault(path, []).append(msg)
    for path, msgs in by_path.items():
        Fs.append_messages(path, msgs)


class AppendBatcher:
    def __init__(self, bus: Any) -> None:
        self.bus = bus
        self._queue: list[tuple[str, str, Path, Message, asyncio.Future[None]]] = []
        self._task: asyncio.Task[None] | None = None
        self.batches = 0

    async def append(self, key: str, session_id: str, path: Path, msg: Message) -> None:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._queue.append((key, session_id, path, msg, fut))
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._drain())
        await fut

    async def _drain(self) -> None:
        while self._queue:
            batch, self._queue = self._queue[:MAX_BATCH], self._queue[MAX_BATCH:]
            try:
                await asyncio.to_thread(_write, batch)
                faults.point("session.after_append")
                ids = ";".join(f"{k}/{m.id}" for k, _, _, m, _ in batch)
                event = MessagesAdded(entries=[AddedEntry(session_key=k, session_id=s, message=m)
                                               for k, s, _, m, _ in batch])
                await self.bus.publish_event("session.messages_added", event,
                                             "added-" + hashlib.sha1(ids.encode()).hexdigest())
            except Exception as e:  # noqa: BLE001 - every waiter hears about it
                for *_, fut in batch:
                    if not fut.done():
                        fut.set_exception(e)
                continue
            self.batches += 1
            for *_, fut in batch:
                if not fut.done():
                    fut.set_result(None)
