"""runtime/host/heap.py: what start-up built leaves the collector's generations, and young
collections are spaced out."""

from __future__ import annotations

import gc

from skald.runtime.host import heap


def test_settle_freezes_what_exists_and_spaces_collections() -> None:
    before = gc.get_threshold()
    built_at_start = [["config"]]
    try:
        frozen = heap.settle()
        assert frozen == gc.get_freeze_count() > 0
        assert gc.get_threshold() == (heap.GEN0, heap.OLDER, heap.OLDER)
        made_after = [["request"]]
        tracked = gc.get_objects()  # the collector's generations: frozen objects are not in them
        assert not any(o is built_at_start for o in tracked)
        assert any(o is made_after for o in tracked)
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)
