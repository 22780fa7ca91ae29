"""What `store/treeops.py` answers: a file read with others beside it (`read_bytes_and`: the same
bytes and typed errors as `read_bytes` alone, the others' bytes in order, on each tree), and a
store that does not answer kept apart from every answer about the files."""

from __future__ import annotations

from pathlib import Path

import pytest

from skald.messages.errors import Conflict, InvalidArgument, NotFound
from skald.store import treeops
from skald.store.treeport import StoreUnavailable, Tree
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


class _Stalling:
    """A tree whose moves the store does not answer: the rest is the memory tree's."""

    def __init__(self, t: Tree) -> None:
        self._t = t

    def __getattr__(self, name: str) -> object:
        return getattr(self._t, name)

    def move(self, src: str, dst: str) -> None:
        raise StoreUnavailable("not answering")


def test_a_move_the_store_does_not_answer_is_not_a_destination_that_exists(tmp_path: Path) -> None:
    """A move the store did not answer is the store's StoreUnavailable (the request answers
    UNAVAILABLE and may be asked again), never CONFLICT "destination exists" (a `ConnectionError`
    is an `OSError`, which the move took for a directory that appeared meanwhile)."""
    t = IMPLEMENTATIONS["memory"](tmp_path)
    t.write("d/a.md", b"alpha")
    with pytest.raises(StoreUnavailable):
        treeops.move(_Stalling(t), "d/a.md", "d/b.md")  # type: ignore[arg-type]
    treeops.move(t, "d/a.md", "d/b.md")
    with pytest.raises(Conflict):
        t.write("d/c.md", b"c")
        treeops.move(t, "d/c.md", "d/b.md")
