"""A directory's document records read many at once (`store/document_records.py`): the same
records, in the order asked, as reading each one alone, on each tree."""

from __future__ import annotations

from pathlib import Path

import pytest

from skald.store import document_records as records
from skald.store.treeport import Tree
from tests.unit.test_tree_port import IMPLEMENTATIONS


@pytest.mark.parametrize("kind", sorted(IMPLEMENTATIONS))
def test_records_read_many_at_once_are_each_ones_record(kind: str, tmp_path: Path) -> None:
    t: Tree = IMPLEMENTATIONS[kind](tmp_path)
    files = [f"docs/{d}/f{i:04d}.md" for d in ("a", "b") for i in range(records.LOADED_AT_ONCE // 2 + 20)]
    for n, f in enumerate(files):
        t.write(f, b"# text")
        if n % 3 == 0:  # a record of its sections; the others have none
            records.save(t, f, records.DocRecord(sha=f"sha{n}", format="md", sections=[
                records.SectionRecord(anchor=f"s{n}", title="T", start=1, end=2, page=0, sha="x")]))
    t.write(records.record_key(files[1]), b"\xc1 torn")  # unreadable: rebuilt from the file, as if missing
    asked = [*reversed(files), "docs/none/gone.md"]
    got = records.load_many(t, asked)
    assert got == [records.load(t, f) for f in asked]
    assert sum(r is not None for r in got) == len(range(0, len(files), 3)) and got[-1] is None
    assert records.load_many(t, []) == []
