"""When a wide directory's summary is refreshed.

Every ingest job refreshes the overview and abstract of each directory above what it changed.
For a directory of a few entries that is cheap and keeps its summary exact at once. A directory
of 100,000 entries costs one listing of them all per job (~0.3 s here), so a bulk load into one
folder grew quadratically: 0.6 jobs/s at 5,000 entries. OpenViking refreshes a wide directory
only once a share of its children changed; here a wide directory is refreshed at most once per
`REFRESH_S`, the jobs in between leave it to one refresh after the interval, which takes in
everything they changed. Narrow directories are never deferred.
"""

from __future__ import annotations

from dataclasses import dataclass, field

WIDE_ENTRIES = 1_000  # entries at its last refresh from which a directory counts as wide
REFRESH_S = 5.0  # a wide directory's summary lags its entries by at most this much


@dataclass(slots=True)
class WideDirs:
    """Each directory's entry count and time at its last refresh (this process's), and the wide
    ones whose refresh waits. Pure: the caller says what time it is."""

    entries: dict[str, int] = field(default_factory=dict)
    refreshed: dict[str, float] = field(default_factory=dict)
    waiting: set[str] = field(default_factory=set)
    deferred: int = 0  # refreshes jobs left to a later one (health)

    def record(self, uri: str, entries: int, now: float) -> None:
        """`uri` was just refreshed with `entries` entries."""
        if entries >= WIDE_ENTRIES:
            self.entries[uri], self.refreshed[uri] = entries, now
        else:  # narrow: nothing to remember
            self.entries.pop(uri, None)
            self.refreshed.pop(uri, None)
        self.waiting.discard(uri)

    def defer(self, uri: str, now: float) -> bool:
        """Whether a job should leave `uri` to a later refresh (then it waits for `due`)."""
        if uri not in self.entries or now - self.refreshed[uri] >= REFRESH_S:
            return False
        self.waiting.add(uri)
        self.deferred += 1
        return True

    def due(self, now: float) -> tuple[list[str], float | None]:
        """(the waiting directories whose interval is over, seconds until the next one is)."""
        ready = sorted(u for u in self.waiting if now - self.refreshed.get(u, 0.0) >= REFRESH_S)
        self.waiting.difference_update(ready)
        later = [self.refreshed[u] + REFRESH_S - now for u in self.waiting if u in self.refreshed]
        return ready, (min(later) if later else None)
