"""Property-based fuzzing of every request Struct over NATS against a real worker process.

Invariants: every request gets exactly one reply, typed (ok or a known error code, never
INTERNAL); the worker never restarts; invalid requests leave the stored data untouched."""

from __future__ import annotations

import asyncio
import hashlib
import re
import signal
import subprocess
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from skald.messages.catalog import OPS
from skald.runtime.client.api import SkaldClient
from support import fuzzing, processes
from support.figures import FIGURES

BATCH = 50
EXAMPLES = 110  # x BATCH x 2 phases = 11,000 requests
TYPED = {"OK", "INVALID_ARGUMENT", "NOT_FOUND", "PERMISSION_DENIED", "CONFLICT", "DEADLINE_EXCEEDED", "UNAVAILABLE"}
TALLY: Counter[str] = Counter()


class Sender:
    """A NATS client on its own loop thread, so hypothesis' synchronous examples can drive it."""

    def __init__(self, url: str) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.client: SkaldClient = self._run(SkaldClient.connect(url, timeout_s=10.0))

    def _run(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def send_all(self, reqs: list[tuple[str, bytes]]) -> list[tuple[str, str]]:
        async def one(op: str, body: bytes) -> tuple[str, str]:
            resp, hdrs = await self.client.raw(op, body, timeout_s=10.0)
            code = "OK" if resp.status == "ok" else str((resp.error or {}).get("code"))
            assert hdrs.get("Skald-Status") == code, (op, body[:100], hdrs)
            return op, code

        async def run() -> list[tuple[str, str]]:
            return list(await asyncio.gather(*(one(op, b) for op, b in reqs)))

        return self._run(run())  # type: ignore[no-any-return]

    def close(self) -> None:
        self._run(self.client.close())
        self.loop.call_soon_threadsafe(self.loop.stop)


@pytest.fixture(scope="module")
def worker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[subprocess.Popen[str], Sender, Path]]:
    data = tmp_path_factory.mktemp("fuzz")
    log = open(data.parent / f"{data.name}.log", "w")  # noqa: SIM115 - the worker's stderr, for failures
    proc = processes.spawn(["up", "--data-dir", str(data)], {"SKALD_NATS_PORT": "-1"}, stderr=log)
    m = re.match(r"skald ready (nats://\S+)", proc.stdout.readline())  # type: ignore[union-attr]
    assert m
    sender = Sender(m.group(1))
    sender.send_all([("fs.write", msgspec.json.encode({"uri": "viking://resources/fuzz/a.md", "content": "seed"}))])
    yield proc, sender, data
    sender.close()
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=30)


def worker_log(w: Any) -> str:
    return (w[2].parent / f"{w[2].name}.log").read_text()[-3000:]


def tree_digest(data: Path) -> str:
    h = hashlib.sha256()
    root = data / "accounts"
    for p in sorted(root.rglob("*")):
        h.update(str(p.relative_to(root)).encode())
        if p.is_file() and not p.is_symlink():
            h.update(p.read_bytes())
    return h.hexdigest()


OP_NAMES = sorted(OPS)


@st.composite
def batch(draw: st.DrawFn, make: Any) -> list[tuple[str, bytes]]:
    out = []
    for _ in range(BATCH):
        op = draw(st.sampled_from(OP_NAMES))
        out.append((op, make(draw, OPS[op].request)))
    return out


def as_valid(draw: st.DrawFn, cls: type) -> bytes:
    return msgspec.json.encode(draw(fuzzing.valid(cls)))


def as_invalid(draw: st.DrawFn, cls: type) -> bytes:
    return draw(fuzzing.invalid(cls))


FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
                phases=[Phase.explicit, Phase.generate],  # shrinking a 50-request batch costs minutes
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                       HealthCheck.data_too_large, HealthCheck.filter_too_much])


def test_invalid_requests_are_refused_and_change_nothing(worker: Any) -> None:
    proc, sender, data = worker
    before = tree_digest(data)

    @FUZZ
    @given(batch(as_invalid))
    def prop(reqs: list[tuple[str, bytes]]) -> None:
        for (op, body), (_, code) in zip(reqs, sender.send_all(reqs), strict=True):
            TALLY["invalid"] += 1
            assert code == "INVALID_ARGUMENT", (op, body[:200], code, worker_log(worker))

    prop()
    assert tree_digest(data) == before
    assert proc.poll() is None


def test_generated_requests_get_exactly_one_typed_reply(worker: Any) -> None:
    proc, sender, _ = worker
    codes: Counter[str] = Counter()

    @FUZZ
    @given(batch(as_valid))
    def prop(reqs: list[tuple[str, bytes]]) -> None:
        for (op, body), (_, code) in zip(reqs, sender.send_all(reqs), strict=True):
            TALLY["valid"] += 1
            codes[code] += 1
            assert code in TYPED, (op, body[:300], code, worker_log(worker))

    prop()
    assert proc.poll() is None  # never restarted: the same process answered everything
    assert codes["OK"] > 0 and codes["INVALID_ARGUMENT"] > 0
    total = TALLY["valid"] + TALLY["invalid"]
    print(f"\nfuzzed {total} requests over NATS: {dict(codes)}; invalid {TALLY['invalid']}")
    FIGURES["fuzzed"] += total
    assert total >= 10_000
