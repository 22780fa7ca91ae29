"""A question comparing two names, asked of each (`actors/text/comparative.py`)."""

from __future__ import annotations

import pytest

from skald.actors.text.comparative import parts
from skald.actors.text.intent import offline


@pytest.mark.parametrize(("query", "expected"), [
    ("What do Jon and Gina both have in common?", ["What does Jon have in common?", "What does Gina have in common?"]),
    ("What movies have both Joanna and Nate seen?", ["What movies has Joanna seen?", "What movies has Nate seen?"]),
    ("Did Jon and Gina both enter contests?", ["Did Jon enter contests?", "Did Gina enter contests?"]),
    ("Who is Tim and John's favourite player, the same one?",
     ["Who is Tim's favourite player, the same one?", "Who is John's favourite player, the same one?"]),
    ("How are New York and Los Angeles similar?", ["How is New York similar?", "How is Los Angeles similar?"]),
    ("How do Kafka and NATS differ in retention?",
     ["How does Kafka differ in retention?", "How does NATS differ in retention?"]),
])
def test_a_comparison_of_two_names_is_asked_of_each(query: str, expected: list[str]) -> None:
    assert parts(query) == expected


@pytest.mark.parametrize("query", [
    "When did Caroline and Melanie go to a pride festival together?",  # one thing done together
    "What is the difference between Postgres and MySQL?",  # "between": the pair is the subject
    "What do Ann and Ann share?",
    "What do both teams share?",  # no names
    "what do jon and gina both like?",  # no capitalised names to tell a name from a word
    "",
])
def test_anything_else_is_left_whole(query: str) -> None:
    assert parts(query) == []


def test_the_offline_plan_asks_each_side_and_says_split() -> None:
    q = "What do Jon and Gina both have in common?"
    plan = offline(q)
    assert plan.status == "split"
    assert [t.query for t in plan.queries] == [q, *parts(q)]
    assert all(t.context_type is None for t in plan.queries)  # every type, as the original query
    whole = offline("When did Jon open his store?")
    assert whole.status == "original" and [t.query for t in whole.queries] == ["When did Jon open his store?"]
