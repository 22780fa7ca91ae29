"""Pure cores of sessions: turns, retention, externalisation, archive states, Phase 2 contract."""

from __future__ import annotations

import json

import msgspec
import pytest

from skald.actors.archive import phase2
from skald.actors.session import externalize, frontier
from skald.actors.session import turns as turns_mod
from skald.actors.text import dates
from skald.actors.text import sections as sections_mod
from skald.actors.text.textfile import Doc
from skald.messages.sessions import Message, TextPart, ToolPart
from skald.store import archive_state
from skald.store.session_meta import Checkpoint, DoneMarker, FailedMarker


def user(i: str, text: str = "do it") -> Message:
    return Message(id=i, role="user", parts=[TextPart(text=text)])


def asst(i: str, text: str = "ok", tool: str | None = None, out: str = "", status: str = "completed") -> Message:
    parts: list = [TextPart(text=text)] if text else []
    if tool:
        parts.append(ToolPart(tool_id=tool, tool_name="sh", tool_output=out, tool_status=status))
    return Message(id=i, role="assistant", parts=parts)


def result(i: str, tool: str, out: str = "done") -> Message:
    return Message(id=i, role="user", parts=[ToolPart(tool_id=tool, tool_name="sh", tool_output=out,
                                                      tool_status="completed")])


def test_tool_only_user_message_is_transport_not_a_turn() -> None:
    turns = turns_mod.parse_turns([user("u1"), asst("a1", tool="t1", out="", status="pending"), result("r1", "t1"),
                           asst("a2")])
    assert len(turns) == 1 and [s.ids for s in turns[0].steps] == [["a1", "r1"], ["a2"]]


def test_call_answered_later_widens_the_step() -> None:
    msgs = [user("u1"), asst("a1", tool="t1", status="pending"), asst("a2", text="thinking"), result("r1", "t1"),
            asst("a3")]
    steps = turns_mod.parse_turns(msgs)[0].steps
    assert steps[0].ids == ["a1", "a2", "r1"] and steps[1].ids == ["a3"]


def test_orphan_result_before_any_step_forms_its_own_atom() -> None:
    turns = turns_mod.parse_turns([result("r0", "tx"), user("u1"), asst("a1")])
    assert turns[0].anchor is None and turns[0].steps[0].ids == ["r0"]


def test_one_user_ten_steps_keeps_the_user() -> None:
    msgs = [user("u1")] + [asst(f"a{i}", text="x" * 40) for i in range(10)]
    plan = turns_mod.plan_retention(msgs, turn_count=3, token_budget=12_000)
    assert plan.retained_messages[0] == "u1" and plan.archive_messages == []
    legacy = turns_mod.plan_keep_recent(msgs, 10)
    assert legacy.retained_messages[0] == "a0"  # the legacy mode keeps messages, not turns


def test_turn_budget_archives_oldest_whole_turns_first() -> None:
    msgs = []
    for t in range(5):
        msgs += [user(f"u{t}", "q" * 400), asst(f"a{t}", "r" * 400)]
    plan = turns_mod.plan_retention(msgs, turn_count=3, token_budget=12_000)
    assert plan.retained_messages == ["u2", "a2", "u3", "a3", "u4", "a4"]
    tight = turns_mod.plan_retention(msgs, turn_count=3, token_budget=300)  # each turn is 208 tokens
    assert tight.retained_messages == ["u4", "a4"] and not tight.budget_exceeded


def test_oversized_turn_keeps_user_checkpoint_and_raw_tail() -> None:
    msgs = [user("u1", "investigate the pool")]
    for i in range(18):
        msgs += [asst(f"a{i}", "step", tool=f"t{i}", status="pending"), result(f"r{i}", f"t{i}", "z" * 1200)]
    msgs.append(asst("final", "pool exhausted"))
    plan = turns_mod.plan_retention(msgs, turn_count=3, token_budget=1500)
    assert plan.retained_messages[0] == "u1" and plan.retained_messages[-1] == "final"
    assert plan.turn_anchor == "u1" and plan.checkpoint_source_message_ids[:2] == ["a0", "r0"]
    kept = set(plan.retained_messages)
    for i in range(18):  # a call never separated from its result
        assert (f"a{i}" in kept) == (f"r{i}" in kept)
    assert set(plan.checkpoint_source_message_ids) == set(plan.archive_messages)
    assert plan.raw_tail_start_message_id in kept and plan.estimated_active_tokens <= 1500


def test_min_raw_tail_steps_wins_over_budget() -> None:
    msgs = [user("u1")] + [asst(f"a{i}", "w" * 4000) for i in range(4)]
    plan = turns_mod.plan_retention(msgs, turn_count=1, token_budget=100, min_raw_tail_steps=2)
    assert plan.retained_messages == ["u1", "a2", "a3"] and plan.budget_exceeded


def test_externalisation_is_per_turn() -> None:
    msgs = [user("u1")]
    for i in range(12):
        msgs += [asst(f"a{i}", tool=f"t{i}", out=str(i % 10) * 10_000)]
    chosen = externalize.plan_externalization(msgs)
    assert len(chosen) == 3  # 120k -> under 100k by moving the largest three
    big = externalize.plan_externalization([user("u"), asst("a", tool="t", out="y" * 20_001)])
    assert [e.message_id for e in big] == ["a"]
    assert externalize.plan_externalization([user("u"), asst("a", tool="t", out="y" * 20_000)]) == []


def test_only_the_last_turn_is_weighed_for_a_new_output() -> None:
    """admit() weighs the last Turn and the new message alone: a message without an inline output
    changes no Turn's total, and the last Turn starts at its user query."""
    msgs = [user("u1"), asst("a1", tool="t1", out="x" * 30_000), user("u2"), asst("a2"), asst("a3")]
    assert turns_mod.turn_start(msgs) == 2
    assert turns_mod.turn_start([asst("a0"), asst("a1")]) == 0
    assert not externalize.has_outputs(asst("a4")) and externalize.has_outputs(asst("a5", tool="t", out="y"))
    tail = [*msgs[turns_mod.turn_start(msgs):], asst("a6", tool="t6", out="z" * 20_001)]
    assert [e.message_id for e in externalize.plan_externalization(tail)] == ["a6"]


def listing(i: int, state: str, ids: list[str], covered_failed: list[str] | None = None,
            checkpoints: list | None = None) -> archive_state.ArchiveListing:
    a = archive_state.ArchiveListing(archive_id=f"archive_{i:03d}", index=i, messages=[user(x) for x in ids],
                         checkpoints=checkpoints or [])
    if state == "completed":
        a.done, a.overview = DoneMarker(covered_failed_archives=covered_failed or []), f"overview {i}"
    elif state == "failed":
        a.failed = FailedMarker(stage="llm")
    elif state == "invalid":
        a.done = DoneMarker()
    return a


def ctx(listings: list[archive_state.ArchiveListing], root: list[str]) -> tuple[str, list[str]]:
    states = archive_state.scan(listings)
    ov, msgs, _ = archive_state.assemble(states, [user(x) for x in root], {s.listing.archive_id: "u" for s in states})
    return ov, [m.id for m in msgs]


@pytest.mark.parametrize("rows,overview,ids", [
    ([(1, "pending", ["m1"]), (2, "pending", ["m2"])], "", ["m1", "m2", "m3"]),
    ([(1, "completed", ["m1"]), (2, "pending", ["m2"])], "overview 1", ["m2", "m3"]),
    ([(1, "completed", ["m1"]), (2, "completed", ["m2"])], "overview 2", ["m3"]),
    ([(1, "failed", ["m1"])], "", ["m1", "m3"]),
    ([(1, "invalid", ["m1"])], "", ["m1", "m3"]),
])
def test_context_from_markers(rows: list, overview: str, ids: list[str]) -> None:
    assert ctx([listing(*r) for r in rows], ["m3"]) == (overview, ids)


def test_failed_archive_is_rolled_forward_by_a_later_success() -> None:
    ls = [listing(1, "failed", ["m1"]), listing(2, "completed", ["m2"], covered_failed=["archive_001"])]
    assert ctx(ls, ["m3"]) == ("overview 2", ["m3"])
    states = archive_state.scan(ls)
    assert states[0].state == "failed" and states[0].covered


def test_stable_dedup_and_checkpoint_after_live_anchor() -> None:
    cp = [Checkpoint(turn_anchor_message_id="u9", source_message_ids=["x"], abstract="did things")]
    ls = [listing(1, "pending", ["m1", "m2"]), listing(2, "completed", ["m0"], checkpoints=cp)]
    ls[1].index = 0
    ls[1].archive_id = "archive_000"
    states = archive_state.scan(ls)
    _, msgs, n = archive_state.assemble(states, [user("m2"), user("u9"), user("m5")], {"archive_000": "a0",
                                                                                       "archive_001": "a1"})
    assert [m.id for m in msgs][:4] == ["m1", "m2", "u9", msgs[3].id] and n == 1
    assert msgs[3].message_kind == "checkpoint" and msgs[3].parts[0].abstract == "did things"  # type: ignore[union-attr]


def test_phase2_input_marks_sources_without_ids() -> None:
    msgs = [asst("a1", "checked peers", tool="t1", out="[]"), asst("a2", "peers empty")]
    req = [phase2.Request(index=0, turn_anchor_message_id="u1", source_message_ids=["a1"], budget_tokens=50,
                     archive_id="archive_001")]
    text = phase2.format_input(msgs, req)
    assert '<checkpoint_source index="0">' in text and text.index("</checkpoint_source>") < text.index("peers empty")
    assert "a1" not in text and "u1" not in text and "archive_001" not in text
    good = json.dumps({"overview": "# WM", "checkpoint_summaries": ["checked peers: empty"],
                       "memories": [{"category": "events", "content": "# Summary\n\nx"}, {"category": "bogus",
                                                                                            "content": "y"}]})
    out = phase2.parse_output(f"```json\n{good}\n```", 1)
    assert out.checkpoint_summaries == ["checked peers: empty"] and len(out.memories) == 1
    for bad in ('{"overview": "x", "checkpoint_summaries": []}', '{"checkpoint_summaries": ["a"]}', "nope",
                '{"overview": "x", "checkpoint_summaries": [""]}'):
        with pytest.raises(ValueError):
            phase2.parse_output(bad, 1)
    rec = phase2.checkpoint_records(req, ["word " * 500])
    assert rec[0].estimated_tokens <= 50 and rec[0].source_message_ids == ["a1"]


def test_extractive_phase2_is_real() -> None:
    msgs = [user("u1", "Deploy the billing service to staging."), asst("a1", "Deployed; tests pass.")]
    req = [phase2.Request(index=0, turn_anchor_message_id="u1", source_message_ids=["a1"], budget_tokens=100,
                     archive_id="archive_001")]
    out = phase2.extractive(msgs, req)
    assert "Deploy the billing service" in out.overview and out.checkpoint_summaries == ["Deployed; tests pass."]
    assert out.memories == []  # the archive's memories are its exchanges, written for every path


MAY_8_2023 = 1683554160.0  # 13:56 UTC


def test_transcript_keeps_what_both_sides_said_with_dates_and_sources() -> None:
    """Nothing archived is lost to recall offline: every message lands, verbatim, in the archive's
    transcript memory, a line per turn under a heading per day, relative dates resolved, sources
    named; the indexer's turn splitter gives each line its own section with the turn before it."""
    msgs = []
    for i in range(30):
        m = user(f"m{2 * i:02d}", f"Question {i}: I went hiking yesterday with Ann near lake {i}.")
        r = asst(f"m{2 * i + 1:02d}", f"Answer {i}: lake {i} is lovely in May, said Bob.")
        day = 86_400 if i >= 20 else 0  # the last ten exchanges happen the next day
        msgs += [msgspec.structs.replace(m, created_at=MAY_8_2023 + 60 * i + day),
                 msgspec.structs.replace(r, created_at=MAY_8_2023 + 60 * i + 30 + day)]
    mem = phase2.transcript_memory("s1", msgs)
    assert mem is not None and mem["category"] == "events" and mem["name"] == "conversation_s1_m00.md"
    text = mem["content"]
    for i in range(30):
        assert f"Question {i}:" in text and f"Answer {i}:" in text
    lines = text.splitlines()
    assert lines[0] == "# Conversation on 8 May 2023" and lines[1] == "Session s1, messages m00 to m59."
    assert "yesterday [7 May 2023]" in lines[3] and lines[3].startswith("user: Question 0")
    assert "## Conversation on 9 May 2023" in lines and "yesterday [8 May 2023]" in text
    secs = sections_mod.turns(Doc(text=text, format="markdown"))
    assert len(secs) == 60 and all(s.start == s.end for s in secs)
    assert secs[0].context == "" and secs[1].context == secs[0].text
    assert secs[0].title == "Conversation on 8 May 2023" and secs[-1].title == "Conversation on 9 May 2023"
    assert secs[40].context == ""  # a new day starts a new context
    assert phase2.transcript_memory("s1", []) is None


def test_working_memory_accumulates_over_ten_archives() -> None:
    """Each archive's extractive overview starts from the previous one: the first commit's lead is
    still there ten commits later, and the carried timeline is bounded."""
    overview = ""
    for n in range(10):
        m = msgspec.structs.replace(user(f"u{n}", f"Commit {n}: the caddy port is {1930 + n}."),
                                    created_at=MAY_8_2023 + 86400 * n)
        overview = phase2.extractive([m, asst(f"a{n}", "noted")], [], overview).overview
    assert "Commit 0: the caddy port is 1930." in overview and "Commit 9:" in overview
    assert len(phase2.timeline(overview)) == 10
    long = "## Timeline\n" + "\n".join(f"- line {i}" for i in range(500))
    assert len(phase2.timeline(phase2.extractive([user("x", "new")], [], long).overview)) == phase2.TIMELINE_MAX


def test_relative_dates_resolve_against_the_day_said() -> None:
    said = dates.resolve_relative("Yesterday we met; last week I moved; last year was hard; last Friday too.",
                                  MAY_8_2023)
    assert "Yesterday [7 May 2023]" in said and "last week [the week of 1 May 2023]" in said
    assert "last year [2022]" in said and "last Friday [5 May 2023]" in said
    assert dates.resolve_relative("nothing relative here", MAY_8_2023) == "nothing relative here"


def uri_of(archive_id: str) -> str:
    return f"viking://user/u/sessions/s/history/{archive_id}"


def test_frontier_folds_final_archives_and_stops_at_the_first_pending() -> None:
    """Completed archives and rolled-forward failures fold into the frontier; a pending one stops it,
    and what lies past it is read again next time."""
    tail = [listing(1, "failed", ["m1"]), listing(2, "completed", ["m2"], covered_failed=["archive_001"]),
            listing(3, "pending", ["m3"]), listing(4, "completed", ["m4"])]
    moved, states = frontier.advance(frontier.Frontier(), tail, [user("m5")], uri_of)
    assert moved.index == 2 and moved.overview == "overview 2"
    assert [s.listing.archive_id for s in states] == [frontier.FRONTIER_ID, "archive_003", "archive_004"]
    assert states[0].state == "completed" and states[0].listing.overview == "overview 2"
    ov, msgs, _ = archive_state.assemble(states, [user("m5")], {s.listing.archive_id: "u" for s in states})
    assert ov == "overview 4" and [m.id for m in msgs] == ["m3", "m5"]


def test_frontier_keeps_checkpoints_only_while_their_anchor_is_live() -> None:
    cps = [Checkpoint(turn_anchor_message_id="u1", abstract="one"), Checkpoint(turn_anchor_message_id="u2",
                                                                                 abstract="two")]
    moved, states = frontier.advance(frontier.Frontier(), [listing(1, "completed", ["a1"], checkpoints=cps)],
                                     [user("u2")], uri_of)
    assert [cp.abstract for cp in moved.checkpoints] == ["two"]
    assert moved.checkpoints[0].archive_uri == uri_of("archive_001")
    again, _ = frontier.advance(moved, [], [user("u3")], uri_of)  # u2 left root: its checkpoint goes too
    assert again.index == 1 and again.checkpoints == ()


def test_frontier_does_not_move_over_an_uncovered_failure() -> None:
    moved, states = frontier.advance(frontier.Frontier(), [listing(1, "failed", ["m1"]),
                                                           listing(2, "pending", ["m2"])], [], uri_of)
    assert moved == frontier.Frontier() and [s.state for s in states] == ["failed", "pending"]


def test_roll_forward_input_is_bounded_newest_first() -> None:
    """One Phase 2 prompt never grows without bound: the newest failed archives that fit are
    rolled forward, the older ones wait (and count an attempt)."""
    big = [listing(i, "failed", [f"m{i}_{j}" for j in range(40)]) for i in range(1, 6)]
    for a in big:
        a.messages = [user(m.id, "word " * 50) for m in a.messages]
    states = archive_state.scan(big)
    one = sum(phase2.estimate_tokens(phase2.message_line(m)) for m in big[0].messages)
    rolled, left = phase2.bound_roll_forward(states, 2 * one + 10)
    assert [s.listing.index for s in rolled] == [4, 5] and [s.listing.index for s in left] == [1, 2, 3]
    assert phase2.bound_roll_forward(states, one - 1) == ([], states)
    assert phase2.bound_roll_forward(states, 10 ** 9)[0] == states


def test_fit_to_budget_keeps_the_newest_whole_steps() -> None:
    msgs = [user("u1", "a " * 200), asst("a1", "b " * 50, tool="t1", out="c " * 100), result("r1", "t1", "d " * 50),
            user("u2", "e " * 20), asst("a2", "f " * 20)]
    whole = sum(turns_mod.message_tokens(m) for m in msgs)
    assert turns_mod.fit_to_budget(msgs, whole) == (msgs, 0)
    kept, dropped = turns_mod.fit_to_budget(msgs, whole - 10)
    assert [m.id for m in kept] == ["a1", "r1", "u2", "a2"] and dropped == 1
    last_two = sum(turns_mod.message_tokens(m) for m in msgs[3:])
    kept, dropped = turns_mod.fit_to_budget(msgs, last_two + 5)  # the step a1+r1 does not fit whole
    assert [m.id for m in kept] == ["u2", "a2"] and dropped == 3
    assert turns_mod.fit_to_budget(msgs, 0) == ([], 5)
