"""The README's quick tour, line by line, as a user would type it (real processes, a fresh data
directory; the hashed embedder and free ports are the only substitutions)."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def tour_lines() -> list[str]:
    text = (ROOT / "README.md").read_text()
    block = text.split("<!-- tour -->", 1)[1].split("<!-- /tour -->", 1)[0]
    lines = [ln.split("  #", 1)[0].strip() for ln in block.splitlines()]
    return [ln for ln in lines if ln and not ln.startswith("```")]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_readme_tour_runs(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "deploy.md").write_text("# Deploying caddy\n\nRun caddy behind NPM; the upstream port is 1935.\n")
    (docs / "oncall.md").write_text("# On call\n\nPage the SRE on duty.\n")
    env = {**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}", "SKALD_EMBEDDER": "hash", "SKALD_NATS_PORT": "-1"}
    background: list[subprocess.Popen[str]] = []
    lines = tour_lines()
    assert lines[0].startswith("skald up") and any(ln.startswith("skald http") for ln in lines)
    try:
        for line in lines:
            argv = shlex.split(line.rstrip("&").strip())
            assert argv[0] == "skald", line
            if line.endswith("&"):
                if argv[1] == "http":
                    port = free_port()
                    argv = [a if a != "1933" else str(port) for a in argv]
                proc = subprocess.Popen(argv, cwd=tmp_path, env=env, text=True, stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE)
                background.append(proc)
                if argv[1] == "up":
                    ready = proc.stdout.readline()  # type: ignore[union-attr]
                    m = re.match(r"skald ready (nats://\S+)", ready)
                    assert m, ready
                    env["SKALD_NATS_URL"] = m.group(1)
                else:
                    deadline = time.monotonic() + 30
                    while time.monotonic() < deadline:
                        try:
                            if httpx.get(f"http://127.0.0.1:{port}/health").status_code == 200:
                                break
                        except httpx.HTTPError:
                            time.sleep(0.1)
                    r = httpx.post(f"http://127.0.0.1:{port}/api/v1/search/find", json={"query": "caddy port"})
                    assert r.status_code == 200 and r.json()["result"]["total"] >= 1
                continue
            r = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
            assert r.returncode == 0, (line, r.stdout, r.stderr)
            if argv[1] == "add":
                assert "added viking://resources/docs: 2 files" in r.stdout
            if argv[1] == "search":
                assert '<memory uri="viking://resources/docs/deploy.md"' in r.stdout
            if "-o" in argv:
                assert json.loads(r.stdout)["total"] >= 1
    finally:
        for proc in reversed(background):
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
    assert (tmp_path / "skald-data").is_dir()
