"""What a JetStream tree's move leaves for others to finish, and what a removal must delete: the
intent a move writes before it copies (`m.<destination tokens>`: source, destination, and the
revision of the source's value or marker), acted on by the same move asked again or by the next
process to open the bucket (`jetstream_tree.py` makes the moves); and the objects the files under
a directory point at."""

from __future__ import annotations

import asyncio
import json

from nats.js.errors import NotFoundError

from skald.runtime.bus import tree_values
from skald.runtime.bus.tree_buckets import Bucket, bounded
from skald.runtime.bus.tree_keys import MOVES, kv_key, mark


def intent(src: str, dst: str, revision: int) -> bytes:
    """A move's intent: what `finish` needs to tell its own source from one made since."""
    return json.dumps({"src": src, "dst": dst, "rev": revision}).encode()


async def finish_all(b: Bucket) -> int:
    """Every move of the bucket a worker left unfinished, finished; how many there were."""
    keys = await b.keys(f"{MOVES}.>")
    return sum(await bounded([finish(b, k) for k in keys]))


async def finish(b: Bucket, key: str, asked: tuple[str, str] | None = None) -> bool:
    """One move's intent acted on: once its destination stands (the copy was whole) its source
    is purged, as the move would have next, if it is still the one the move copied (the
    revision of its value or marker: a source purged and made again since is not touched);
    before that the move had not happened, and only its intent goes. False when there is no
    intent (or, with `asked`, not one of that source and destination)."""
    got = await b.get(key)
    if got is None:
        return False
    move = json.loads(got.value)
    src, dst = move["src"], move["dst"]
    if asked is not None and asked != (src, dst):
        return False
    file_at, dir_at = await asyncio.gather(b.get(kv_key(dst)), b.get(mark(dst)))
    if file_at is not None or dir_at is not None:
        source = await b.get(kv_key(src) if file_at is not None else mark(src))
        if source is not None and source.revision == move["rev"]:
            await b.delete(kv_key(src) if file_at is not None else f"{kv_key(src)}.>")
    await b.delete(key)
    return True


async def pointed_at(b: Bucket, key: str) -> list[str]:
    """The objects the files under a directory point at, read before it is purged. An object's
    name says where it was written, not where its file is now: a moved directory's files keep
    their objects, so choosing by name deleted a moved file's object when a new directory at
    the old path was removed, and left the moved one's behind when it was. The values are read
    only when the account holds any object at all (most hold none)."""
    try:
        stored = {o.name for o in await b.objects.list(ignore_deletes=True)}
    except NotFoundError:  # nats-py's answer for a store holding none
        return []
    if not stored:
        return []
    return sorted(stored & await tree_values.pointers(b, f"{kv_key(key)}.>"))


async def mark_dirs(b: Bucket, dirs: list[str]) -> None:
    """Directory markers, top-down (a marker vouches for every ancestor: `JetStreamTree._prepare`)."""
    await bounded([b.put(mark(d), b"") for d in sorted(dirs, key=len)])


async def copy_dir(bs: Bucket, bd: Bucket, src: str, dst: str, missing: list[str]) -> None:
    """A directory's files copied from `src` to `dst` as they are (an object pointer included), the
    ancestors `missing` a marker marked first and its own marker last, so it is whole once visible."""
    base_src, base_dst = kv_key(src), kv_key(dst)
    keys = [k for k in await bs.keys(f"{base_src}.>") if k != mark(src)]
    values = await bs.get_many(keys)
    await bd.delete(f"{base_dst}.>")  # leftovers of an attempt that died before its marker
    await mark_dirs(bd, missing)
    await bounded([bd.put(base_dst + k[len(base_src):], f.value, headers=tree_values.kept(f))
                   for k, f in zip(keys, values, strict=True) if f is not None])
    await bd.put(mark(dst), b"")  # whole from here on
