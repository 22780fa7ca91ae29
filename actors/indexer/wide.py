"""When a wide directory's summary is refreshed.

Every ingest job refreshes the overview and abstract of each directory above what it changed.
For a directory of a few entries that is cheap and keeps its summary exact at once. A directory
of 100,000 entries costs one listing of them all per job (~0.3 s here), so a bulk load into one
folder grew quadratically: 0.6 jobs/s at 5,000 entries. OpenViking refreshes a wide directory
only once a share of its children changed; here a wide directory is refreshed at most once per
interval, the jobs in between leave it to one refresh after the interval, which takes in
everything they changed. The interval is `REFRESH_S`, or `COST_RATIO` times what its last listing
took if longer, so listing a wide directory never takes more than 1/COST_RATIO of the indexer's
time however wide it grows (at 60,000+ entries on a busy machine a listing took ~1 s, and a 5 s
interval left the fill at 20 jobs/s). Narrow directories are never deferred.
"""

from __future__ import annotations

from dataclasses import dataclass, field

WIDE_ENTRIES = 1_000  # entries at its last refresh from which a directory counts as wide
REFRESH_S = 5.0  # a wide directory is refreshed at most once per this many seconds...
COST_RATIO = 20.0  # ...or per this many times its last listing's duration, if longer


@dataclass(slots=True)
class WideDirs:
    """Each wide directory's entry count and when it may be refreshed again (this process's), and
    the ones whose refresh waits. Pure: the caller says what time it is."""

    entries: dict[str, int] = field(default_factory=dict)
    next_at: dict[str, float] = field(default_factory=dict)
    waiting: set[str] = field(default_factory=set)
    deferred: int = 0  # refreshes jobs left to a later one (health)

    def record(self, uri: str, entries: int, now: float, took: float = 0.0) -> None:
        """`uri` was just refreshed with `entries` entries; listing them took `took` seconds."""
        if entries >= WIDE_ENTRIES:
            self.entries[uri], self.next_at[uri] = entries, now + max(REFRESH_S, COST_RATIO * took)
        else:  # narrow: nothing to remember
            self.entries.pop(uri, None)
            self.next_at.pop(uri, None)
        self.waiting.discard(uri)

    def defer(self, uri: str, now: float) -> bool:
        """Whether a job should leave `uri` to a later refresh (then it waits for `due`)."""
        if uri not in self.entries or now >= self.next_at[uri]:
            return False
        self.waiting.add(uri)
        self.deferred += 1
        return True

    def take_all(self) -> list[str]:
        """Every waiting directory, due now whatever its interval (a stopping indexer)."""
        ready = sorted(self.waiting)
        self.waiting.clear()
        return ready

    def due(self, now: float) -> tuple[list[str], float | None]:
        """(the waiting directories whose interval is over, seconds until the next one is)."""
        ready = sorted(u for u in self.waiting if now >= self.next_at.get(u, now))
        self.waiting.difference_update(ready)
        later = [self.next_at[u] - now for u in self.waiting if u in self.next_at]
        return ready, (min(later) if later else None)
