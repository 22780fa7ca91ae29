"""The write journal's outbox: a journal event is published to JetStream and acknowledged before the
write's reply; when JetStream cannot take it (no leader for longer than a short retry), the event
is written to a file under `.skald/outbox/` (fsync'd) and the reply goes out; a background task
publishes the files, oldest first, and removes each once JetStream has it. Any worker sharing the
data directory may drain any file: the `Nats-Msg-Id` makes a second publish a no-op inside the
stream's duplicate window.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from pathlib import Path
from typing import Any

import msgspec

from skald.runtime.bus.jspublish import AckedPublisher
from skald.runtime.bus.streams import TRANSIENT
from skald.store.tree import write_atomic_sync

log = logging.getLogger("skald.journal")
TRY_S = 2.0  # how long a reply waits for JetStream before its event goes to the outbox
DRAIN_EVERY_S = 2.0


class Pending(msgspec.Struct, frozen=True):
    """A journal event parked in the outbox until JetStream takes it."""

    subject: str
    msg_id: str
    data: bytes
    at: float


class Outbox:
    """Journal events JetStream could not take in time, kept in files and published in order once it can."""

    def __init__(self, nc: Any, directory: Path) -> None:
        self.pub = AckedPublisher(nc, 5.0)
        self.dir = Path(directory)
        self._task: asyncio.Task[None] | None = None
        self.parked = 0
        self.drained = 0

    def start(self) -> None:
        self._task = asyncio.create_task(self._drain_forever(), name="journal-outbox")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(BaseException):
                await self._task

    def backlog(self) -> int:
        try:
            return sum(1 for p in self.dir.iterdir() if p.suffix == ".event")
        except FileNotFoundError:
            return 0

    async def publish(self, subject: str, data: bytes, msg_id: str) -> None:
        """Acknowledged by JetStream, or parked durably in the outbox: never lost, never raised."""
        end = time.monotonic() + TRY_S
        pause = 0.05
        while True:
            try:
                await self.pub.publish(subject, data, {"Nats-Msg-Id": msg_id}, max(0.1, TRY_S))
                return
            except TRANSIENT as e:
                if time.monotonic() + pause > end:
                    await asyncio.to_thread(self._park, Pending(subject, msg_id, data, time.time()))
                    log.warning("journal event %s parked in the outbox (%s)", msg_id, type(e).__name__)
                    return
                await asyncio.sleep(pause)
                pause = min(pause * 2, 0.5)

    def _park(self, item: Pending) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        name = f"{int(item.at * 1e6):020d}-{item.msg_id}.event"
        write_atomic_sync(self.dir / name, msgspec.msgpack.encode(item))
        self.parked += 1

    async def drain(self) -> int:
        """Publish every parked event, oldest first; stops at the first JetStream still refuses."""
        try:
            names = sorted(p.name for p in self.dir.iterdir() if p.suffix == ".event")
        except FileNotFoundError:
            return 0
        done = 0
        for name in names:
            path = self.dir / name
            try:
                item = msgspec.msgpack.decode(path.read_bytes(), type=Pending)
            except FileNotFoundError:
                continue  # another worker drained it
            except (msgspec.DecodeError, msgspec.ValidationError):
                log.error("unreadable outbox entry %s kept aside", path)
                path.rename(path.with_suffix(".corrupt"))
                continue
            try:
                await self.pub.publish(item.subject, item.data, {"Nats-Msg-Id": item.msg_id})
            except TRANSIENT:
                return done
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
            done += 1
        self.drained += done
        return done

    async def _drain_forever(self) -> None:
        while True:
            await asyncio.sleep(DRAIN_EVERY_S)
            try:
                await self.drain()
            except Exception:  # noqa: BLE001 - the next round tries again
                log.exception("outbox drain failed")
