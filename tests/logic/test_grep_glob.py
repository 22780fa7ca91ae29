"""search.grep and search.glob with their parameters (docs/design/retrieval-api.md)."""

from __future__ import annotations

import pytest

from skald.messages import errors
from support.corpus import remember, write_files
from support.memory_deploy import MemoryDeployment


@pytest.fixture
async def tree(client: MemoryDeployment) -> MemoryDeployment:
    files = {
        "viking://resources/docs/auth.md": "## Authentication\nUser authentication is handled by tokens.\n"
                                           "Configure an API key first.\nERR_AUTH_42 means expired.",
        "viking://resources/docs/api/guide.md": "# Guide\nCall the API.\nTODO: document authentication",
        "viking://resources/src/main.py": "def main():\n    # TODO refactor\n    return 0\n",
        "viking://resources/src/deep/a/b/c.txt": "TODO deep",
    }
    await write_files(client, files, wait=False)
    await remember(client, [("events", "TODO call mom")], tags=["team=home"])
    return client


async def test_grep_lines_context_case_and_limits(tree: MemoryDeployment) -> None:
    r = await tree.call("search.grep", {"uri": "viking://resources", "pattern": "authentication"})
    assert {(m["uri"], m["line"]) for m in r["matches"]} == {
        ("viking://resources/docs/auth.md", 2), ("viking://resources/docs/api/guide.md", 3)}
    r = await tree.call("search.grep", {"uri": "viking://resources", "pattern": "authentication",
                                        "case_insensitive": True, "before_context": 1, "after_context": 1})
    first = next(m for m in r["matches"] if m["uri"].endswith("auth.md") and m["line"] == 1)
    assert first["content"] == "## Authentication" and first["after_context"][0]["line"] == 2
    mid = next(m for m in r["matches"] if m["uri"].endswith("auth.md") and m["line"] == 2)
    assert mid["before_context"] == [{"line": 1, "content": "## Authentication"}]
    r = await tree.call("search.grep", {"uri": "viking://resources", "pattern": "TODO", "node_limit": 2})
    assert r["count"] == 2 and r["truncated"]
    r = await tree.call("search.grep", {"uri": "viking://resources", "pattern": "TODO", "level_limit": 2})
    assert "viking://resources/src/deep/a/b/c.txt" not in {m["uri"] for m in r["matches"]}
    r = await tree.call("search.grep", {"uri": "viking://resources", "pattern": "TODO",
                                        "exclude_uri": "viking://resources/src"})
    assert all(not m["uri"].startswith("viking://resources/src") for m in r["matches"]) and r["count"] == 1
    r = await tree.call("search.grep", {"uri": "viking://resources/docs/auth.md", "pattern": r"ERR_\w+_\d+"})
    assert r["matches"][0]["content"] == "ERR_AUTH_42 means expired." and "tags" not in r["matches"][0]


async def test_grep_tags(tree: MemoryDeployment) -> None:
    r = await tree.call("search.grep", {"uri": "viking://~", "pattern": "TODO", "tags": ["team=home"]})
    assert r["count"] == 1 and "team=home" in r["matches"][0]["tags"]
    r = await tree.call("search.grep", {"uri": "viking://resources", "pattern": "TODO", "include_tags": True})
    assert all(m["tags"] == [] for m in r["matches"])
    with pytest.raises(errors.InvalidArgument):
        await tree.call("search.grep", {"uri": "viking://resources", "pattern": "(unclosed"})


async def test_glob_patterns_limits_fields_tags(tree: MemoryDeployment) -> None:
    r = await tree.call("search.glob", {"pattern": "**/*.md", "uri": "viking://resources"})
    assert r["matches"] == ["viking://resources/docs/api/guide.md", "viking://resources/docs/auth.md"]
    r = await tree.call("search.glob", {"pattern": "*/*.md", "uri": "viking://resources"})
    assert r["matches"] == ["viking://resources/docs/auth.md"]
    r = await tree.call("search.glob", {"pattern": "src/m?in.[p]y", "uri": "viking://resources"})
    assert r["matches"] == ["viking://resources/src/main.py"]
    r = await tree.call("search.glob", {"pattern": "**", "uri": "viking://resources", "node_limit": 3})
    assert r["count"] == 3 and r["truncated"]
    r = await tree.call("search.glob", {"pattern": "**/*.py", "extra_fields": ["size", "is_dir", "abstract"]})
    assert r["matches"][0]["uri"] == "viking://resources/src/main.py" and r["matches"][0]["size"] > 0
    assert r["matches"][0]["abstract"].startswith("main.py")
    r = await tree.call("search.glob", {"pattern": "**/*.md", "uri": "viking://", "tags": ["team=home"]})
    assert [m["uri"] for m in r["matches"]] == [x["uri"] for x in r["matches"]] and r["count"] == 1
    assert r["matches"][0]["tags"] == ["team=home", "memory_type=events"]
    with pytest.raises(errors.InvalidArgument):
        await tree.call("search.glob", {"pattern": "*", "extra_fields": ["owner_password"]})
