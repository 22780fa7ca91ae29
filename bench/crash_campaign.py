"""Crash campaign from the command line: SIGKILL real worker processes at random points across every
write path, then count what was acknowledged, lost, duplicated or left stuck (the campaign itself,
and what each count means, is `support/crash_campaign.py`; CI runs 40 trials of it).

    .venv/bin/python bench/crash_campaign.py --trials 200
    .venv/bin/python bench/crash_campaign.py --trials 50 --seed 3
    .venv/bin/python bench/crash_campaign.py --trials 200 --store jetstream
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from skald.runtime.bus.natsserver import EmbeddedNats  # noqa: E402
from support.crash_campaign import campaign  # noqa: E402


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=200)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--store", choices=("local", "jetstream"), default="local",
                    help="jetstream: the tree in the bus, and every worker on an empty disk of its own")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="skald-bench-crash-"))
    srv = EmbeddedNats(tmp / "nats", port=-1)
    srv.start()
    t0 = time.perf_counter()
    try:
        t = await campaign(srv.url, tmp / "data", args.trials, args.seed, store=args.store)
    finally:
        srv.stop()
    print(f"\n{t.line()} ({time.perf_counter() - t0:.0f} s)")
    print("by area: " + ", ".join(f"{a} {n}" for a, n in sorted(t.by_area.items())))
    for kind, items in (("lost", t.lost), ("duplicated", t.duplicated), ("stuck", t.stuck), ("stale rows", t.stale),
                        ("unindexed", t.unindexed)):
        for x in items[:20]:
            print(f"  {kind}: {x}")
    sys.exit(1 if t.lost or t.duplicated or t.stuck or t.stale or t.unindexed else 0)


if __name__ == "__main__":
    asyncio.run(main())
