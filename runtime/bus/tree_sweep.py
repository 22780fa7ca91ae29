"""`skald store sweep`: the objects of a JetStream tree that no file points at, deleted.

A file past one bus message is an object written before the key that points at it, and a replaced
or removed file's object is deleted after its key changed; a worker killed between the two leaves
an object nothing points at, disk that nothing would ever free. The sweep finds them per account.

An object is kept when the key it was written at still points at it (one read each). A moved file
keeps its object under the old name, so when any object is left unconfirmed that way, every file
of the account is read for the pointers it holds, twice: a move copies the pointer and then purges
the source, so a pass that read the destination before the copy and the source after the purge
missed it, and the next finds it unless the file moves again meanwhile. Passes over a whole account
make this an operator's command, not a worker's. Only objects older than `older_than_s` are
candidates: a write in flight has its object and not yet its key.
"""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any

import msgspec
from nats.js.errors import NotFoundError

from skald.runtime.bus import tree_values
from skald.runtime.bus.tree_buckets import Bucket, bounded
from skald.runtime.bus.tree_keys import ROOT

DEFAULT_AGE_S = 3600.0


class SweepReport(msgspec.Struct, kw_only=True):
    """What a sweep found: accounts and objects looked at, objects kept because they were too young
    to judge, and the objects deleted (by bucket) with their bytes."""

    accounts: int = 0
    objects: int = 0
    young: int = 0
    swept: list[str] = []
    bytes: int = 0


def _age_s(info: Any, now: float) -> float | None:
    """How long ago the object was written, from its metadata; None when it does not say."""
    try:
        return now - datetime.fromisoformat(info.mtime).timestamp()
    except (TypeError, ValueError):
        return None


async def sweep(b: Bucket, older_than_s: float, report: SweepReport, now: float | None = None) -> None:
    """The bucket's unreferenced objects older than `older_than_s`, deleted and added to `report`."""
    now = time.time() if now is None else now
    try:
        stored = await b.objects.list(ignore_deletes=True)
    except NotFoundError:  # nats-py's answer for a store holding none
        return
    report.objects += len(stored)
    ages = [_age_s(o, now) for o in stored]
    report.young += sum(1 for a in ages if a is None or a < older_than_s)
    old = [o for o, a in zip(stored, ages, strict=True) if a is not None and a >= older_than_s]
    if not old:
        return
    own = await b.get_many([o.name.rpartition("@")[0] for o in old])
    unsure = [o for o, f in zip(old, own, strict=True)
              if f is None or f.value != tree_values.OBJECT + o.name.encode()]
    if not unsure:
        return
    orphans = unsure
    for _ in range(2):  # a file moved while one pass read the account is found by the next
        pointed = await tree_values.pointers(b, f"{ROOT}.>")
        orphans = [o for o in orphans if o.name not in pointed]
        if not orphans:
            return
    await bounded([b.objects.delete(o.name) for o in orphans])
    report.swept += [f"{b.name}/{o.name}" for o in orphans]
    report.bytes += sum(o.size or 0 for o in orphans)

