"""OpenViking's own CLI (`ov` 0.5.2, the binary inside the `openviking` wheel on PyPI) against
`skald http`: every command and subcommand its help lists, run once with arguments a user would
give, in an order where each finds what it needs. What happened is recorded as ok, not supported
(OpenViking's typed UNIMPLEMENTED with Skald's reason, or the CLI's own refusal named here) or
failed. The docs/compat.md table between the `compat:ov` markers is this test's output
(`SKALD_WRITE_COMPAT=1` rewrites it); the test fails on a failed command, on a command its help
lists that has no case here, and on a route the gateway does not know.

The wheel is fetched once with `pip download --no-deps` into a cache (`SKALD_TEST_CACHE`, default
`~/.cache/skald-tests`) and only its `ov` binary is used: it is run as a program, never imported,
and is not part of Skald (OpenViking is AGPL).
"""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import httpx
import pytest

from support.compat import table_in_docs, unknown_routes

OV_VERSION = "0.5.2"
DOC = "viking://resources/compat/guide.md"
SKILL = "---\nname: compat-skill\ndescription: Check the caddy upstream port\n---\n# Steps\nRead the port.\n"

# Commands that never reach a server, and why they are not in the table as Skald's.
LOCAL = {"config": "the CLI's own settings", "language": "the CLI's display language",
         "tui": "an interactive terminal UI", "system crypto": "the CLI's local key management",
         "help": "the CLI's help"}

# The CLI refuses these itself after asking the server, for want of something Skald does not
# record: (text it prints, the reason for the table).
CLIENT_REFUSALS = {
    "skills update": ("has no recorded Git source",
                      "updates a skill from its recorded Git source; Skald records none: `ov add-skill` it again"),
}


# What a command's output must hold, beyond its exit status, where that shows the mapping is right.
EXPECT = {
    "read --offset --limit": "The vega host runs caddy.",
    "find": "viking://resources/compat/guide.md",
    "search --search-type keywords": "viking://resources/compat/guide.md",
    "grep": "1935",
    "skills list": "viking://agent/skills/compat-skill",
    "skills show": "Read the port.",
    "session get-session-archive": "Which port does caddy use?",
    "observer retrieval": "total_queries",
}


def cases(tmp: Path) -> list[tuple[str, list[str]]]:
    """(command, argv) in an order where each finds what it needs."""
    (tmp / "src").mkdir()
    (tmp / "src" / "notes.md").write_text("# Notes\n\nThe vega host runs caddy.\nline 4\nline 5\n")
    (tmp / "src" / "runbook.md").write_text("# Runbook\n\nRestart caddy with systemctl.\n")
    (tmp / "skill" / "compat-skill").mkdir(parents=True)
    (tmp / "skill" / "compat-skill" / "SKILL.md").write_text(SKILL)
    (tmp / "x.ovpack").write_bytes(b"PK\x05\x06" + b"\0" * 18)
    s = str(tmp)
    return [
        ("version", ["version"]),
        ("health", ["health"]),
        ("status", ["status"]),
        ("system health", ["system", "health"]),
        ("system status", ["system", "status"]),
        ("ls", ["ls", "viking://resources"]),
        ("tree", ["tree", "viking://resources"]),
        ("mkdir", ["mkdir", "viking://resources/compat"]),
        ("write", ["write", DOC, "--content", "# Guide\n\nThe caddy upstream port is 1935.\n", "--wait"]),
        ("write --append", ["write", DOC, "--content", "Ask ops before changing it.\n", "--append", "--wait"]),
        ("add-resource", ["add-resource", f"{s}/src/notes.md", "--parent", "viking://resources/compat", "--wait"]),
        ("add-resource (folder)", ["add-resource", f"{s}/src", "--to", "viking://resources/ops", "--wait"]),
        ("wait", ["wait"]),
        ("system wait", ["system", "wait"]),
        ("stat", ["stat", DOC]),
        ("attrs get", ["attrs", "get", DOC]),
        ("attrs set-tags", ["attrs", "set-tags", DOC, "--tags", "team=infra"]),
        ("set-tags", ["set-tags", DOC, "--tags", "team=infra,env=prod"]),
        ("read", ["read", DOC]),
        ("read --offset --limit", ["read", "viking://resources/compat/notes.md", "--offset", "2", "--limit", "1"]),
        ("abstract", ["abstract", "viking://resources/compat"]),
        ("overview", ["overview", "viking://resources/compat"]),
        ("get", ["get", DOC, f"{s}/downloaded.md"]),
        ("find", ["find", "caddy upstream port"]),
        ("search", ["search", "caddy upstream port"]),
        ("search --mode context", ["search", "caddy upstream port", "--mode", "context"]),
        ("search --search-type keywords", ["search", "1935", "--search-type", "keywords"]),
        ("grep", ["grep", "1935", "-u", "viking://resources"]),
        ("glob", ["glob", "**/*.md", "--uri", "viking://resources"]),
        ("cp", ["cp", DOC, "viking://resources/compat/copy.md"]),
        ("mv", ["mv", "viking://resources/compat/notes.md", "viking://resources/compat/moved.md"]),
        ("rm", ["rm", "viking://resources/compat/moved.md"]),
        ("reindex", ["reindex", "viking://resources/compat"]),
        ("system consistency", ["system", "consistency", "viking://resources"]),
        ("observer queue", ["observer", "queue"]),
        ("observer vikingdb", ["observer", "vikingdb"]),
        ("observer models", ["observer", "models"]),
        ("observer retrieval", ["observer", "retrieval"]),
        ("observer filesystem", ["observer", "filesystem"]),
        ("observer system", ["observer", "system"]),
        ("add-skill", ["add-skill", f"{s}/skill/compat-skill", "--wait"]),
        ("skills add", ["skills", "add", f"{s}/skill/compat-skill/SKILL.md", "--wait"]),
        ("skills list", ["skills", "list"]),
        ("skills find", ["skills", "find", "caddy port"]),
        ("skills show", ["skills", "show", "compat-skill"]),
        ("skills validate", ["skills", "validate", f"{s}/skill/compat-skill"]),
        ("skills update", ["skills", "update", "compat-skill", "--yes"]),
        ("skills remove", ["skills", "remove", "compat-skill", "--yes"]),
        ("add-memory", ["add-memory", "The deployment owner is Alice"]),
        ("session new", ["session", "new", "--session-id", "compat-s"]),
        ("session list", ["session", "list"]),
        ("session get", ["session", "get", "compat-s"]),
        ("session add-message", ["session", "add-message", "compat-s", "--role", "user", "--content",
                                 "Which port does caddy use?"]),
        ("session add-messages", ["session", "add-messages", "compat-s",
                                  '[{"role": "assistant", "content": "Port 1935."}]']),
        ("session config set", ["session", "config", "set", "compat-s", "--no-auto-commit"]),
        ("session commit", ["session", "commit", "compat-s"]),
        ("session get-session-context", ["session", "get-session-context", "compat-s"]),
        ("wait (for the commit's archive)", ["wait"]),
        ("session get-session-archive", ["session", "get-session-archive", "compat-s", "archive_001"]),
        ("session delete", ["session", "delete", "compat-s"]),
        ("acl get", ["acl", "get", "viking://resources"]),
        ("acl set", ["acl", "set", "viking://resources", "--acl-mode", "restricted"]),
        ("acl grant", ["acl", "grant", "viking://resources", "--principal", "user:ana", "--level", "read"]),
        ("acl revoke", ["acl", "revoke", "viking://resources", "--principal", "user:ana"]),
        ("acl rm", ["acl", "rm", "viking://resources"]),
        ("import", ["import", f"{s}/x.ovpack", "viking://resources"]),
        ("export", ["export", "viking://resources/compat", f"{s}/out.ovpack"]),
        ("backup", ["backup", f"{s}/backup.ovpack"]),
        ("restore", ["restore", f"{s}/x.ovpack"]),
        ("snapshot commit", ["snapshot", "commit", "-m", "compat"]),
        ("snapshot log", ["snapshot", "log"]),
        ("snapshot show", ["snapshot", "show", "HEAD"]),
        ("snapshot diff", ["snapshot", "diff", DOC, "--to", "HEAD"]),
        ("snapshot diff-paths", ["snapshot", "diff-paths", "--paths", "viking://resources", "--to", "HEAD"]),
        ("snapshot restore", ["snapshot", "restore", "HEAD"]),
        ("snapshot ignore-get", ["snapshot", "ignore-get"]),
        ("snapshot ignore-set", ["snapshot", "ignore-set", "--content", "*.tmp"]),
        ("snapshot ignore-delete", ["snapshot", "ignore-delete"]),
        ("task list", ["task", "list"]),
        ("task status", ["task", "status", "{job}"]),  # an ingest job queued through the gateway
        ("task cancel", ["task", "cancel", "t1"]),
        ("task watch ls", ["task", "watch", "ls"]),
        ("task watch show", ["task", "watch", "show", "w1"]),
        ("task watch pause", ["task", "watch", "pause", "w1"]),
        ("task watch resume", ["task", "watch", "resume", "w1"]),
        ("task watch update", ["task", "watch", "update", "w1", "--interval", "60"]),
        ("task watch trigger", ["task", "watch", "trigger", "w1"]),
        ("task watch rm", ["task", "watch", "rm", "w1"]),
        ("privacy categories", ["privacy", "categories"]),
        ("privacy tree", ["privacy", "tree"]),
        ("privacy list", ["privacy", "list", "skill"]),
        ("privacy get", ["privacy", "get", "skill", "k"]),
        ("privacy reference", ["privacy", "reference", "skill", "k"]),
        ("privacy resolve", ["privacy", "resolve", "skill", "k", "f"]),
        ("privacy upsert", ["privacy", "upsert", "skill", "k", "--values-json", '{"f": "v"}']),
        ("privacy versions", ["privacy", "versions", "skill", "k"]),
        ("privacy version", ["privacy", "version", "skill", "k", "1"]),
        ("privacy activate", ["privacy", "activate", "skill", "k", "1"]),
        ("privacy delete", ["privacy", "delete", "skill", "k", "--yes"]),
        ("privacy scan", ["privacy", "scan", "--uri", "viking://resources"]),
        ("compile", ["compile", "--from", "viking://resources/compat", "--to", "viking://resources/wiki",
                     "--skill", "viking://agent/skills/compat-skill"]),
        ("chat", ["chat", "-m", "hi"]),
        ("admin create-account", ["admin", "create-account", "acme", "--admin", "ana"]),
        ("admin list-accounts", ["admin", "list-accounts"]),
        ("admin register-user", ["admin", "register-user", "acme", "bob"]),
        ("admin list-users", ["admin", "list-users", "acme"]),
        ("admin set-role", ["admin", "set-role", "acme", "bob", "user"]),
        ("admin regenerate-key", ["admin", "regenerate-key", "acme", "bob"]),
        ("admin create-group", ["admin", "create-group", "acme", "ops"]),
        ("admin list-groups", ["admin", "list-groups", "acme"]),
        ("admin add-group-member", ["admin", "add-group-member", "acme", "ops", "bob"]),
        ("admin list-group-members", ["admin", "list-group-members", "acme", "ops"]),
        ("admin remove-group-member", ["admin", "remove-group-member", "acme", "ops", "bob"]),
        ("admin delete-group", ["admin", "delete-group", "acme", "ops"]),
        ("admin remove-user", ["admin", "remove-user", "acme", "bob"]),
        ("admin set-account-settings", ["admin", "set-account-settings", "acme", "--acl-enabled", "true"]),
        ("admin migrate", ["admin", "migrate"]),
        ("admin delete-account", ["admin", "delete-account", "acme"]),
    ]


@pytest.fixture(scope="session")
def ov_binary() -> Path:
    """The `ov` binary of openviking 0.5.2 (its wheel downloaded once, only the binary kept)."""
    cache = Path(os.environ.get("SKALD_TEST_CACHE", Path.home() / ".cache" / "skald-tests")) / f"ov-{OV_VERSION}"
    binary = cache / "openviking" / "bin" / "ov"
    if not binary.exists():
        wheels = cache / "wheel"
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", f"openviking=={OV_VERSION}", "--no-deps",
                        "--only-binary=:all:", "-d", str(wheels)], check=True, timeout=600)
        wheel = next(wheels.glob("openviking-*.whl"))
        with zipfile.ZipFile(wheel) as z:
            for name in z.namelist():
                if name == "openviking/bin/ov" or name.startswith("openviking.libs/"):
                    z.extract(name, cache)
        binary.chmod(0o755)
        wheel.unlink()
    return binary


def commands(help_text: str) -> list[str]:
    """The (sub)command names a help page lists: in its boxes (`│ name  ...`) or under
    `Subcommands` / `Commands:` until the first blank line."""
    names = re.findall(r"^│ ([a-z][a-z-]*)\s", help_text, re.M)
    section = re.search(r"^(?:Subcommands|Commands:)\n((?:.+\n)+)", help_text, re.M)
    if section:
        names += re.findall(r"^  ([a-z][a-z-]*)", section.group(1), re.M)
    return [n for n in dict.fromkeys(names) if n != "help"]


def api_error(out: str) -> str:
    """The text of the CLI's `OpenViking API Error` box, its wrapped lines joined."""
    box = re.search(r"╭─ OpenViking API Error.*?\n(.*?)╰", out, re.S)
    if not box:
        return ""
    return " ".join(line.strip(" │") for line in box.group(1).splitlines()).strip()


def table(rows: list[tuple[str, str, str]]) -> str:
    out = [f"| `ov` {OV_VERSION} command | against `skald http` | why |", "|---|---|---|"]
    out += [f"| `ov {name}` | {outcome} | {why} |" for name, outcome, why in rows]
    return "\n".join(out)


async def test_every_ov_cli_command_works_or_is_typed_unimplemented(gateway: str, ov_binary: Path,
                                                                     tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    env = {**os.environ, "HOME": str(home), "NO_COLOR": "1", "COLUMNS": "100"}

    async def ov(*args: str) -> tuple[int, str]:
        proc = await asyncio.create_subprocess_exec(str(ov_binary), *args, env=env, cwd=tmp_path,
                                                    stdin=asyncio.subprocess.DEVNULL,
                                                    stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
        out, _ = await asyncio.wait_for(proc.communicate(), 120)
        return proc.returncode or 0, out.decode(errors="replace")

    assert (await ov("config", "add", "custom", "--name", "skald", "--url", gateway, "--activate"))[0] == 0
    assert (await ov("language", "en"))[0] == 0
    plan = cases(tmp_path)
    listed = set()
    for top in commands((await ov("--help"))[1]):
        subs = commands((await ov(top, "--help"))[1]) if top not in LOCAL else []
        for sub in subs:
            deeper = commands((await ov(top, sub, "--help"))[1]) if f"{top} {sub}" not in LOCAL else []
            deeper = [] if set(deeper) == set(subs) else deeper  # a leaf whose help is its group's
            listed |= {f"{top} {sub} {d}" for d in deeper} or {f"{top} {sub}"}
        listed |= set() if subs else {top}
    covered = {name.split(" (")[0].split(" --")[0] for name, _ in plan}
    assert listed - covered - set(LOCAL) == set()  # a command the CLI lists needs a case here

    async with httpx.AsyncClient(base_url=gateway, timeout=60) as http:  # a job for `task status` to show
        queued = await http.post("/api/v1/resources", json={"content": "# Queued\n\nA job to look at.\n",
                                                            "name": "queued.md", "wait": False})
        job = queued.json()["result"]["job_id"]
    rows: list[tuple[str, str, str]] = []
    failed = []
    for name, argv in plan:
        code, out = await ov(*(a.replace("{job}", job) for a in argv))
        err = api_error(out)
        refusal = CLIENT_REFUSALS.get(name)
        if code == 0 and not err and EXPECT.get(name, "") in out:
            rows.append((name, "ok", ""))
        elif err.startswith("[UNIMPLEMENTED]"):
            rows.append((name, "not supported", err.split("Skald has no ", 1)[-1].replace("|", "/")))
        elif refusal and refusal[0] in out:
            rows.append((name, "not supported", refusal[1]))
        else:
            failed.append(f"ov {' '.join(argv)} -> {code}: {out[-600:]}")
            rows.append((name, "failed", (err or out.strip().splitlines()[-1] if out.strip() else "")[:80]
                         .replace("|", "/")))
    unknown = await unknown_routes(gateway)
    fresh = table_in_docs("ov", table(rows))
    assert failed == [], "\n\n".join(failed)
    assert (tmp_path / "downloaded.md").read_text().startswith("# Guide\n\nThe caddy upstream port is 1935.")
    assert unknown == []
    assert fresh, "docs/compat.md's ov table is stale: run with SKALD_WRITE_COMPAT=1"
