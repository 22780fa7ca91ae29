"""The tree over NATS: every fs operation, kept in sync with the index."""

from __future__ import annotations

import pytest

from skald.messages import errors
from support.memory_deploy import MemoryDeployment


async def uris(client: MemoryDeployment, query: str, **kw: object) -> list[str]:
    r = await client.call("search.find", {"query": query, **kw})
    return [m["uri"] for m in r["memories"] + r["resources"] + r["skills"]]


async def test_write_then_read_stat_ls_tree(client: MemoryDeployment) -> None:
    """What fs.write accepts, fs.read/stat/ls/tree show at once."""
    w = await client.call("fs.write", {"uri": "viking://resources/proj/guide.md",
                                       "content": "# Guide\n\nInstall with pip. Run the server."})
    assert w["uri"] == "viking://resources/proj/guide.md" and w["created"] and w["indexed"]
    r = await client.call("fs.read", {"uri": "viking://resources/proj/guide.md"})
    assert r["content"].startswith("# Guide")
    part = await client.call("fs.read", {"uri": "viking://resources/proj/guide.md", "offset": 2, "limit": 1})
    assert part["content"] == "Install with pip. Run the server." and not part["truncated"]
    assert part["start_line"] == 3 and part["lines"] == 3
    head = await client.call("fs.read", {"uri": "viking://resources/proj/guide.md", "offset": 0, "limit": 1})
    assert head["content"] == "# Guide\n" and head["truncated"]
    st = await client.call("fs.stat", {"uri": "viking://resources/proj/guide.md"})
    assert not st["is_dir"] and st["size"] == len(r["content"].encode())
    ls = await client.call("fs.ls", {"uri": "viking://resources/proj"})
    assert [e["name"] for e in ls["entries"]] == ["guide.md"]
    assert ls["entries"][0]["abstract"].startswith("Guide.")
    hidden = await client.call("fs.ls", {"uri": "viking://resources/proj", "show_hidden": True})
    assert {".abstract.md", ".overview.md"} <= {e["name"] for e in hidden["entries"]}
    tree = await client.call("fs.tree", {"uri": "viking://resources"})
    assert tree["tree"]["children"][0]["name"] == "proj"
    assert tree["tree"]["children"][0]["children"][0]["uri"] == "viking://resources/proj/guide.md"


async def test_ls_gives_each_subdirectory_its_abstract_and_stops_at_the_node_limit(client: MemoryDeployment) -> None:
    """A listing's subdirectories carry their `.abstract.md` (read together), its files their
    sidecar abstract; recursive listings go down breadth first and stop at `node_limit`; a tree
    shows each node's kind as its parent's listing gave it."""
    for d in ("alpha", "beta", "gamma"):
        await client.call("fs.write", {"uri": f"viking://resources/lib/{d}/notes.md",
                                       "content": f"# {d.title()} notes\n\nHow the {d} service restarts."})
    await client.call("fs.write", {"uri": "viking://resources/lib/readme.md", "content": "# Lib\n\nThe library."})
    ls = (await client.call("fs.ls", {"uri": "viking://resources/lib"}))["entries"]
    assert [(e["name"], e["is_dir"]) for e in ls] == [("alpha", True), ("beta", True), ("gamma", True),
                                                      ("readme.md", False)]
    for e in ls[:3]:
        assert e["abstract"] == (await client.call("fs.abstract", {"uri": e["uri"]}))["content"]
        assert e["abstract"].startswith(f"{e['name']}: ")
    assert ls[3]["abstract"].startswith("Lib.")
    deep = await client.call("fs.ls", {"uri": "viking://resources/lib", "recursive": True})
    assert [e["uri"].removeprefix("viking://resources/lib/") for e in deep["entries"]] == [
        "alpha", "beta", "gamma", "readme.md", "alpha/notes.md", "beta/notes.md", "gamma/notes.md"]
    assert not deep["truncated"] and deep["entries"][4]["abstract"].startswith("Alpha notes.")
    cut = await client.call("fs.ls", {"uri": "viking://resources/lib", "recursive": True, "node_limit": 5})
    assert [e["name"] for e in cut["entries"]] == ["alpha", "beta", "gamma", "readme.md", "notes.md"]
    assert cut["truncated"]
    tree = (await client.call("fs.tree", {"uri": "viking://resources/lib"}))["tree"]
    assert [(k["name"], k["is_dir"], [(g["name"], g["is_dir"]) for g in k.get("children") or []])
            for k in tree["children"]] == [(d, True, [("notes.md", False)]) for d in ("alpha", "beta", "gamma")] + [
                ("readme.md", False, [])]


async def test_write_modes(client: MemoryDeployment) -> None:
    """create refuses an existing file; append appends; replace replaces."""
    u = "viking://resources/notes/a.md"
    await client.call("fs.write", {"uri": u, "content": "one", "mode": "create"})
    with pytest.raises(errors.Conflict):
        await client.call("fs.write", {"uri": u, "content": "two", "mode": "create"})
    await client.call("fs.write", {"uri": u, "content": " two", "mode": "append"})
    assert (await client.call("fs.read", {"uri": u}))["content"] == "one two"
    await client.call("fs.write", {"uri": u, "content": "three"})
    assert (await client.call("fs.read", {"uri": u}))["content"] == "three"


async def test_directory_summaries_generated_bottom_up(client: MemoryDeployment) -> None:
    """Each directory gets .abstract.md (L0) and .overview.md (L1), parents from children."""
    await client.call("fs.write", {"uri": "viking://resources/kb/net/dns.md",
                                   "content": "# DNS\n\nName resolution turns host names into addresses."})
    net = await client.call("fs.overview", {"uri": "viking://resources/kb/net"})
    assert "dns.md" in net["content"] and "Name resolution" in net["content"]
    kb = await client.call("fs.overview", {"uri": "viking://resources/kb"})
    assert "net/" in kb["content"]
    ab = await client.call("fs.abstract", {"uri": "viking://resources/kb/net"})
    assert ab["content"].startswith("net")
    r = await client.call("search.find", {"query": "name resolution host names", "level": [0, 1]})
    got = [m["uri"] for m in r["resources"]]
    assert "viking://resources/kb/net/.abstract.md" in got or "viking://resources/kb/net/.overview.md" in got


async def test_rm_and_mv_keep_index_in_sync(client: MemoryDeployment) -> None:
    """A removed file is no longer found; a moved file is found at its new URI only."""
    await client.call("fs.write", {"uri": "viking://resources/a/x.md", "content": "zebra migration patterns"})
    await client.call("fs.write", {"uri": "viking://resources/a/y.md", "content": "penguin colonies in winter"})
    assert "viking://resources/a/x.md" in await uris(client, "zebra migration")
    await client.call("fs.rm", {"uri": "viking://resources/a/x.md"})
    assert "viking://resources/a/x.md" not in await uris(client, "zebra migration")
    with pytest.raises(errors.NotFound):
        await client.call("fs.read", {"uri": "viking://resources/a/x.md"})
    await client.call("fs.mv", {"from_uri": "viking://resources/a", "to_uri": "viking://resources/b"})
    found = await uris(client, "penguin colonies")
    assert "viking://resources/b/y.md" in found
    assert not any(u.startswith("viking://resources/a/") for u in found)
    with pytest.raises(errors.Conflict):
        await client.call("fs.rm", {"uri": "viking://resources/b"})
    await client.call("fs.rm", {"uri": "viking://resources/b", "recursive": True})
    assert not any(u.startswith("viking://resources/b") for u in await uris(client, "penguin colonies"))


async def test_mkdir(client: MemoryDeployment) -> None:
    await client.call("fs.mkdir", {"uri": "viking://resources/empty/inner"})
    st = await client.call("fs.stat", {"uri": "viking://resources/empty/inner"})
    assert st["is_dir"]
    with pytest.raises(errors.NotFound):
        await client.call("fs.mkdir", {"uri": "viking://resources/none/x", "parents": False})


async def test_reads_of_unknown_uris_are_not_found(client: MemoryDeployment) -> None:
    for op in ("fs.read", "fs.stat", "fs.ls", "fs.tree", "fs.abstract", "fs.overview"):
        with pytest.raises(errors.NotFound):
            await client.call(op, {"uri": "viking://resources/does/not/exist"})
    with pytest.raises(errors.NotFound):
        await client.call("search.grep", {"uri": "viking://resources/nope", "pattern": "x"})
    with pytest.raises(errors.NotFound):
        await client.call("fs.rm", {"uri": "viking://resources/nope"})


async def test_a_fresh_deployment_lists_its_roots_and_checks_arguments_first(client: MemoryDeployment) -> None:
    """`ls viking://` answers the roots before anything is written; a bad grep pattern is
    INVALID_ARGUMENT even under a root that does not exist."""
    r = await client.call("fs.ls", {"uri": "viking://"})
    assert {e["uri"] for e in r["entries"]} == {"viking://resources", "viking://agent", "viking://user/default"}
    with pytest.raises(errors.InvalidArgument):
        await client.call("search.grep", {"uri": "viking://resources/nowhere", "pattern": "(unclosed"})
    with pytest.raises(errors.NotFound):
        await client.call("search.grep", {"uri": "viking://resources/nowhere", "pattern": "fine"})
