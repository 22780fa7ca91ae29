"""Nobody reads what is not theirs; no URI escapes the tree."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from skald.messages import errors
from support.memory_deploy import MemoryDeployment


async def test_one_user_cannot_find_or_read_anothers_memories(client: MemoryDeployment) -> None:
    alice = client.as_identity(user="alice")
    bob = client.as_identity(user="bob")
    r = await alice.call("memories.write", {"category": "preferences", "content": "Alice's PIN hint is heron"})
    bob.index_seq = alice.index_seq
    found = await bob.call("search.find", {"query": "PIN hint heron"})
    assert all(not h["uri"].startswith("viking://user/alice") for h in found["memories"] + found["resources"])
    with pytest.raises(errors.PermissionDenied):
        await bob.call("fs.read", {"uri": r["root_uri"]})
    with pytest.raises(errors.PermissionDenied):
        await bob.call("search.find", {"query": "PIN", "target_uri": "viking://user/alice"})
    with pytest.raises(errors.PermissionDenied):
        await bob.call("search.grep", {"uri": "viking://user/alice", "pattern": "PIN"})
    with pytest.raises(errors.PermissionDenied):
        await bob.call("fs.write", {"uri": "viking://user/alice/memories/events/x.md", "content": "forged"})
    g = await bob.call("search.grep", {"uri": "viking://", "pattern": "heron"})
    assert g["count"] == 0
    ls = await bob.call("fs.ls", {"uri": "viking://user"})
    assert all("alice" not in e["uri"] for e in ls["entries"])
    mine = await alice.call("search.find", {"query": "PIN hint heron", "context_type": "memory", "level": 2})
    assert mine["memories"][0]["uri"] == r["root_uri"]
    home = await alice.call("fs.read", {"uri": "viking://~/memories/preferences/" + r["root_uri"].rsplit("/", 1)[1]})
    assert "heron" in home["content"]


async def test_accounts_are_isolated(client: MemoryDeployment) -> None:
    a = client.as_identity(account="acme")
    b = client.as_identity(account="globex")
    await a.call("fs.write", {"uri": "viking://resources/plan.md", "content": "acme merger plan codename osprey"})
    b.index_seq = a.index_seq
    found = await b.call("search.find", {"query": "merger plan osprey"})
    assert found["total"] == 0
    with pytest.raises(errors.NotFound):
        await b.call("fs.read", {"uri": "viking://resources/plan.md"})


async def test_peer_narrowing(client: MemoryDeployment) -> None:
    p1 = client.as_identity(user="carol", peer="p1")
    await p1.call("memories.write", {"category": "events", "content": "p1 met the client"})
    with pytest.raises(errors.PermissionDenied):
        await p1.call("fs.ls", {"uri": "viking://~/peers/p2"})
    with pytest.raises(errors.InvalidArgument):
        await p1.call("search.find", {"query": "x", "target_uri": "viking://~/peers/p1/skills"})
    r = await p1.call("search.find", {"query": "met the client", "context_type": "memory", "level": 2})
    assert r["memories"][0]["uri"].startswith("viking://user/carol/peers/p1/memories/events/")


async def test_traversal_writes_nothing_outside(client: MemoryDeployment, tmp_path: Path) -> None:
    data = client.data_dir
    before = set(tmp_path.rglob("*"))
    for bad in ("viking://resources/../../escape.md", "viking://resources/%2e%2e/%2e%2e/escape.md",
                "viking://resources/..%2f..%2fescape.md", "viking://resources/%252e%252e/escape.md",
                "viking:///tmp/escape.md", "viking://resources/a/./b.md", "viking://~/../alice/x.md"):
        with pytest.raises((errors.InvalidArgument, errors.PermissionDenied)):
            await client.call("fs.write", {"uri": bad, "content": "escaped"})
    after = set(tmp_path.rglob("*"))
    assert not {p for p in after - before if not str(p).startswith(str(data))}
    assert not any(p.name == "escape.md" for p in after)


async def test_planted_symlinks_are_not_followed(client: MemoryDeployment, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("top secret")
    res = client.data_dir / "accounts" / "default" / "resources"
    res.mkdir(parents=True, exist_ok=True)
    os.symlink(outside, res / "link")
    os.symlink(outside / "secret.txt", res / "file-link.txt")
    for op, body in (("fs.read", {"uri": "viking://resources/link/secret.txt"}),
                     ("fs.read", {"uri": "viking://resources/file-link.txt"}),
                     ("fs.ls", {"uri": "viking://resources/link"}),
                     ("fs.write", {"uri": "viking://resources/link/new.txt", "content": "x"})):
        with pytest.raises(errors.PermissionDenied):
            await client.call(op, body)
    g = await client.call("search.grep", {"uri": "viking://resources", "pattern": "secret"})
    assert g["count"] == 0
    assert not (outside / "new.txt").exists()
