"""A JetStream tree directory's entries from its bucket: names from the leader's subjects (files'
keys and subdirectories' markers), and, when asked for, each entry's size and time from its last
message, every entry's read sent together (`Bucket.get_many`); and what a stat finds at a key."""

from __future__ import annotations

import asyncio

from skald.runtime.bus import tree_values
from skald.runtime.bus.tree_buckets import Bucket, Found
from skald.runtime.bus.tree_keys import DIR_MARK, kv_key, segment
from skald.store.treeport import Entry


async def entries(b: Bucket, key: str, details: bool) -> list[Entry]:
    """The entries of the directory at `key` (known to exist), sorted by name; without `details`,
    names and kinds only, from the subjects alone."""
    base = kv_key(key)
    files, dirs = await asyncio.gather(b.keys(f"{base}.*"), b.keys(f"{base}.*.{DIR_MARK}"))
    files = [k for k in files if not k.endswith(f".{DIR_MARK}")]
    if not details:
        return sorted([*(Entry(segment(k.rsplit(".", 1)[1]), False) for k in files),
                       *(Entry(segment(k.split(".")[-2]), True) for k in dirs)], key=lambda e: e.name)
    got = await b.get_many([*files, *dirs])  # from the leader: every write before is there
    out = [Entry(segment(k.rsplit(".", 1)[1]), False, tree_values.size(f), f.mtime)
           for k, f in zip(files, got[:len(files)], strict=True) if f is not None]
    out += [Entry(segment(k.split(".")[-2]), True, 0, f.mtime)
            for k, f in zip(dirs, got[len(files):], strict=True) if f is not None]
    return sorted(out, key=lambda e: e.name)


def entry(key: str, found: Found | None, marker: Found | None) -> Entry | None:
    """What is at `key` from its file's last message and its directory marker's (None: nothing)."""
    name = key.rpartition("/")[2]
    if found is not None:
        return Entry(name, False, tree_values.size(found), found.mtime)
    return Entry(name, True, 0, marker.mtime) if marker is not None else None
