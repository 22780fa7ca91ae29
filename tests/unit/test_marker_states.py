"""An archive's state from its markers (`store/sessions.py`): every state read right when many
archives' markers are read at once, on each tree."""

from __future__ import annotations

from pathlib import Path
from typing import cast

import msgspec
import pytest

from skald.store import sessions
from skald.store.session_meta import DoneMarker, FailedMarker, QuarantineMarker
from skald.store.treeport import Tree
from skald.store.uri import VikingPath
from tests.unit.test_tree_port import IMPLEMENTATIONS


@pytest.mark.parametrize("kind", sorted(IMPLEMENTATIONS))
def test_each_archive_state_from_markers_read_at_once(kind: str, tmp_path: Path) -> None:
    t: Tree = IMPLEMENTATIONS[kind](tmp_path)
    s = sessions.SessionDir(vp=cast(VikingPath, None), tree=t, key="sess")

    def archive(i: int, **files: bytes) -> None:
        t.write_dir(s.akey(sessions.archive_name(i)), {"messages.jsonl": b"", **files})

    done = msgspec.json.encode(DoneMarker())
    archive(1, **{sessions.DONE: done, sessions.OVERVIEW: b"# Overview\n\nWhat was said."})
    archive(2, **{sessions.DONE: done, sessions.OVERVIEW: b"  \n"})  # an empty overview
    archive(3, **{sessions.DONE: b"{not json", sessions.OVERVIEW: b"# O"})  # a torn marker
    archive(4, **{sessions.DONE: b"", sessions.OVERVIEW: b"# O"})  # an old empty marker
    archive(5, **{sessions.QUARANTINED: msgspec.json.encode(QuarantineMarker()),
                  sessions.FAILED: msgspec.json.encode(FailedMarker())})
    archive(6, **{sessions.FAILED: msgspec.json.encode(FailedMarker())})
    archive(7)
    archive(8, **{sessions.OVERVIEW: b"# written before its .done"})
    want = ["completed", "invalid", "invalid", "completed", "quarantined", "failed", "pending", "pending", "missing"]
    indexes = list(range(1, 10))
    assert sessions.marker_states(s, indexes) == want
    assert [sessions.marker_state(s, i) for i in indexes] == want
    assert sessions.archive_indexes(s) == list(range(1, 9))
    assert sessions.marker_states(s, []) == []
