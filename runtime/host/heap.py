"""CPython's cyclic collector, set for a server process once it has started.

CPython collects its youngest generation every 700 container allocations. A request allocates a few
hundred (frames, futures, msgspec structs, parsed NATS frames), so a worker answering 2,000 messages a
second collected every few messages, and each collection promoted the live state of the requests in
flight into older generations whose collections walk every object they hold. py-spy with native
frames put `gc_collect_main` at a fifth of the session worker's busy time under add_message load.

Two changes, made once the worker is ready:

- what start-up built (imported modules, configuration, an index loaded from its snapshot) is frozen:
  it is alive for the process's life, and frozen objects are skipped by every later collection;
- the youngest generation is collected every GEN0 allocations: most of a request's objects are freed
  by reference counting before that, so a collection finds few live ones and promotes fewer.

Memory is still freed by reference counting as before; only garbage in reference cycles waits longer.
Alternating rounds of add_message against the same code without this (a `/tmp` script, worker CPU
per message, 6 rounds each): medians 402 -> 290 us; a youngest generation of 50,000 was no better.
"""

from __future__ import annotations

import gc

GEN0 = 10_000
OLDER = 20  # collections of the generation below between two of the next (CPython's default: 10)


def settle() -> int:
    """Freeze what exists now and space collections out; returns how many objects were frozen.
    Called again (a bench that starts deployments one after another in one process), what an
    earlier call froze is collected with the rest first, so its garbage does not stay for good."""
    gc.unfreeze()
    gc.collect()
    gc.freeze()
    gc.set_threshold(GEN0, OLDER, OLDER)
    return gc.get_freeze_count()
