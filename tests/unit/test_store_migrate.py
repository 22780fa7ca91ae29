"""`skald store migrate`'s copy: every file verified, archives whole, resumable after a failure at
any point, and a second run copies nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from skald.runtime.host.migrate import migrate
from skald.store.local_tree import LocalTree
from skald.store.memory_tree import MemoryTree

SESSION = "accounts/acme/user/u/sessions/s1"


def seeded(root: Path) -> LocalTree:
    t = LocalTree(root)
    t.write("accounts/acme/resources/docs/a.md", b"# A\n")
    t.write("accounts/acme/resources/docs/.index.json", b"{}")
    t.write("accounts/acme/resources/docs/.docs/a.md.msgpack", b"\x81")
    t.write("accounts/acme/resources/big.bin", bytes(range(256)) * 8000)
    t.mkdir("accounts/acme/resources/empty")
    t.write(f"{SESSION}/messages.jsonl", b'{"id":"m3"}\n')
    t.write_dir(f"{SESSION}/history/archive_001", {"messages.jsonl": b'{"id":"m1"}\n', ".meta.json": b"{}"})
    t.create(f"{SESSION}/history/archive_001/.done", b"{}")
    t.write("uploads/acme/u1/.owner", b"u")
    t.write("tmp-cache/ignored.bin", b"not part of the tree")
    return t


def files(t: LocalTree | MemoryTree) -> dict[str, bytes]:
    out: dict[str, bytes] = {}
    for root in ("accounts", "uploads"):
        stack = [root]
        while stack:
            k = stack.pop()
            for e in t.list(k):
                if e.is_dir:
                    stack.append(f"{k}/{e.name}")
                else:
                    out[f"{k}/{e.name}"] = t.read(f"{k}/{e.name}")
    return out


def test_a_tree_round_trips_verified_with_archives_whole(tmp_path: Path) -> None:
    src = seeded(tmp_path / "src")
    mem = MemoryTree()
    rep = migrate(src, mem)
    assert rep.copied == 9 and rep.skipped == 0 and rep.archives == 1 and not rep.mismatched
    assert files(mem) == files(src) and mem.stat("tmp-cache") is None  # caches stay behind
    assert mem.stat("accounts/acme/resources/empty") is not None  # an empty directory too
    back = LocalTree(tmp_path / "back")
    assert migrate(mem, back).copied == 9
    assert files(back) == files(src)
    again = migrate(src, mem)  # nothing left to do
    assert again.copied == 0 and again.skipped == 9


class Failing(MemoryTree):
    """A destination that fails after `left` writes, as a killed copy or a lost connection does."""

    def __init__(self, left: int) -> None:
        super().__init__()
        self.left = left

    def _spend(self) -> None:
        self.left -= 1
        if self.left < 0:
            raise ConnectionError("the bus went away")

    def write(self, key: str, data: bytes, *, durable: bool = True) -> None:
        self._spend()
        super().write(key, data, durable=durable)

    def write_dir(self, key: str, files: dict[str, bytes]) -> None:
        self._spend()
        super().write_dir(key, files)


@pytest.mark.parametrize("fail_after", [0, 2, 4, 6])
def test_a_copy_stopped_anywhere_is_finished_by_running_it_again(tmp_path: Path, fail_after: int) -> None:
    src = seeded(tmp_path / "src")
    dst = Failing(fail_after)
    with pytest.raises(ConnectionError):
        migrate(src, dst)
    dst.left = 10**6
    rep = migrate(src, dst)
    assert files(dst) == files(src) and not rep.mismatched
    assert rep.copied + rep.skipped == 9 and (rep.skipped > 0) == (fail_after > 0)  # done before: not redone


class Corrupting(MemoryTree):
    def write(self, key: str, data: bytes, *, durable: bool = True) -> None:
        super().write(key, data[:-1] if key.endswith("a.md") else data, durable=durable)


def test_a_file_that_does_not_read_back_the_same_is_reported(tmp_path: Path) -> None:
    rep = migrate(seeded(tmp_path / "src"), Corrupting())
    assert rep.mismatched == ["accounts/acme/resources/docs/a.md"]
