"""`skald add` while the deployment fails under it, as processes: the worker running the job is
SIGKILLed and the NATS server goes with it. The command says the connection is lost and that the
job goes on, finishes once both are back (its outcome asked for again, since its done event may
have passed meanwhile), and on Ctrl-C says where the job is and how to follow it."""

from __future__ import annotations

import queue
import signal
import subprocess
import threading
from pathlib import Path

from skald.runtime.bus.natsserver import EmbeddedNats
from support.cluster import free_port
from support.processes import finished, reap, spawn, worker

ACTORS = "indexer,retriever,session,archive,assembler"
DIES_IN_JOB = "ingest.before_publish"  # the job's worker is SIGKILLed inside the job


class Lines:
    """A process's stderr, line by line as it comes, and all of it."""

    def __init__(self, p: subprocess.Popen[str]) -> None:
        self.q: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        assert p.stderr is not None
        threading.Thread(target=lambda: [self.q.put(line) for line in p.stderr], daemon=True).start()  # type: ignore[union-attr]

    def until(self, text: str, timeout: float = 60.0) -> str:
        while True:
            line = self.q.get(timeout=timeout)
            self.seen.append(line)
            if text in line:
                return line


def folder(root: Path, name: str) -> Path:
    (root / name).mkdir(parents=True)
    for i in range(3):
        (root / name / f"n{i}.md").write_text(f"# Note {i}\n\nThe {name} runbook, step {i}.\n")
    return root / name


def test_add_says_what_happens_when_the_server_dies_mid_job_and_where_the_job_is(tmp_path: Path) -> None:
    server = EmbeddedNats(tmp_path / "js", port=free_port())
    url = server.start()
    data, prefix = tmp_path / "data", "addfault"
    procs: list[subprocess.Popen[str]] = []
    try:
        procs.append(worker(url, data, prefix, ACTORS, ready=True, work_ack_wait_s="2", fault=DIES_IN_JOB))
        add = spawn(["add", str(folder(tmp_path, "ops")), "--nats-url", url, "--prefix", prefix])
        procs.append(add)
        err = Lines(add)
        assert procs[0].wait(timeout=60) == -signal.SIGKILL
        server.stop()
        err.until("lost the connection to NATS")
        server.start()
        procs.append(worker(url, data, prefix, ACTORS, ready=True, work_ack_wait_s="2"))
        err.until("reconnected")
        out, _ = add.communicate(timeout=120)
        assert add.returncode == 0, (out, err.seen)
        assert "added viking://resources/ops: 3 files" in out

        procs[2].send_signal(signal.SIGTERM)
        _, said = procs[2].communicate(timeout=30)  # why the restarted worker's first job came late, and what
        reap(procs)  # the next job's only worker dies in it: the job waits for another
        assert "ingest queue: 1 jobs held by workers" in said and "delivered again (attempt 2)" in said, said
        procs.append(worker(url, data, prefix, ACTORS, ready=True, work_ack_wait_s="2", fault=DIES_IN_JOB))
        add = spawn(["add", str(folder(tmp_path, "db")), "--nats-url", url, "--prefix", prefix])
        procs.append(add)
        assert procs[-2].wait(timeout=60) == -signal.SIGKILL  # the job is stuck until a worker takes it
        add.send_signal(signal.SIGINT)
        out, rest = finished(add, 30)
        said = rest.strip().splitlines()
        assert add.returncode == 130 and "Aborted" not in rest and "Traceback" not in rest, rest
        assert "stopped waiting: job" in said[-1] and "goes on on the server" in said[-1]
        job_id = said[-1].split("job ")[1].split()[0]
        procs.append(worker(url, data, prefix, ACTORS, ready=True, work_ack_wait_s="2"))
        shown = spawn(["job", job_id, "--wait", "--nats-url", url, "--prefix", prefix, "--timeout", "60"])
        procs.append(shown)
        out, rest = shown.communicate(timeout=90)
        assert shown.returncode == 0 and "added viking://resources/db: 3 files" in out, (out, rest)
    finally:
        reap(procs)
        server.stop()


def test_add_stopped_before_its_job_is_confirmed_says_so_and_adding_again_finishes(tmp_path: Path) -> None:
    server = EmbeddedNats(tmp_path / "js", port=free_port())
    url = server.start()
    data, prefix = tmp_path / "data", "addlost"
    procs: list[subprocess.Popen[str]] = []
    try:  # the worker dies between queueing the job and answering: the command never hears of it
        procs.append(worker(url, data, prefix, ACTORS, ready=True, work_ack_wait_s="2",
                            fault="ingest.after_enqueue"))
        src = folder(tmp_path, "ops")
        add = spawn(["add", str(src), "--nats-url", url, "--prefix", prefix])
        procs.append(add)
        assert procs[0].wait(timeout=60) == -signal.SIGKILL
        add.send_signal(signal.SIGINT)
        _, rest = finished(add, 30)
        assert add.returncode == 130 and "Traceback" not in rest, rest
        assert "stopped before the server said the job was queued" in rest, rest
        procs.append(worker(url, data, prefix, ACTORS, ready=True, work_ack_wait_s="2"))
        again = spawn(["add", str(src), "--nats-url", url, "--prefix", prefix])
        procs.append(again)
        out, rest = finished(again, 90)
        assert again.returncode == 0 and "added viking://resources/ops: 3 files" in out, (out, rest)
    finally:
        reap(procs)
        server.stop()
