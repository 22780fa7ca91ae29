"""A file read with others beside it (`treeops.read_bytes_and`): the same bytes and the same typed
errors as `read_bytes` alone, the others' bytes in order, on each tree."""

from __future__ import annotations

from pathlib import Path

import pytest

from skald.messages.errors import InvalidArgument, NotFound
from skald.store import treeops
from skald.store.treeport import Tree
from tests.unit.test_tree_port import IMPLEMENTATIONS


@pytest.mark.parametrize("kind", sorted(IMPLEMENTATIONS))
def test_a_file_read_with_others_as_read_alone(kind: str, tmp_path: Path) -> None:
    t: Tree = IMPLEMENTATIONS[kind](tmp_path)
    t.write("d/a.md", b"alpha")
    t.write("d/.docs/a.md.msgpack", b"rec")
    data, others = treeops.read_bytes_and(t, "d/a.md", ["d/.docs/a.md.msgpack", "d/none", "d"])
    assert data == treeops.read_bytes(t, "d/a.md") == b"alpha" and others == [b"rec", None, None]
    with pytest.raises(NotFound):
        treeops.read_bytes_and(t, "d/gone.md", ["d/a.md"])
    with pytest.raises(InvalidArgument, match="is a directory"):
        treeops.read_bytes_and(t, "d", [])
    with pytest.raises(InvalidArgument, match="too large"):
        treeops.read_bytes_and(t, "d/a.md", [], limit=4)
