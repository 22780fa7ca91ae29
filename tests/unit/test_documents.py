"""Sections and passages of documents over real files the tests write (support/documents.py):
how a long file is cut, read back and served."""

from __future__ import annotations

import msgspec

from skald.actors.assembler import passages
from skald.actors.text import code, formats, sections
from skald.messages.context import Candidate
from skald.store.tokens import estimate_tokens
from support import documents as sample_docs


def test_python_and_typescript_symbols_have_ranges_signatures_and_docs() -> None:
    py = formats.convert("ratelimit.py", sample_docs.PY_MODULE.encode())
    bucket, retry = py.symbols
    assert (bucket.kind, bucket.name, bucket.start, bucket.end) == ("class", "TokenBucket", 6, 15)
    assert bucket.doc == "A bucket that refills at a fixed rate."
    assert [m.name for m in bucket.children] == ["__init__", "take"]
    assert retry.signature == "def retry_after(bucket: TokenBucket) -> float"
    ts = formats.convert("session.ts", sample_docs.TS_MODULE.encode())
    names = [(s.kind, s.name) for s in ts.symbols]
    assert names == [("function", "bearerToken"), ("interface", "Session"), ("class", "SessionStore")]
    store = ts.symbols[2]
    assert store.doc == "Keeps sessions in memory." and store.children[0].name == "get"
    assert ts.symbols[0].start == 4 and ts.symbols[0].end == 7
    broken = code.parse("python", "def broken(:\n    pass\n")
    assert broken.symbols == () and broken.text.startswith("def broken")


def test_a_forty_section_handbook_becomes_addressable_sections_that_fit_the_window() -> None:
    doc = formats.convert("handbook.md", sample_docs.handbook_md().encode())
    assert sections.needs_sections(doc)
    secs = sections.split(doc, "handbook.md")
    lines = doc.text.splitlines()
    assert len({s.anchor for s in secs}) == len(secs)
    assert secs[0].start == 1 and secs[-1].end == len(lines)
    for a, b in zip(secs, secs[1:], strict=False):
        assert b.start == a.end + 1  # contiguous: nothing lost between sections
    for s in secs:
        assert estimate_tokens(s.title) + estimate_tokens(s.text) <= sections.MAX_TOKENS * 1.3
        assert s.text.strip() == "\n".join(lines[s.start - 1 : s.end]).strip()
    rec = next(s for s in secs if s.anchor == "recovery-objectives")
    assert rec.title == "Operations handbook › Recovery objectives"
    assert "fifteen minutes" in rec.text and rec.abstract.startswith("Operations handbook › Recovery")
    toc = sections.toc("handbook.md", "Operations handbook", "How we run production.", secs)
    assert toc.count("\n- [") == len(secs) and "(#recovery-objectives)" in toc


def test_editing_one_section_leaves_the_other_anchors_alone() -> None:
    before = sections.split(formats.convert("h.md", sample_docs.handbook_md().encode()), "h.md")
    text = sample_docs.handbook_md().replace("thirty-five days", "forty days")
    after = sections.split(formats.convert("h.md", text.encode()), "h.md")
    assert [s.anchor for s in before] == [s.anchor for s in after]
    changed = [a.anchor for a, b in zip(before, after, strict=True) if a.text != b.text]
    assert changed == ["backups"]


def test_headless_text_is_still_cut_into_passages() -> None:
    words = " ".join(f"word{i}" for i in range(6_000))
    paragraphs = "\n\n".join(words[i : i + 600] for i in range(0, len(words), 600))
    secs = sections.split(formats.convert("notes.txt", paragraphs.encode()), "notes.txt")
    assert len(secs) > 10
    assert all(estimate_tokens(s.text) <= sections.MAX_TOKENS for s in secs)


def test_a_paragraph_on_one_line_is_cut_at_sentence_ends_so_the_embedder_reads_all_of_it() -> None:
    """Word and web pages keep a paragraph on one line, soft-wrapped prose too: a 700-token line
    was one section, and the embedder's 512-token window never read its second half."""
    sentence = "The replica replays the log from its last snapshot and then serves reads again. "
    para = (sentence * 40).strip()
    text = f"# Recovery\n\n{para}\n\n{para.replace('replica', 'standby')}\n\n## Notes\n\nShort.\n"
    secs = sections.split(formats.convert("ops.md", text.encode()), "ops.md")
    assert all(0 < estimate_tokens(s.text) <= sections.MAX_TOKENS for s in secs)  # no blank parts either
    first = [s for s in secs if s.start <= 3 <= s.end]
    assert len(first) >= 2 and first[0].text.startswith("# Recovery\n\nThe replica")  # the heading opens it
    assert "".join(s.text for s in first).removeprefix("# Recovery\n\n") == para  # nothing lost, in order
    assert all(s.text.rstrip().endswith(".") for s in first)  # cut where a sentence ends
    assert all(s.start == s.end == 5 for s in secs if "standby" in s.text)
    assert len({s.anchor for s in secs}) == len(secs)


def test_a_part_that_starts_inside_a_table_repeats_its_column_names() -> None:
    header = "order_id,customer,region,quantity,unit_price,status"
    rows = [f"A{1000 + i},Customer {i % 7},EMEA,{i % 50},{i % 90}.00,shipped" for i in range(400)]
    secs = sections.split(formats.convert("orders.csv", "\n".join([header, *rows]).encode()), "orders.csv")
    assert len(secs) > 3 and secs[0].text.count(header) == 1
    assert all(s.text.startswith(header + "\nA1") for s in secs[1:])  # each part's rows say what they hold
    assert secs[2].start > 2 and f"A{1000 + secs[2].start - 2}" in secs[2].text.splitlines()[1]
    table = ["| host | role | zone |", "|---|---|---|", *(f"| node{i} | replica | zone-{i % 3} |" for i in range(300))]
    md = "# Fleet\n\nThe hosts and where they run.\n\n" + "\n".join(table) + "\n\n## After\n\nPlain text.\n"
    parts = sections.split(formats.convert("fleet.md", md.encode()), "fleet.md")
    inside = [p for p in parts if "node150 " in p.text]
    assert inside and inside[0].text.startswith("| host | role | zone |\n|---|---|---|\n| node")
    md_lines = md.splitlines()
    assert all(not p.text.startswith("| host") for p in parts if not md_lines[p.start - 1].startswith("| node"))


def test_parts_of_one_line_merge_in_reading_order() -> None:
    def part(anchor: str, score: float) -> Candidate:
        return Candidate(uri=f"viking://resources/h.md#{anchor}", category="resources", score=score,
                         text=f"text of {anchor}", lines=(5, 5))

    out = passages.merge_neighbours([part("intro-part3", 0.9), part("intro", 0.8), part("intro-part2", 0.7)])
    assert len(out) == 1 and out[0].text == "text of intro\n\ntext of intro-part2\n\ntext of intro-part3"


def test_pdf_sections_know_their_pages() -> None:
    doc = formats.convert("handbook.pdf", sample_docs.handbook_pdf())
    secs = sections.split(doc, "handbook.pdf")
    rec = next(s for s in secs if "Recovery objectives" in s.title)
    assert rec.page > 1 and rec.location.startswith(f"page {rec.page}, lines ")


def test_code_sections_follow_symbols() -> None:
    body = "\n\n".join(f"def handler_{i}(event):\n    \"\"\"Handles event {i}.\"\"\"\n" + "    x = 1\n" * 30
                       for i in range(12))
    secs = sections.split(formats.convert("handlers.py", body.encode()), "handlers.py")
    assert secs[0].anchor == "handler-0" and all("handler_" in s.title for s in secs)


def test_neighbouring_sections_merge_and_their_document_node_steps_aside() -> None:
    def sec(anchor: str, lines: tuple[int, int], score: float) -> Candidate:
        return Candidate(uri=f"viking://resources/h.md#{anchor}", category="resources", score=score,
                         text=f"text of {anchor}", lines=lines, location=f"lines {lines[0]}-{lines[1]}")

    doc = Candidate(uri="viking://resources/h.md", category="resources", score=0.9, is_dir=True, text="toc")
    other = Candidate(uri="viking://resources/x.md", category="resources", score=0.5)
    out = passages.merge_neighbours([sec("b", (11, 20), 0.8), doc, sec("a", (1, 10), 0.7), other,
                                     sec("z", (90, 99), 0.4)])
    assert [c.uri for c in out] == ["viking://resources/h.md#a", "viking://resources/x.md",
                                    "viking://resources/h.md#z"]
    merged = out[0]
    assert merged.score == 0.8 and merged.lines == (1, 20) and merged.location == "lines 1-20"
    assert merged.text == "text of a\n\ntext of b"


def test_a_merged_passage_takes_the_place_of_its_best_section_when_scores_tie_at_the_top() -> None:
    """Calibrated scores clip at 1.0: the raw similarity says which section ranked first, and the
    passage takes that one's place (it once took the first section's in line order, third here,
    and the block's budget ran out before it)."""
    def sec(anchor: str, lines: tuple[int, int], raw: float) -> Candidate:
        return Candidate(uri=f"viking://resources/h.md#{anchor}", category="resources", score=1.0, raw=raw,
                         text=f"text of {anchor}", lines=lines)

    other = [Candidate(uri=f"viking://resources/o{i}.md", category="resources", score=1.0, raw=0.95 - i / 100)
             for i in range(2)]
    out = passages.merge_neighbours([sec("b", (11, 20), 1.01), *other, sec("a", (1, 10), 0.92)])
    assert [c.uri for c in out] == ["viking://resources/h.md#a", *(o.uri for o in other)]
    assert out[0].raw == 1.01 and out[0].lines == (1, 20)


def test_turns_of_one_transcript_become_one_passage_in_conversation_order() -> None:
    """Recall over conversations: the chosen turns of one archive are served together, each day's
    heading once and `…` where turns were skipped, at the place of the best turn; another
    transcript's turns and other memories keep their own entries; a passage stops at its cap."""
    t1 = "viking://user/u/memories/events/conversation_s1_m0.md"

    def turn(doc: str, line: int, score: float, day: str = "Conversation on 8 May 2023") -> Candidate:
        return Candidate(uri=f"{doc}#L{line}", category="events", score=score, text=f"{day}\nuser: turn {line}",
                         lines=(line, line), location=f"lines {line}-{line}")

    t2 = "viking://user/u/memories/events/conversation_s2_m0.md"
    other = Candidate(uri="viking://user/u/memories/entities/ann.md", category="entities", score=0.85)
    hits = [turn(t1, 9, 0.9), other, turn(t2, 4, 0.8), turn(t1, 5, 0.7), turn(t1, 6, 0.6),
            turn(t1, 20, 0.5, "Conversation on 9 May 2023")]
    out = passages.group_turns(hits, 10, 1_600)
    assert [c.uri for c in out] == [f"{t1}#L9", other.uri, f"{t2}#L4"]
    p = out[0]
    assert p.score == 0.9 and p.lines == (5, 20) and p.location == "lines 5-20"
    assert p.text.splitlines() == ["Conversation on 8 May 2023", "user: turn 5", "user: turn 6", "…",
                                   "user: turn 9", "Conversation on 9 May 2023", "user: turn 20"]
    assert out[2].text == "Conversation on 8 May 2023\nuser: turn 4"  # alone: unchanged
    capped = passages.group_turns([turn(t1, i, 1 - i / 100) for i in range(1, 40)], 10, 1_600, max_tokens=60)
    assert len(capped) > 1 and all(c.uri.startswith(t1) for c in capped)
    assert sum(c.text.count("user: turn") for c in capped) == 39  # nothing dropped by the cap
    # The budget and the entry limit bound what is grouped: turns past them are left out.
    few = passages.group_turns([turn(t1, i, 1 - i / 100) for i in range(1, 40)], 10, 60)
    assert sum(c.text.count("user: turn") for c in few) < 10
    one = passages.group_turns([turn(f"{t1[:-3]}{i}.md", 1, 1 - i / 100) for i in range(20)], 3, 1_600)
    assert len(one) == 3


def test_the_strongest_turns_bring_the_turns_beside_them() -> None:
    """A reply is often the hit while the turn before it holds the fact, and a question the hit
    while its answer follows: the turns taken while the first entries fill bring the turn before
    them, and the one after them when they ask something, read from the transcript's lines; not
    past a heading, not a turn already taken, not past the budget, not for weaker entries."""
    doc = "viking://user/u/memories/events/conversation_s1_m0.md"
    lines = ["# Conversation on 8 May 2023", "", "user: where did you move from?", "assistant: from Sweden",
             "user: nice, what was it like?", "assistant: cold", "user: and then?", "assistant: then here"]

    def turn(d: str, line: int, score: float) -> Candidate:
        return Candidate(uri=f"{d}#L{line}", category="events", score=score,
                         text=f"Conversation on 8 May 2023\n{lines[line - 1]}", lines=(line, line))

    def beside(c: Candidate, step: int) -> Candidate | None:
        return passages.turn_beside(c, lines, step)

    def said(c: Candidate) -> list[str]:
        return c.text.splitlines()[1:]

    out = passages.group_turns([turn(doc, 4, 0.9)], 10, 1_600, beside=beside)  # an answer: the turn before it
    assert said(out[0]) == ["user: where did you move from?", "assistant: from Sweden"]
    assert out[0].uri == f"{doc}#L4" and out[0].lines == (3, 4) and out[0].score == 0.9
    asks = passages.group_turns([turn(doc, 5, 0.9)], 10, 1_600, beside=beside)  # a question: and its answer
    assert said(asks[0]) == ["assistant: from Sweden", "user: nice, what was it like?", "assistant: cold"]
    assert said(passages.group_turns([turn(doc, 3, 0.9)], 10, 1_600, beside=beside)[0]) == [
        "user: where did you move from?", "assistant: from Sweden"]  # nothing before it but a blank line
    assert passages.turn_beside(turn(doc, 8, 0.9), lines, 1) is None  # the transcript's end
    # Taken once: a turn brought along that is also a later hit is not served twice.
    both = passages.group_turns([turn(doc, 4, 0.9), turn(doc, 3, 0.8)], 10, 1_600, beside=beside)
    assert both[0].text.count("where did you move") == 1
    # Weaker entries (past the first BESIDE_ENTRIES) do not bring theirs.
    others = [turn(f"{doc[:-3]}{i}.md", 6, 0.8 - i / 100) for i in range(passages.BESIDE_ENTRIES)]
    late = passages.group_turns([*others, turn(doc, 8, 0.1)], 10, 1_600, beside=beside)
    assert said(late[-1]) == ["assistant: then here"]
    assert all("what was it like" in c.text for c in late[:-1])
    # Nor past the budget: the hit alone fits, hit and its neighbour do not.
    tight = estimate_tokens(turn(doc, 4, 0.9).text) + passages.head_tokens(turn(doc, 4, 0.9))
    assert passages.group_turns([turn(doc, 4, 0.9)], 10, tight, beside=beside)[0].lines == (4, 4)


def test_a_retrievers_cut_counts_a_transcripts_turns_as_one_entry() -> None:
    """The retriever hands the assembler `limit` entries: turns of one transcript count once (with
    at most TURNS_PER_ENTRY x limit turns), anything else is cut as before."""
    from skald.actors.retriever import candidates as C

    t = "viking://user/u/memories/events/conversation_s1_m0.md"
    turns = [Candidate(uri=f"{t}#L{i}", category="events", score=1 - i / 100, lines=(i, i)) for i in range(3, 60)]
    files = [Candidate(uri=f"viking://resources/f{i}.md", category="resources", score=0.5 - i / 100)
             for i in range(20)]
    assert C.cut(files, 10) == files[:10]
    got = C.cut([*turns, *files], 3)
    assert [c.uri for c in got if "#L" in c.uri] == [c.uri for c in turns[: C.TURNS_PER_ENTRY * 3]]
    assert [c.uri for c in got if "#L" not in c.uri] == [f.uri for f in files[:2]]
    assert not sections.is_turn("viking://resources/h.md#intro") and sections.is_turn(f"{t}#L4")


def test_transcripts_are_read_through_the_cache_and_a_cut_head_loses_its_last_line(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The assembler reads a candidate turn's transcript from disk (once: then the cache answers
    while the file is unchanged). A transcript over the read cap is read as a head, whose last
    line may be cut mid-turn: it is never offered as a turn."""
    from skald.actors.assembler import reads, textcache
    from skald.store.uri import Identity, Namespace

    ns, ident, cache = Namespace(tmp_path), Identity(), textcache.TextCache()
    doc = "viking://user/default/memories/events/conversation_s1_m0.md"
    path = ns.resolve(doc, ident).path
    path.parent.mkdir(parents=True)
    path.write_text("# Conversation on 8 May 2023\n\nuser: hi\nassistant: hello\n")
    hit = Candidate(uri=f"{doc}#L4", category="events", score=0.9, lines=(4, 4))
    other = Candidate(uri="viking://resources/a.md", category="resources", score=0.5)
    assert not reads.turn_documents({"memories": [other]})
    assert reads.turn_documents({"memories": [other, hit, hit]}) == [doc]  # each transcript once
    unread: list[str] = []
    got = reads.transcripts(ns, cache, reads.turn_documents({"memories": [hit, other]}), ident, unread)
    assert got == {doc: ["# Conversation on 8 May 2023", "", "user: hi", "assistant: hello"]}
    assert reads.transcripts(ns, cache, [doc], ident, unread) == got and cache.hits == 1 and not unread
    line = "user: " + "x" * 999 + "\n"
    path.write_text("# Conversation on 8 May 2023\n\n" + line * (reads.READ_MAX_BYTES // len(line) + 5))
    lines = reads.transcripts(ns, cache, [doc], ident, unread)[doc]
    assert lines and all(ln == line.rstrip("\n") for ln in lines[2:])  # every line offered is whole


def test_weaker_turns_are_served_compact_so_more_of_them_fit(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Past the first COMPACT_AFTER turns a block takes, a turn keeps its first sentences within
    COMPACT_CHARS (its speaker first, so who said it and where stay); the stronger ones are whole,
    and under the same budget more turns fit than when every turn is served whole."""
    doc = "viking://user/u/memories/events/conversation_s1_m0.md"
    said = ("assistant: [D1:{n}] Mel: We went camping at the lake last weekend. The kids loved the "
            "campfire and we stayed up late telling stories about the old lighthouse. Next time we "
            "want to hike to the ridge and see the sunrise from the top.")

    def turn(n: int) -> Candidate:
        return Candidate(uri=f"{doc}#L{2 * n}", category="events", score=1 - n / 100, lines=(2 * n, 2 * n),
                         text=f"Conversation on 8 May 2023\n{said.format(n=n)}")

    hits = [turn(n) for n in range(1, 30)]
    out = passages.group_turns(hits, 10, 700)
    lines = out[0].text.splitlines()[1:]
    whole = [ln for ln in lines if ln != "…" and ln.endswith("sunrise from the top.")]
    cut = [ln for ln in lines if ln != "…" and not ln.endswith("sunrise from the top.")]
    assert len(whole) == passages.COMPACT_AFTER
    full = said.format(n=0).split(": ", 2)[2]  # what every turn says after its speaker
    assert cut and all(len(ln) <= passages.COMPACT_CHARS and ln.endswith(".")  # whole sentences, its start
                       and full.startswith(ln.split(": ", 2)[2]) for ln in cut)
    assert all(ln.startswith("assistant: [D1:") for ln in whole + cut)
    monkeypatch.setattr(passages, "COMPACT_AFTER", 10**9)
    every = passages.group_turns(hits, 10, 700)
    assert len(whole) + len(cut) > sum(ln.startswith("assistant:") for ln in every[0].text.splitlines())
    short = Candidate(uri=f"{doc}#L1", category="events", score=0.5, text="Conversation\nuser: ok.")
    assert passages.compact(short) is short
    long_first = msgspec.structs.replace(short, text="Conversation\nuser: " + "word " * 60)
    assert passages.compact(long_first).text.endswith("…")
