"""Group commit for add_message: appends waiting at the same moment, across sessions, share one
thread hop (one write + fsync per file) and one event on the bus. Each caller is answered only
after its line is fsync'd and the batch's event is stored."""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path
from typing import Any

from skald.actors.kit.ports import Bus
from skald.messages.sessions import AddedEntry, Message, MessagesAdded
from skald.store import faults
from skald.store import sessions as session_store

MAX_BATCH = 256



def _write(batch: list[tuple[str, str, Path, Message, Any, Any]]) -> None:
    by_path: dict[Path, list[Message]] = {}
    for _, _, path, msg, _, _ in batch:
        by_path.setdefault(path, []).append(msg)
    for path, msgs in by_path.items():
        session_store.append_messages(path, msgs)


class AppendBatcher:
    def __init__(self, bus: Bus) -> None:
        self.bus = bus
        self._queue: list[tuple[str, str, Path, Message, asyncio.Future[None], Any]] = []
        self._task: asyncio.Task[None] | None = None
        self.batches = 0

    async def append(self, key: str, session_id: str, path: Path, msg: Message, ident: Any) -> None:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._queue.append((key, session_id, path, msg, fut, ident))
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._drain())
        await fut

    async def _drain(self) -> None:
        while self._queue:
            batch, self._queue = self._queue[:MAX_BATCH], self._queue[MAX_BATCH:]
            try:
                await asyncio.to_thread(_write, batch)
                faults.point("session.after_append")
                ids = ";".join(f"{k}/{m.id}" for k, _, _, m, _, _ in batch)
                # This event is also the write journal for messages (one per batch, not per message).
                event = MessagesAdded(entries=[AddedEntry(session_key=k, session_id=s, message=m, account=i.account,
                                                          user=i.user, agent=i.agent, peer=i.peer)
                                               for k, s, _, m, _, i in batch])
                await self.bus.publish_event("session.messages_added", event,
                                             "added-" + hashlib.sha1(ids.encode()).hexdigest())
            except Exception as e:  # noqa: BLE001 - every waiter hears about it
                for *_, fut, _ in batch:
                    if not fut.done():
                        fut.set_exception(e)
                continue
            self.batches += 1
            for *_, fut, _ in batch:
                if not fut.done():
                    fut.set_result(None)
