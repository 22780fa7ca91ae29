"""A query's names that most rows hold, left out of what is embedded.

In a conversation's memory the speakers' names are in nearly every turn ("[D3:7] Caroline: ..."),
so a question naming one ("What did Caroline research?") is pulled by its name toward every turn
of hers alike, short greetings first, and away from the turn about the research. A word that most
rows hold tells them apart no better than a function word (its inverse document frequency is
near zero): a second embedding is asked of the question without it, and the two are added
(`blended`). The keyword half keeps the whole question, where BM25 already weighs such a word near
nothing.
"""

from __future__ import annotations

import re

import numpy as np

from skald.store.terms import FUNCTION_WORDS

# A capitalised word held by at least this share of the rows is left out of the embedded query.
COMMON_SHARE = 0.1
# A capitalised word, with a possessive after it ("Caroline's").
_NAME = re.compile(r"\b([^\W\d_][\w-]*)(?:['’]s\b)?")


def names_in(query: str) -> list[str]:
    """The capitalised words of a query after its first (which any sentence capitalises), each
    once: the words whose share of the rows `without_common_names` needs."""
    words = [m.group(1) for m in _NAME.finditer(query)][1:]
    return list(dict.fromkeys(w for w in words if len(w) > 1 and w[0].isupper()))


def without_common_names(query: str, shares: dict[str, float], share: float = COMMON_SHARE) -> str:
    """`query` without its names (`names_in`) that `share` or more of the rows hold (`shares`: word, lower-cased, to
    its share). The query as it was when nothing is left out, or when nothing else would be left."""
    common = {w for w in names_in(query) if shares.get(w.lower(), 0.0) >= share}
    head = _NAME.search(query)  # the first word stays, whatever it is
    if not common or head is None:
        return query
    out = head.group(0) + _NAME.sub(lambda m: "" if m.group(1) in common else m.group(0), query[head.end():])
    out = re.sub(r"\s+([?!.,;:])", r"\1", re.sub(r"\s{2,}", " ", out)).strip()
    left = [m.group(1).lower() for m in _NAME.finditer(out)]
    return out if any(w not in FUNCTION_WORDS for w in left) else query


def blended(plain: np.ndarray, without: np.ndarray) -> np.ndarray:
    """The query's vector and its vector without the common names, added and made unit again:
    ranked by the sum of both cosines. Alone, the vector without the names scores every row lower
    (a shorter question sits further from any turn), so fewer rows pass the calibrated threshold
    and blocks went a fifth short of their budget; the sum keeps the question's own scale."""
    v = plain + without
    n = float(np.linalg.norm(v))
    return v / n if n else plain
