"""A directory of many entries: its summary reads only what an overview can show and says the same
as one built from every entry's abstract; jobs leave its refresh to one per interval (WideDirs)."""

from __future__ import annotations

from pathlib import Path

import pytest

from skald.actors.indexer.dir_rows import ABSTRACTS_AT_ONCE, SHOWN_CHILDREN, _list_children, _visible, shown_children
from skald.actors.indexer.wide import COST_RATIO, REFRESH_S, WIDE_ENTRIES, WideDirs
from skald.actors.text import extract
from skald.store import sidecar, tree, treeops
from skald.store.local_tree import LocalTree
from skald.store.treeport import Entry


class CountingTree(LocalTree):
    """A local tree that counts its reads: one read of many files is one exchange on a bus store."""

    reads = 0

    def read(self, key: str) -> bytes:
        self.reads += 1
        return super().read(key)

    def read_many(self, keys: list[str]) -> list[bytes | None]:
        self.reads += 1
        return super().read_many(keys)


def children(t: LocalTree, key: str) -> tuple[list[tuple[str, bool, str]], list[tuple[int, str, Entry]]]:
    listing = _visible(t, key)
    assert listing is not None
    return _list_children(t, key, listing, sidecar.load(t, key))


def wide(root: Path, dirs: int, files: int) -> Path:
    d = root / "wide"
    d.mkdir()
    for i in range(dirs):
        (d / f"d{i:05d}").mkdir()
        (d / f"d{i:05d}" / tree.ABSTRACT).write_text(f"runbook {i} for host {i % 7}: restarts and ports")
    facts = {}
    for i in range(files):
        p = d / f"f{i:05d}.md"
        p.write_text(f"# note {i}\n")
        st = p.stat()
        facts[p.name] = sidecar.FileFacts(mtime_ns=round(st.st_mtime * 1e9), size=st.st_size, sha="x",
                                          abstract=f"note {i} about the backup window", summarizer="extractive")
    sidecar.save(LocalTree(root), "wide", facts)
    return d


def every_abstract(d: Path) -> list[tuple[str, bool, str]]:
    facts = sidecar.load(LocalTree(d.parent), d.name)
    out = []
    for e in treeops.listdir(LocalTree(d.parent), d.name):
        if e.is_dir:
            out.append((e.name, True, (d / e.name / tree.ABSTRACT).read_text()))
        else:
            out.append((e.name, False, facts[e.name].abstract))
    return out


def test_a_wide_directory_reads_only_the_entries_its_overview_shows(tmp_path: Path) -> None:
    d = wide(tmp_path, 1500, 500)
    t = CountingTree(d.parent)
    entries, stale = children(t, d.name)
    full = every_abstract(d)
    assert [(n, isdir) for n, isdir, _ in entries] == [(n, isdir) for n, isdir, _ in full]  # every entry listed
    read = sum(1 for *_, a in entries if a)
    assert SHOWN_CHILDREN <= read < 400 and not stale
    assert t.reads == -(-read // ABSTRACTS_AT_ONCE) + 1  # the subdirectories' abstracts a window at a time
    assert extract.dir_overview("wide", entries, None) == extract.dir_overview("wide", full, None)
    assert entries[:SHOWN_CHILDREN] == full[:SHOWN_CHILDREN]  # what an LLM overview is given


def test_a_small_directory_reads_every_entry_and_reports_stale_files(tmp_path: Path) -> None:
    d = wide(tmp_path, 3, 2)
    (d / "f00001.md").write_text("# changed since its abstract was written\n")
    (d / "new.md").write_text("# new\n")
    entries, stale = children(LocalTree(d.parent), d.name)
    # three directories and the one file whose facts still hold; the two others are to be summarised
    assert [n for n, _, a in entries if a] == ["d00000", "d00001", "d00002", "f00000.md"]
    assert sorted(name for _, name, _ in stale) == ["f00001.md", "new.md"]
    assert all(entries[i][0] == name for i, name, _ in stale)


def test_shown_children_stops_once_both_bounds_are_reached() -> None:
    assert shown_children([10] * 50) == 50
    assert shown_children([10] * 1000) == extract.OVERVIEW_MAX // 10
    assert shown_children([100] * 1000) == SHOWN_CHILDREN


def test_narrow_directories_are_never_deferred() -> None:
    w = WideDirs()
    w.record("viking://resources/a", WIDE_ENTRIES - 1, now=0.0)
    assert not w.defer("viking://resources/a", now=0.1)
    assert not w.defer("viking://resources/unknown", now=0.1)


def test_a_wide_directory_waits_for_its_interval_then_is_due_once() -> None:
    w = WideDirs()
    uri = "viking://resources/pile"
    w.record(uri, WIDE_ENTRIES, now=10.0)
    assert w.defer(uri, now=11.0) and w.defer(uri, now=12.0)
    ready, wait = w.due(now=12.0)
    assert ready == [] and wait == REFRESH_S - 2.0
    ready, wait = w.due(now=10.0 + REFRESH_S)
    assert ready == [uri] and wait is None
    assert w.due(now=100.0) == ([], None)  # once
    assert not w.defer(uri, now=10.0 + REFRESH_S)  # the interval is over: the job refreshes it itself
    assert w.deferred == 2


def test_a_directory_that_shrank_is_narrow_again() -> None:
    w = WideDirs()
    uri = "viking://resources/pile"
    w.record(uri, WIDE_ENTRIES * 2, now=0.0)
    w.record(uri, 5, now=1.0)
    assert not w.defer(uri, now=1.5) and uri not in w.entries


def test_a_directory_slow_to_list_waits_longer_between_refreshes() -> None:
    """Listing it may take 1/COST_RATIO of the time at most, however wide it grows."""
    w = WideDirs()
    uri = "viking://resources/pile"
    w.record(uri, WIDE_ENTRIES * 100, now=0.0, took=1.0)
    assert w.defer(uri, now=REFRESH_S + 0.1)
    ready, wait = w.due(now=REFRESH_S + 0.1)
    assert ready == [] and wait == pytest.approx(COST_RATIO - REFRESH_S - 0.1)
    assert w.due(now=COST_RATIO) == ([uri], None)


def test_an_overview_that_cannot_list_every_entry_says_how_many_there_are() -> None:
    """The L1 of a wide directory lists whole lines, as many as fit, under a heading with the
    count; its L0 counts every entry (it counted only the lines that fit)."""
    kids = [(f"f{i:04d}.md", False, f"the deploy and rollback of service {i}") for i in range(500)]
    over = extract.dir_overview("fleet", kids, None)
    listed = [ln for ln in over.splitlines() if ln.startswith("- ")]
    assert len(over) <= extract.OVERVIEW_MAX and 20 < len(listed) < 500
    assert f"## Contents (500 entries, the first {len(listed)} listed)" in over
    assert listed[-1] == f"- f{len(listed) - 1:04d}.md: the deploy and rollback of service {len(listed) - 1}"
    assert extract.dir_abstract("fleet", over).startswith("fleet: 500 entries (f0000.md, f0001.md")
    small = extract.dir_overview("few", kids[:3], None)
    assert "## Contents\n- f0000.md" in small and extract.dir_abstract("few", small).startswith("few: 3 entries")


def test_a_file_or_a_missing_directory_has_no_children(tmp_path: Path) -> None:
    t = LocalTree(tmp_path)
    t.write("a/file.md", b"# a file")
    assert _visible(t, "a/file.md") is None and _visible(t, "a/gone") is None
    assert [e.name for e in _visible(t, "a") or []] == ["file.md"]
