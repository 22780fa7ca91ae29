"""The Tree port's contract, stated by example and checked against every implementation: the local
directory and the in-memory tree (the JetStream one joins this list)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from skald.store.local_tree import LocalTree
from skald.store.memory_tree import MemoryTree
from skald.store.treeport import Tree, check_key, join

Make = Callable[[Path], Tree]
IMPLEMENTATIONS: dict[str, Make] = {"local": lambda tmp: LocalTree(tmp / "data"), "memory": lambda tmp: MemoryTree()}


@pytest.fixture(params=sorted(IMPLEMENTATIONS))
def t(request: pytest.FixtureRequest, tmp_path: Path) -> Tree:
    return IMPLEMENTATIONS[request.param](tmp_path)


def test_write_read_replace_and_stat(t: Tree) -> None:
    assert t.write("a/b/c.txt", b"one") is False  # nothing was there
    assert t.read("a/b/c.txt") == b"one"
    assert t.write("a/b/c.txt", b"two!", durable=False) is True  # replaced
    assert t.read("a/b/c.txt") == b"two!"
    st = t.stat("a/b/c.txt")
    assert st is not None and (st.name, st.is_dir, st.size) == ("c.txt", False, 4)
    d = t.stat("a/b")
    assert d is not None and d.is_dir and t.stat("a/none") is None
    with pytest.raises(FileNotFoundError):
        t.read("a/none")
    with pytest.raises(IsADirectoryError):
        t.read("a/b")
    with pytest.raises(IsADirectoryError):
        t.write("a/b", b"x")  # a directory is never replaced by a file
    with pytest.raises(NotADirectoryError):
        t.write("a/b/c.txt/d", b"x")  # nor is a file used as a directory


def test_create_is_won_once(t: Tree) -> None:
    assert t.create("m/.done", b"first") is True
    assert t.create("m/.done", b"second") is False
    assert t.read("m/.done") == b"first"


def test_create_raced_by_threads_has_one_winner(t: Tree) -> None:
    wins: list[int] = []
    barrier = threading.Barrier(8)

    def race(i: int) -> None:
        barrier.wait()
        if t.create("race/.marker", str(i).encode()):
            wins.append(i)

    threads = [threading.Thread(target=race, args=(i,)) for i in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert len(wins) == 1 and t.read("race/.marker") == str(wins[0]).encode()


def test_append_creates_then_extends(t: Tree) -> None:
    t.append("s/messages.jsonl", b"1\n")
    t.append("s/messages.jsonl", b"2\n")
    assert t.read("s/messages.jsonl") == b"1\n2\n"


def test_write_dir_is_all_or_nothing_and_never_over_an_existing_one(t: Tree) -> None:
    t.write_dir("h/archive_001", {"messages.jsonl": b"m\n", ".meta.json": b"{}"})
    assert [e.name for e in t.list("h/archive_001")] == [".meta.json", "messages.jsonl"]
    with pytest.raises(FileExistsError):
        t.write_dir("h/archive_001", {"messages.jsonl": b"other\n"})
    assert t.read("h/archive_001/messages.jsonl") == b"m\n"


def test_list_is_sorted_with_kinds_and_refuses_what_is_not_a_directory(t: Tree) -> None:
    t.write("d/b.txt", b"bb")
    t.write("d/a/x.txt", b"x")
    t.write("d/.hidden", b"")
    entries = t.list("d")
    assert [(e.name, e.is_dir) for e in entries] == [(".hidden", False), ("a", True), ("b.txt", False)]
    assert [e.size for e in entries if not e.is_dir] == [0, 2]
    with pytest.raises(FileNotFoundError):
        t.list("nowhere")
    with pytest.raises(NotADirectoryError):
        t.list("d/b.txt")
    names = t.list("d", details=False)  # names and kinds alone: the same entries, no sizes or times
    assert [(e.name, e.is_dir) for e in names] == [(e.name, e.is_dir) for e in entries]
    assert all(e.size == 0 and e.mtime == 0.0 for e in names)
    t.mkdir("d/empty")
    assert [e.name for e in t.list("d", details=False)] == [".hidden", "a", "b.txt", "empty"]
    with pytest.raises(FileNotFoundError):
        t.list("nowhere", details=False)
    with pytest.raises(NotADirectoryError):
        t.list("d/b.txt", details=False)


def test_remove_files_and_trees(t: Tree) -> None:
    t.write("r/f.txt", b"f")
    t.write("r/sub/g.txt", b"g")
    assert t.remove("r/f.txt") is True and t.remove("r/f.txt") is False
    with pytest.raises(IsADirectoryError):
        t.remove("r/sub")
    assert t.remove("r/sub", recursive=True) is True
    assert t.stat("r/sub") is None and t.stat("r/sub/g.txt") is None


def test_notes_are_files_found_by_listing(t: Tree) -> None:
    t.put_note("notes/g1/j1", b"one")
    t.put_note("notes/g1/j2", b"two")
    t.put_note("notes/g1/j1", b"one again")  # replaced, as a write would
    t.put_note("notes/g2/j3", b"three")
    assert [e.name for e in t.list("notes/g1")] == ["j1", "j2"]
    assert t.read("notes/g1/j1") == b"one again"
    assert t.remove("notes/g1", recursive=True) is True  # a group of them gone at once
    assert [e.name for e in t.list("notes")] == ["g2"]


def test_move_files_and_directories_never_over_something(t: Tree) -> None:
    t.write("src/one.txt", b"1")
    t.write("src/deep/two.txt", b"2")
    born = t.stat("src/deep/two.txt")
    time.sleep(0.02)
    t.move("src/one.txt", "dst/uno.txt")
    assert t.read("dst/uno.txt") == b"1" and t.stat("src/one.txt") is None
    t.move("src", "moved")
    assert t.read("moved/deep/two.txt") == b"2" and t.stat("src") is None
    moved = t.stat("moved/deep/two.txt")
    assert born is not None and moved is not None and moved.mtime == pytest.approx(born.mtime, abs=1e-3)  # kept
    t.write("taken.txt", b"t")
    with pytest.raises(FileExistsError):
        t.move("dst/uno.txt", "taken.txt")
    with pytest.raises(FileNotFoundError):
        t.move("no/such", "elsewhere")


@pytest.mark.parametrize("bad", ["", "/abs", "a/../b", "a//b", "./a", "a\x00b"])
def test_keys_are_relative_and_normalised(bad: str) -> None:
    with pytest.raises(ValueError):
        check_key(bad)
    assert join("a/", "", "/b", "c") == "a/b/c"


def test_a_file_larger_than_one_bus_message_round_trips(t: Tree) -> None:
    """9 MiB: past the 8 MiB a message of the embedded nats-server may carry."""
    big = bytes(range(256)) * (9 * 4096)
    t.write("big/blob.bin", big)
    assert t.read("big/blob.bin") == big
    st = t.stat("big/blob.bin")
    assert st is not None and st.size == len(big)
    t.append("big/blob.bin", b"tail")
    assert t.read("big/blob.bin")[-4:] == b"tail"


def test_many_files_read_at_once_in_the_order_asked(t: Tree) -> None:
    """A file past one bus message among them; None for a directory and for nothing there."""
    big = bytes(range(256)) * (9 * 4096)
    t.write("many/big.bin", big)
    for i in range(300):
        t.write(f"many/f{i:03d}.md", f"note {i}".encode())
    t.write("other/x.md", b"x")  # another directory, read in the same call
    keys = ["many/f299.md", "many", "many/big.bin", "many/none.md", "other/x.md", "gone/y.md",
            *(f"many/f{i:03d}.md" for i in range(300))]
    got = t.read_many(keys)
    assert got[:6] == [b"note 299", None, big, None, b"x", None]
    assert got[6:] == [f"note {i}".encode() for i in range(300)]
    assert t.read_many([]) == []
    t.write("big/blob.bin", b"small again")
    assert t.read("big/blob.bin") == b"small again"
    assert t.remove("big/blob.bin") and t.stat("big/blob.bin") is None


def test_many_keys_stat_at_once_as_each_alone(t: Tree) -> None:
    """Files, directories, nothing, and a key under a file, across two directories."""
    t.write("s/a.md", b"abc")
    t.write("s/deep/b.md", b"bb")
    t.write("u/c.md", b"c")
    keys = ["s/a.md", "s", "s/deep", "s/none.md", "u/c.md", "s/a.md/under", "gone", "s/deep/b.md"]
    got = t.stat_many(keys)
    assert got == [t.stat(k) for k in keys]
    assert [(e.name, e.is_dir, e.size) if e else None for e in got] == [
        ("a.md", False, 3), ("s", True, 0), ("deep", True, 0), None, ("c.md", False, 1), None, None,
        ("b.md", False, 2)]
    assert t.stat_many([]) == []


def test_mkdir_makes_an_empty_directory_once_and_never_over_a_file(t: Tree) -> None:
    t.mkdir("m/empty/deep")
    t.mkdir("m/empty/deep")  # again: nothing
    assert [(e.name, e.is_dir) for e in t.list("m/empty")] == [("deep", True)]
    assert t.list("m/empty/deep") == []
    st = t.stat("m/empty/deep")
    assert st is not None and st.is_dir
    t.write("m/file.txt", b"f")
    with pytest.raises(FileExistsError):
        t.mkdir("m/file.txt")
    with pytest.raises((NotADirectoryError, FileExistsError)):
        t.mkdir("m/file.txt/below")
    t.write("m/empty/deep/now.txt", b"n")
    assert [e.name for e in t.list("m/empty/deep")] == ["now.txt"]
    with pytest.raises(IsADirectoryError):
        t.remove("m/empty")
    assert t.remove("m/empty", recursive=True) and t.stat("m/empty") is None
