"""The deterministic fact extractor (no model): the user's preferences and the names a
conversation is about, keyed so later archives merge into the same memory."""

from __future__ import annotations

from skald.actors.text import facts

MAY_8 = 1683532800.0  # 8 May 2023, 08:00 UTC


def said(i: int, role: str, text: str, at: float = MAY_8) -> facts.Said:
    return facts.Said(f"m{i}", role, text, at)


def test_the_users_likes_dislikes_and_favourites_are_preferences_keyed_by_topic() -> None:
    got = facts.preferences([
        said(1, "user", "I really love hiking in the Alps! Do you like pottery?"),
        said(2, "user", "I don't like crowds, honestly. My favourite band is The Cure."),
        said(3, "user", "I love that you remembered. I like how it turned out."),  # reactions, not topics
        said(4, "assistant", "I love hiking too."),  # the assistant's words are not the user's preferences
    ])
    assert [(f.key, f.line) for f in got] == [
        ("hiking alps", "- 8 May 2023: user: I really love hiking in the Alps! (message m1)"),
        ("crowds", "- 8 May 2023: user: I don't like crowds, honestly. (message m2)"),
        ("favourite band", "- 8 May 2023: user: My favourite band is The Cure. (message m2)"),
    ]


def test_a_name_mentioned_twice_is_an_entity_but_the_speakers_are_not() -> None:
    got = facts.entities([
        said(1, "user", "[D1:1] Caroline: Hey Mel! We adopted a puppy, Rex, from the Oakland shelter."),
        said(2, "assistant", "[D1:2] Melanie: Aww Caroline! How is Rex settling in?"),
        said(3, "user", "[D1:3] Caroline: Rex sleeps all day. Mel, you should visit."),
    ])
    assert {f.key for f in got} == {"Rex"}  # Oakland once; Caroline, Mel(anie) are who is talking
    assert [f.line.split(": ", 2)[-1] for f in got] == [
        "We adopted a puppy, Rex, from the Oakland shelter. (message m1)",
        "How is Rex settling in? (message m2)", "Rex sleeps all day. (message m3)"]


def test_merging_adds_only_new_lines_and_keeps_the_newest_few() -> None:
    line = "- 8 May 2023: user: I love hiking in the Alps. (message m1)"
    first = facts.merged("", "preferences", "hiking alps", [line])
    assert first == "# Preference: hiking alps\n\n- 8 May 2023: user: I love hiking in the Alps. (message m1)\n"
    same = ["- 9 May 2023: user: I love hiking in the Alps! (message m7)"]  # said again, another day
    assert facts.merged(first, "preferences", "hiking alps", same) is None
    more = facts.merged(first, "preferences", "hiking alps", ["- 9 May 2023: user: I love hiking in the Alps in "
                                                              "winter most of all. (message m8)"])
    assert more is not None and more.count("\n- ") == 2
    many = [f"- 9 May 2023: user: fact number {i} about something else entirely {i * 7} (message m{i})"
            for i in range(facts.MAX_LINES + 5)]
    capped = facts.merged(more, "preferences", "hiking alps", many)
    assert capped is not None and capped.count("\n- ") == facts.MAX_LINES and "(message m44)" in capped


def test_reactions_to_what_another_said_or_owns_are_not_preferences() -> None:
    got = facts.preferences([
        said(1, "user", "I love your turtles so much! I really like the idea and the acting."),
        said(2, "user", "I love the thought Nate! They make all their props and I love their work."),
        said(3, "user", "Connecting with the things I love makes writing even more fun."),  # a relative clause
        said(4, "user", "I love running my own studio. I love traveling to new places."),
    ])
    assert [f.key for f in got] == ["running studio", "traveling places"]  # fillers ("own", "new") dropped


def test_names_are_whole_possessives_name_their_owner_and_nicknames_of_speakers_are_speakers() -> None:
    got = facts.entities([
        said(1, "user", "[D1:1] Joanna: Iron Man is my favourite. I also loved the jokes of Iron Man."),
        said(2, "assistant", "[D1:2] Nate: Hey Jo! I prefer Spider-Man. Glad Max is with me. Max loves films."),
        said(3, "user", "[D1:3] Joanna: Spider-Man is fine. We fed Oliver's cat. Then Oliver waved, Jo."),
        said(4, "user", "[D1:4] Joanna: I am reading The Name of the Wind. I like The Name of the Wind."),
    ])
    assert sorted({f.key for f in got}) == ["Iron Man", "Max", "Name of the Wind", "Oliver", "Spider-Man"]
