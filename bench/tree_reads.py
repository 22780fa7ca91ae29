"""Reading many keys of the JetStream tree: one round trip a key (the baseline, what the tree did
before) against the reads sent together, on one embedded nats-server, in the same run.

    .venv/bin/python bench/tree_reads.py [--sizes 10,100,1000,10000] [--repeat 3]

Per directory size it prints, best of `--repeat`: a listing whose entries' sizes and times are
read one `get_msg` at a time (64 in flight, as before) against `list` (the reads together) and
`list(details=False)` (names and kinds, no entry read); the directory's files read one `read` at a
time against one `read_many`; and, for a session of as many archives (at most 200), each archive's
state read through the per-key path (a stat of `.done`, then `.done` and the overview) against
`sessions.marker_states` of all of them, and every archive's listing (its six files: markers,
overview, meta, 20 messages) read a file at a time, as a session's load did, against
`sessions.read_archives`.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import msgspec

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from skald.messages.sessions import Message, TextPart  # noqa: E402
from skald.runtime.bus.jetstream_tree import JetStreamTree  # noqa: E402
from skald.runtime.bus.natsserver import EmbeddedNats  # noqa: E402
from skald.runtime.bus.tree_buckets import bounded  # noqa: E402
from skald.runtime.bus.tree_keys import kv_key  # noqa: E402
from skald.store import message_lines, sessions  # noqa: E402
from skald.store.archive_state import ArchiveListing  # noqa: E402
from skald.store.session_meta import DoneMarker, QuarantineMarker  # noqa: E402
from skald.store.uri import VikingPath  # noqa: E402


def best_ms(fn: Callable[[], Any], repeat: int) -> float:
    out = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t) * 1000)
    return min(out)


def fill(t: JetStreamTree, d: str, n: int) -> None:
    """n small files under `d`, published without acks (the last one acknowledged: all are stored)."""
    t.mkdir(d)
    b = t._run(t._bucket("_"))

    async def go() -> None:
        nc = b.js._nc
        for i in range(n - 1):
            await nc.publish(b.pre + kv_key(f"{d}/f{i:06d}"), b"F" + f"note {i} ".encode() * 8)
        await b.put(kv_key(f"{d}/f{n - 1:06d}"), b"F" + b"last")

    t._run(go())


def one_at_a_time_listing(t: JetStreamTree, d: str) -> int:
    """The listing as the tree made it before: the subjects, then one `get` per entry."""
    b = t._run(t._bucket("_"))
    keys = t._run(b.keys(f"{kv_key(d)}.*"))
    got = t._run(bounded([b.get(k) for k in keys]))
    return sum(1 for f in got if f is not None)


def archives(t: JetStreamTree, key: str, n: int) -> sessions.SessionDir:
    """A session at `key` holding n completed archives."""
    s = sessions.SessionDir(vp=cast(VikingPath, None), tree=t, key=key)
    done = msgspec.json.encode(DoneMarker())
    for i in range(1, n + 1):
        said = [Message(id=f"m{i}-{k}", role="user", parts=[TextPart(text=f"turn {k}: " + "words " * 30)])
                for k in range(20)]
        t.write_dir(s.akey(sessions.archive_name(i)), {"messages.jsonl": message_lines.encode_lines(said),
                                                      sessions.DONE: done, sessions.META: b"{}",
                                                      sessions.OVERVIEW: b"# Overview\n\nwhat was said"})
    return s


def listing_one_file_at_a_time(s: sessions.SessionDir, i: int) -> ArchiveListing:
    """An archive's listing as `read_archive` read it before: its six files in turn."""
    aid, t = sessions.archive_name(i), s.tree
    done, status = sessions.load(t, s.akey(aid, sessions.DONE), DoneMarker)
    overview = sessions.read_text(t, s.akey(aid, sessions.OVERVIEW)) or None
    quarantined = sessions.load(t, s.akey(aid, sessions.QUARANTINED), QuarantineMarker)[0]
    return ArchiveListing(archive_id=aid, index=i, done=done, done_unreadable=status == "corrupt", overview=overview,
                          failed=sessions.read_failed(s, aid), quarantined=quarantined,
                          messages=message_lines.read_messages_at(t, s.akey(aid, sessions.MESSAGES)),
                          checkpoints=list(sessions.read_archive_meta(s, aid).checkpoints))


def state_one_key_at_a_time(s: sessions.SessionDir, i: int) -> str:
    """A completed archive's state as `marker_state` read it before: three reads in turn."""
    aid = sessions.archive_name(i)
    if s.tree.stat(s.akey(aid, sessions.DONE)) is None:
        return "other"
    sessions.load(s.tree, s.akey(aid, sessions.DONE), DoneMarker)
    return "completed" if s.tree.read(s.akey(aid, sessions.OVERVIEW)).strip() else "invalid"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="10,100,1000,10000")
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="skald-bench-tree-reads-"))
    srv = EmbeddedNats(tmp / "nats", port=-1)
    t = JetStreamTree([srv.start()], "tree_reads")
    try:
        print(f"{'entries':>8} | {'list, a get each':>16} {'list':>8} {'names':>8} | "
              f"{'read each':>10} {'read_many':>10} | {'archives':>8} {'state each':>10} {'at once':>8} | "
              f"{'listing each':>12} {'read_archives':>13}  (ms)")
        for n in (int(x) for x in a.sizes.split(",")):
            d = f"d{n}"
            fill(t, d, n)
            base = best_ms(lambda d=d: one_at_a_time_listing(t, d), a.repeat)
            full = best_ms(lambda d=d: t.list(d), a.repeat)
            names = best_ms(lambda d=d: t.list(d, details=False), a.repeat)
            keys = [f"{d}/{e.name}" for e in t.list(d, details=False)]
            each = best_ms(lambda keys=keys: [t.read(k) for k in keys], a.repeat)
            many = best_ms(lambda keys=keys: t.read_many(keys), a.repeat)
            m = min(n, 200)
            s = archives(t, f"sess{n}", m)
            idx = list(range(1, m + 1))
            assert [state_one_key_at_a_time(s, i) for i in idx] == sessions.marker_states(s, idx)
            st_each = best_ms(lambda s=s, idx=idx: [state_one_key_at_a_time(s, i) for i in idx], a.repeat)
            st_once = best_ms(lambda s=s, idx=idx: sessions.marker_states(s, idx), a.repeat)
            assert [listing_one_file_at_a_time(s, i) for i in idx] == sessions.read_archives(s, idx)
            ls_each = best_ms(lambda s=s, idx=idx: [listing_one_file_at_a_time(s, i) for i in idx], a.repeat)
            ls_once = best_ms(lambda s=s, idx=idx: sessions.read_archives(s, idx), a.repeat)
            print(f"{n:>8,} | {base:16.1f} {full:8.1f} {names:8.1f} | {each:10.1f} {many:10.1f} | "
                  f"{m:>8} {st_each:10.1f} {st_once:8.1f} | {ls_each:12.1f} {ls_once:13.1f}", flush=True)
    finally:
        t.close()
        srv.stop()


if __name__ == "__main__":
    main()
