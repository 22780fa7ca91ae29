"""Which candidates enter assembly: quota-free (one search, pure score order, `limit`) or
bucketed by quotas (docs/design/retrieval-api.md): each bucket first takes up to its quota; places a bucket cannot
fill go to the other buckets' best remaining hits; the total never exceeds the quota sum and
the merged list is not cut by a second global limit."""

from __future__ import annotations

from skald.messages.context import Bucket, Candidate


def _rank(c: Candidate) -> tuple[float, float, str]:
    return (-c.score, -c.raw, c.uri)  # the raw similarity orders what the clipped score ties


def buckets(quotas: dict[str, int] | None, limit: int) -> list[Bucket]:
    """What to ask the retriever for. A bucket fetches up to the whole quota sum so that it can
    donate to the others; a quota of 0 closes the bucket. The retriever counts a transcript's
    turns as one entry, so a bucket brings enough turns to group."""
    if quotas is None:
        return [Bucket(name="all", limit=limit)]
    total = sum(quotas.values())
    return [Bucket(name=k, limit=total) for k, q in quotas.items() if q > 0 and total > 0]


def select(found: dict[str, list[Candidate]], quotas: dict[str, int] | None, limit: int) -> list[Candidate]:
    if quotas is None:
        return sorted(found.get("all", []), key=_rank)[:limit]
    taken: dict[str, Candidate] = {}
    spare: list[Candidate] = []
    for name, q in quotas.items():
        hits = found.get(name, [])
        for c in hits[:q]:
            taken.setdefault(c.uri, c)
        spare += hits[q:]
    room = sum(quotas.values()) - len(taken)
    for c in sorted(spare, key=_rank):
        if room <= 0:
            break
        if c.uri not in taken:
            taken[c.uri] = c
            room -= 1
    return sorted(taken.values(), key=_rank)
