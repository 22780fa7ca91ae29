"""Isolation on every subject: for every URI-bearing field of every request, another user's,
another peer's and escaping URIs (aliases, encoded traversal, planted symlinks, over-long paths)
are refused, and nothing is written outside the caller's space. Another account's data is
simply absent (accounts are separate trees)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import msgspec

from skald.messages.errors import NotFound
from skald.runtime.client.api import SkaldClient
from support.figures import FIGURES

# (op, URI field, a body that is valid around it)
TABLE: list[tuple[str, str, dict[str, Any]]] = [
    ("fs.read", "uri", {}), ("fs.ls", "uri", {}), ("fs.tree", "uri", {}), ("fs.stat", "uri", {}),
    ("fs.abstract", "uri", {}), ("fs.overview", "uri", {}),
    ("fs.write", "uri", {"content": "forged"}), ("fs.mkdir", "uri", {}), ("fs.rm", "uri", {"recursive": True}),
    ("fs.mv", "from_uri", {"to_uri": "viking://~/resources/moved"}),
    ("fs.mv", "to_uri", {"from_uri": "viking://~/resources/mine.md"}),
    ("resources.add", "target_uri", {"content": "forged", "name": "f.md"}),
    ("search.find", "target_uri", {"query": "secret"}),
    ("search.search", "target_uri", {"query": "secret"}),
    ("search.grep", "uri", {"pattern": "secret"}),
    ("search.grep", "exclude_uri", {"uri": "viking://~/resources", "pattern": "x"}),
    ("search.glob", "uri", {"pattern": "**"}),
]
ATTACKS = [
    "viking://user/mallory", "viking://user/mallory/memories/preferences/secret.md",
    "viking://user/mallory/resources/x.md", "viking://user/alice/peers/bob/memories",
    "viking://user/alice/peers/bob/memories/events/e.md",
    "viking://~/../mallory/memories", "viking://~/%2e%2e/mallory", "viking://user/alice/%2e%2e/mallory",
    "viking://resources/%252e%252e/%252e%252e/etc", "viking://resources/../../../etc/passwd",
    "viking://resources/..%2f..%2fetc", "viking:///etc/passwd", "viking://resources/a\\..\\b",
    "viking://resources/planted", "viking://resources/planted/secret.md", "viking://~/resources/planted_home",
    "viking://resources/" + "a" * 256, "viking://resources/" + "/".join(["d" * 200] * 25),
    "viking://user/memories", "viking://user/alice\x00/x", "file:///etc/passwd",
]
REFUSED = {"INVALID_ARGUMENT", "PERMISSION_DENIED"}


def digest(root: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        h.update(str(p).encode())
        if p.is_file() and not p.is_symlink():
            h.update(p.read_bytes())
    return h.hexdigest()


async def test_every_uri_field_refuses_every_escape(client: SkaldClient, skald: Any, tmp_path: Path) -> None:
    mallory = client.as_identity(user="mallory")
    await mallory.call("memories.write", {"category": "preferences", "content": "mallory secret", "name": "secret.md"})
    bob = client.as_identity(user="alice", peer="bob")
    await bob.call("memories.write", {"category": "events", "content": "bob secret", "name": "e.md"})
    alice = client.as_identity(user="alice", peer="carol")
    await alice.call("fs.write", {"uri": "viking://~/resources/mine.md", "content": "mine"})
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.md").write_text("outside secret")
    data = Path(skald.cfg.data_dir) / "accounts" / "default"
    (data / "resources").mkdir(parents=True, exist_ok=True)
    os.symlink(outside, data / "resources" / "planted")
    os.symlink(data / "user" / "mallory", data / "user" / "alice" / "resources" / "planted_home")
    guarded = {"outside": outside, "mallory": data / "user" / "mallory", "bob": data / "user" / "alice" / "peers"}
    before = {k: digest(p) for k, p in guarded.items()}
    tried, refused = 0, 0
    for op, field, body in TABLE:
        for uri in ATTACKS:
            resp, _ = await alice.raw(op, msgspec.json.encode({**body, field: uri}))
            tried += 1
            code = resp.error["code"] if resp.error else "OK"
            if field == "exclude_uri" and code == "OK":
                # excluding something you cannot see reveals nothing: the grep still runs on your own tree
                assert all("mallory" not in m["uri"] and "/peers/bob" not in m["uri"]
                           for m in resp.result["matches"])
                continue
            assert code in REFUSED, (op, field, uri, code, resp.result)
            refused += 1
    assert {k: digest(p) for k, p in guarded.items()} == before
    assert not any(p.name == "forged" or "moved" in p.name for p in data.rglob("*") if "alice" not in str(p))
    FIGURES["refused"] += refused
    print(f"\n{refused} cross-tenant / escape attempts refused of {tried} tried "
          f"({len(TABLE)} fields x {len(ATTACKS)} URIs)")


async def test_another_account_sees_nothing_on_any_read(client: SkaldClient) -> None:
    acme = client.as_identity(account="acme", user="u")
    globex = client.as_identity(account="globex", user="u")
    await acme.call("fs.write", {"uri": "viking://resources/plan.md", "content": "osprey merger"})
    await acme.call("memories.write", {"category": "events", "content": "osprey meeting"})
    globex.index_seq = acme.index_seq
    for op, body in [("search.find", {"query": "osprey"}), ("search.search", {"query": "osprey"}),
                     ("search.grep", {"uri": "viking://", "pattern": "osprey"}),
                     ("search.glob", {"pattern": "**/*.md"}),
                     ("search.search", {"query": "osprey", "mode": "context", "score_threshold": -1.0})]:
        try:
            r = await globex.call(op, body)
        except NotFound:
            continue  # globex has no tree at all yet
        text = msgspec.json.encode(r).decode()  # the query itself may be echoed in a query plan
        assert "merger" not in text and "meeting" not in text and "plan.md" not in text, op
