"""The `skald` client commands as a user runs them: real processes against a real deployment;
human output, JSON output, exit codes, and a terminal session for the progress bar."""

from __future__ import annotations

import asyncio
import json
import os
import pty
import select
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

SKALD = str(Path(sys.executable).parent / "skald")


def cli(w: Any, url: str, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SKALD_NATS_URL": url, "SKALD_PREFIX": w.cfg.prefix}
    return subprocess.run([SKALD, *args], capture_output=True, text=True, env=env, input=stdin, timeout=60)


async def run(w: Any, url: str, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return await asyncio.to_thread(cli, w, url, *args, stdin=stdin)


async def test_commands_human_and_json_output(skald: Any, nats_url: str, tmp_path: Path) -> None:
    w = skald
    r = await run(w, nats_url, "write", "viking://resources/guide/caddy.md",
                  stdin="# Caddy\n\nSet the caddy upstream port to 1935.\n")
    assert r.returncode == 0 and "wrote viking://resources/guide/caddy.md" in r.stdout
    r = await run(w, nats_url, "remember", "preferences", "Prefers caddy over nginx.")
    assert r.returncode == 0 and r.stdout.startswith("remembered viking://user/default/memories/preferences/")
    mem = r.stdout.split()[-1]
    r = await run(w, nats_url, "memory", "update", mem, "Prefers caddy over nginx and traefik.")
    assert r.returncode == 0 and r.stdout.strip() == f"updated {mem}"
    r = await run(w, nats_url, "memory", "history", mem)
    assert r.stdout.splitlines() == ["v1 (update): Prefers caddy over nginx.",
                                     "now: Prefers caddy over nginx and traefik."]
    r = await run(w, nats_url, "find", "caddy upstream port")
    assert r.returncode == 0 and "viking://resources/guide/caddy.md" in r.stdout
    r = await run(w, nats_url, "find", "caddy upstream port", "-o", "json")
    data = json.loads(r.stdout)
    assert data["total"] >= 1 and any(h["uri"] == "viking://resources/guide/caddy.md" for h in data["resources"])
    r = await run(w, nats_url, "search", "caddy port", "--mode", "context", "--max-tokens", "300")
    assert r.returncode == 0 and '<memory uri="' in r.stdout
    r = await run(w, nats_url, "read", "viking://resources/guide/caddy.md")
    assert "upstream port to 1935" in r.stdout
    r = await run(w, nats_url, "tree", "viking://resources")
    assert "└── caddy.md" in r.stdout and "guide/" in r.stdout
    r = await run(w, nats_url, "ls", "viking://resources/guide")
    assert r.stdout.strip() == "caddy.md"
    r = await run(w, nats_url, "grep", "1935")
    assert "viking://resources/guide/caddy.md:3:" in r.stdout
    r = await run(w, nats_url, "glob", "**/*.md", "--uri", "viking://resources")
    assert "viking://resources/guide/caddy.md" in r.stdout
    for args in (("session", "create", "cli-s"), ("session", "add", "cli-s", "user", "we fix caddy"),
                 ("session", "commit", "cli-s", "--keep", "0")):
        assert (await run(w, nats_url, *args)).returncode == 0
    r = await run(w, nats_url, "session", "context", "cli-s", "-o", "json")
    ctx = json.loads(r.stdout)
    assert r.returncode == 0 and ctx["messages"] == []  # committed with --keep 0: nothing left live
    r = await run(w, nats_url, "session", "list")
    assert "cli-s  1 messages" in r.stdout
    r = await run(w, nats_url, "recall", "caddy port", "--session", "cli-s", "-o", "json")
    assert r.returncode == 0 and "stats" in json.loads(r.stdout)
    r = await run(w, nats_url, "session", "create", "cli-auto", "--auto-commit-messages", "50", "-o", "json")
    assert r.returncode == 0 and json.loads(r.stdout)["auto_commit"] == {"pending_messages": 50}


async def test_exit_codes(skald: Any, nats_url: str) -> None:
    w = skald
    r = await run(w, nats_url, "read", "viking://resources/missing.md")
    assert r.returncode == 4 and "NOT_FOUND" in r.stderr
    r = await run(w, nats_url, "read", "viking://resources/../../etc/passwd")
    assert r.returncode == 3 and "INVALID_ARGUMENT" in r.stderr
    r = await run(w, nats_url, "read", "viking://user/other/memories/x.md")
    assert r.returncode == 5
    r = await run(w, nats_url, "read", "viking://resources/missing.md", "-o", "json")
    assert r.returncode == 4 and json.loads(r.stdout)["error"]["code"] == "NOT_FOUND"
    r = await run(w, nats_url, "find")
    assert r.returncode == 2 and "Missing argument" in r.stderr
    r = await asyncio.to_thread(lambda: subprocess.run(
        [SKALD, "find", "x", "--nats-url", "nats://127.0.0.1:9", "--timeout", "2"],
        capture_output=True, text=True, timeout=60))
    assert r.returncode == 6
    r = await run(w, nats_url, "find", "--help")
    assert r.returncode == 0 and 'skald find "how do we deploy caddy"' in r.stdout


def read_pty(fd: int, proc: subprocess.Popen[bytes], limit_s: float = 60.0) -> str:
    out = b""
    end = time.monotonic() + limit_s
    while time.monotonic() < end:
        ready, _, _ = select.select([fd], [], [], 0.2)
        if ready:
            try:
                chunk = os.read(fd, 4096)
            except OSError:
                break
            if not chunk:
                break
            out += chunk
        elif proc.poll() is not None:
            break
    return out.decode(errors="replace")


async def test_add_directory_shows_progress_on_a_terminal_only(skald: Any, nats_url: str, tmp_path: Path) -> None:
    src = tmp_path / "docs"
    for i in range(60):
        (src / f"part{i % 3}").mkdir(parents=True, exist_ok=True)
        (src / f"part{i % 3}" / f"doc{i}.md").write_text(f"# Doc {i}\n\nAbout topic {i}.\n")
    env = {**os.environ, "SKALD_NATS_URL": nats_url, "SKALD_PREFIX": skald.cfg.prefix, "COLUMNS": "100"}

    def on_terminal() -> tuple[int, str]:
        leader, follower = pty.openpty()
        proc = subprocess.Popen([SKALD, "add", str(src)], stdin=follower, stdout=follower, stderr=follower, env=env)
        os.close(follower)
        text = read_pty(leader, proc)
        proc.wait(timeout=60)
        os.close(leader)
        return proc.returncode, text

    code, text = await asyncio.to_thread(on_terminal)
    assert code == 0, text
    assert "indexing" in text and "100%" in text and "added viking://resources/docs: 60 files" in text
    r = await run(skald, nats_url, "add", str(src), "--name", "docs2")
    assert r.returncode == 0 and "indexing" not in r.stdout + r.stderr
    assert "added viking://resources/docs2: 60 files" in r.stdout


async def test_tree_changes_system_and_session_admin_commands(skald: Any, nats_url: str) -> None:
    """Every bus operation an operator needs has its command: mkdir, mv, stat, rm, health, stats,
    session delete/archives, search --search-type."""
    w = skald
    assert (await run(w, nats_url, "mkdir", "viking://resources/admin/sub")).returncode == 0
    r = await run(w, nats_url, "write", "viking://resources/admin/sub/a.md", stdin="ERR_DISK_77 on node a\n")
    assert r.returncode == 0
    r = await run(w, nats_url, "search", "ERR_DISK_77", "--search-type", "keywords")
    assert r.returncode == 0 and "viking://resources/admin/sub/a.md" in r.stdout
    r = await run(w, nats_url, "mv", "viking://resources/admin/sub/a.md", "viking://resources/admin/b.md")
    assert r.returncode == 0 and "moved" in r.stdout
    r = await run(w, nats_url, "stat", "viking://resources/admin/b.md", "-o", "json")
    assert r.returncode == 0 and json.loads(r.stdout)["uri"] == "viking://resources/admin/b.md"
    assert (await run(w, nats_url, "stat", "viking://resources/admin/sub/a.md")).returncode == 4  # moved away
    assert (await run(w, nats_url, "rm", "viking://resources/admin")).returncode != 0  # a directory needs -r
    assert (await run(w, nats_url, "rm", "-r", "viking://resources/admin")).returncode == 0
    assert (await run(w, nats_url, "ls", "viking://resources/admin")).returncode == 4
    r = await run(w, nats_url, "health")
    assert r.returncode == 0 and r.stdout.startswith("ok (skald ") and "retriever:" in r.stdout
    r = await run(w, nats_url, "stats", "-o", "json")
    assert r.returncode == 0 and "retrieval" in json.loads(r.stdout)
    await run(w, nats_url, "session", "add", "adm", "user", "hello")
    await run(w, nats_url, "session", "commit", "adm")
    r = await run(w, nats_url, "session", "archives", "adm")
    assert r.returncode == 0 and r.stdout.startswith("archive_001")
    r = await run(w, nats_url, "session", "delete", "adm")
    assert r.returncode == 0 and r.stdout.strip() == "deleted adm"
    assert (await run(w, nats_url, "session", "archives", "adm")).returncode == 4


def test_every_catalog_operation_has_a_command_and_every_command_an_example() -> None:
    """Derived from the catalog and the command tree: a new public operation without a command, or
    a command without an example in its `--help`, fails here."""
    from click.testing import CliRunner

    from skald.messages import catalog
    from skald.runtime.doors import cli_help
    from skald.runtime.main import main

    tree = cli_help.commands(main)
    public = {name for name, op in catalog.OPS.items() if not op.internal}
    assert public - set(cli_help.OP_COMMANDS) == set()
    assert {c for c in cli_help.OP_COMMANDS.values() if c not in tree} == set()
    runner = CliRunner()
    for path in tree:
        r = runner.invoke(main, [*path.split(), "--help"])
        assert r.exit_code == 0 and "Example:\n    " in r.output and "skald" in r.output.split("Example:")[1], path


def test_shell_completion_script_and_completions() -> None:
    env = {**os.environ, "_SKALD_COMPLETE": "bash_source"}
    r = subprocess.run([SKALD], capture_output=True, text=True, env=env, timeout=30)
    assert r.returncode == 0 and "complete -o nosort -F _skald_completion skald" in r.stdout
    env = {**os.environ, "_SKALD_COMPLETE": "bash_complete", "COMP_WORDS": "skald session re", "COMP_CWORD": "2"}
    r = subprocess.run([SKALD], capture_output=True, text=True, env=env, timeout=30)
    assert r.stdout.split() == ["plain,retry-archive"]


async def test_summaries_tags_skills_identity_and_session_commands(skald: Any, nats_url: str, tmp_path: Path) -> None:
    w = skald
    r = await run(w, nats_url, "write", "viking://resources/ops/caddy.md",
                  stdin="# Caddy\n\nThe caddy upstream port is 1935.\n")
    assert r.returncode == 0
    r = await run(w, nats_url, "abstract", "viking://resources/ops/caddy.md")
    assert r.returncode == 0 and "caddy" in r.stdout.lower()
    r = await run(w, nats_url, "overview", "viking://resources/ops", "-o", "json")
    assert r.returncode == 0 and json.loads(r.stdout)["uri"] == "viking://resources/ops"
    r = await run(w, nats_url, "tags", "viking://resources/ops/caddy.md", "Team=infra", "status=draft")
    assert r.returncode == 0 and r.stdout.strip() == "viking://resources/ops/caddy.md: team=infra, status=draft"
    r = await run(w, nats_url, "tags", "viking://resources/ops/caddy.md", "status=draft", "--mode", "remove",
                  "-o", "json")
    assert json.loads(r.stdout)["tags"] == ["team=infra"]
    skill = tmp_path / "SKILL.md"
    skill.write_text("---\nname: caddy-port\ndescription: Change the caddy upstream port safely\n---\n# Steps\n")
    r = await run(w, nats_url, "skill", str(skill), "--tag", "team=infra")
    assert r.returncode == 0 and r.stdout.strip() == "added viking://agent/skills/caddy-port"
    r = await run(w, nats_url, "whoami")
    assert r.stdout.strip() == "default/default/default (local)"
    await run(w, nats_url, "session", "add", "cli-g", "user", "hello there")
    r = await run(w, nats_url, "session", "get", "cli-g")
    assert r.returncode == 0 and r.stdout.strip() == "cli-g  1 live / 1 messages, 0 commits, 0 archives"
    r = await run(w, nats_url, "session", "retry-archive", "cli-g", "archive_001")
    assert r.returncode == 4 and "archive_001" in r.stderr  # nothing to retry: a clear error, not a traceback


async def test_new_sessions_are_said_and_abstracts_are_cut_at_a_word(skald: Any, nats_url: str) -> None:
    """A mistyped session id no longer passes unseen (`session add` and `recall --session` say the
    session is new), `session list` counts a committed session's messages, and find's text output
    cuts an abstract at a word."""
    w = skald
    r = await run(w, nats_url, "session", "add", "tpyo", "user", "we deploy caddy on port 1935")
    assert r.returncode == 0 and "'tpyo' had no messages" in r.stderr
    r = await run(w, nats_url, "session", "add", "tpyo", "assistant", "noted")
    assert r.returncode == 0 and not r.stderr
    assert (await run(w, nats_url, "session", "commit", "tpyo", "--wait")).returncode == 0
    r = await run(w, nats_url, "session", "list")
    assert "tpyo  2 messages (0 live), 1 commits" in r.stdout
    r = await run(w, nats_url, "recall", "caddy", "--session", "typo")
    assert r.returncode == 0 and "session 'typo' did not exist" in r.stderr
    words = " ".join(f"word{i}" for i in range(80))
    await run(w, nats_url, "remember", "events", f"A long note: {words}")
    env = {**os.environ, "SKALD_NATS_URL": nats_url, "SKALD_PREFIX": w.cfg.prefix, "COLUMNS": "60"}
    shown = await asyncio.to_thread(subprocess.run, [SKALD, "find", "long note word1"], capture_output=True,
                                    text=True, env=env, timeout=60)
    full = [" ".join(h["abstract"].split()) for h in json.loads((await run(
        w, nats_url, "find", "long note word1", "-o", "json")).stdout)["memories"] if h["abstract"]]
    cut = [line.strip() for line in shown.stdout.splitlines() if line.startswith("        ")]
    assert any(c.endswith(" ...") for c in cut)
    for c in cut:  # each a whole-word prefix of an abstract
        c = c.removesuffix(" ...")
        assert any(f == c or f.startswith(c + " ") for f in full), (c, full)


async def test_the_readmes_skald_call_lines_run_as_written(skald: Any, nats_url: str) -> None:
    """`skald call OP JSON` is any NATS client's request from a shell: the README's examples, as
    printed there, against a worker; a bad operation or body is a usage error."""
    import shlex

    readme = (Path(__file__).parents[2] / "README.md").read_text()
    lines = [line for line in readme.splitlines() if line.startswith("skald call ")]
    assert len(lines) == 3
    outs = []
    for line in lines:
        r = await run(skald, nats_url, *shlex.split(line)[1:])
        assert r.returncode == 0, (line, r.stderr)
        outs.append(json.loads(r.stdout))
    assert any(h["uri"] == "viking://resources/oncall.md" for h in outs[1]["resources"])
    assert outs[2]["matches"] and "Ada" in outs[2]["matches"][0]["content"]
    assert (await run(skald, nats_url, "call", "search.nope", "{}")).returncode == 2
    assert (await run(skald, nats_url, "call", "search.find", "{not json")).returncode == 2
    assert (await run(skald, nats_url, "call", "search.find", '{"limit": "x"}')).returncode == 3
