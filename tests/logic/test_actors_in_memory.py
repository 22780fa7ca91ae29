"""Each actor's logic on the in-memory bus (`skald.actors.kit.memory_bus.MemoryBus`): real files in
a temporary data directory, real index and models of the offline defaults, and no nats-server. The
bus's own behaviour (delivery, redelivery, several workers, crashes) is tested on a real server
under `tests/worker/` and `tests/processes/`."""

from __future__ import annotations

import contextlib
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from skald.actors.archive.handlers import Archiver
from skald.actors.assembler.handlers import Assembler
from skald.actors.indexer.handlers import Indexer
from skald.actors.kit.memory_bus import MemoryBus
from skald.actors.retriever.handlers import Retriever
from skald.actors.retriever.list_search import SearchSettings
from skald.actors.session.handlers import Sessions
from skald.messages import catalog, errors
from skald.messages.index import IndexChange
from skald.runtime.models.embedders import HashEmbedder
from skald.runtime.models.llm import ExtractiveLLM, ExtractiveSummarizer
from skald.store.local_tree import LocalTree
from skald.store.treeport import StoreUnavailable
from skald.store.uri import Identity, Namespace

ME = Identity()
GUIDE = ("# Backup runbook\n\nHow the nightly backups of the vega cluster are verified.\n\n"
         "## Verification\nEvery morning the restore drill restores last night's snapshot into a scratch "
         "database and compares row counts with the primary.\n")


@pytest.fixture
async def bus() -> MemoryBus:
    return MemoryBus(worker_id="w1")


async def call(bus: MemoryBus, op: catalog.Op, body: dict[str, Any], timeout_s: float = 10.0) -> Any:
    return await bus.call(op, msgspec.convert(body, op.request), ME, timeout_s)


def message(role: str, text: str) -> dict[str, Any]:
    return {"role": role, "parts": [{"type": "text", "text": text}]}


async def test_session_commit_archives_messages_and_queues_phase2(tmp_path: Path, bus: MemoryBus) -> None:
    """The session actor alone: messages are stored once by request id, a commit moves them into an
    archive before queueing one Phase 2 job, and the live context still holds every message."""
    sessions = Sessions(Namespace(tmp_path), bus, "w1")
    bus.serve(sessions)
    await sessions.start()
    try:
        sid = (await call(bus, catalog.SESSIONS_CREATE, {}))["session_id"]
        for i in range(3):
            await call(bus, catalog.SESSIONS_ADD_MESSAGE,
                       {"session_id": sid, **message("user", f"question {i}"), "request_id": f"q{i}"})
            await call(bus, catalog.SESSIONS_ADD_MESSAGE, {"session_id": sid, **message("assistant", f"answer {i}")})
        again = await call(bus, catalog.SESSIONS_ADD_MESSAGE,
                           {"session_id": sid, **message("user", "question 0"), "request_id": "q0"})
        info = await call(bus, catalog.SESSIONS_GET, {"session_id": sid})
        assert info["message_count"] == 6 and again["message_id"]  # the retried add stored nothing new

        done = await call(bus, catalog.SESSIONS_COMMIT, {"session_id": sid})
        assert done["status"] == "accepted" and done["archived_messages"] + done.get("retained_messages", 0) == 6
        archive = Namespace(tmp_path).resolve(done["archive_uri"], ME).path
        assert (archive / "messages.jsonl").read_text().count("\n") == done["archived_messages"] > 0
        assert list(bus.jobs) == ["archive"] and len(bus.jobs["archive"]) == 1
        ctx = await call(bus, catalog.SESSIONS_CONTEXT, {"session_id": sid})
        texts = [p["text"] for m in ctx["messages"] for p in m["parts"] if p["type"] == "text"]
        assert all(f"question {i}" in " ".join(texts) for i in range(3))
        with pytest.raises(errors.NotFound):
            await call(bus, catalog.SESSIONS_GET, {"session_id": "no-such-session"})
    finally:
        await sessions.stop()


@contextlib.asynccontextmanager
async def archiving(ns: Namespace, bus: MemoryBus) -> AsyncIterator[Archiver]:
    """The session and archive actors on `bus`, started; stopped after."""
    sessions = Sessions(ns, bus, "w1")
    archiver = Archiver(ns, ExtractiveLLM(), bus, worker_id="w1")
    bus.serve(sessions, archiver)
    await sessions.start()
    await archiver.start()
    try:
        yield archiver
    finally:
        await archiver.stop()
        await sessions.stop()


async def committed(bus: MemoryBus, *messages: dict[str, Any]) -> str:
    """A new session holding `messages`, committed (its Phase 2 queued); its id."""
    sid = (await call(bus, catalog.SESSIONS_CREATE, {}))["session_id"]
    for m in messages:
        await call(bus, catalog.SESSIONS_ADD_MESSAGE, {"session_id": sid, **m})
    await call(bus, catalog.SESSIONS_COMMIT, {"session_id": sid})
    return sid


async def archive_states(bus: MemoryBus, sid: str) -> list[str]:
    return [a["state"] for a in (await call(bus, catalog.SESSIONS_ARCHIVES, {"session_id": sid}))["archives"]]


async def test_archive_phase2_completes_from_the_queued_job(tmp_path: Path, bus: MemoryBus) -> None:
    """The archive actor consumes the job the session queued: `.done` is written, the archive reads
    completed, and the offline model's overview is what the context serves."""
    async with archiving(Namespace(tmp_path), bus):
        sid = await committed(bus, message("user", "I always drink oat milk flat whites."),
                              message("assistant", "Noted."))
        assert await bus.run_jobs() >= 1
        assert await archive_states(bus, sid) == ["completed"]
        assert list(tmp_path.rglob("archive_*/.done"))
        assert any(name.startswith("session.") or "archive" in name for name, _ in bus.events)


class StallingTree(LocalTree):
    """A real disk behind a store that stops answering for the first `n` writes of an archive's
    overview, as the JetStream tree does while its stream elects a leader."""

    def __init__(self, root: Path, n: int) -> None:
        super().__init__(root)
        self.left = n

    def write(self, key: str, data: bytes, *, durable: bool = True) -> bool:
        if self.left > 0 and key.endswith("/.overview.md") and "/archive_" in key:
            self.left -= 1
            raise StoreUnavailable(f"not answering for {key}")
        return super().write(key, data, durable=durable)


async def test_a_store_not_answering_during_phase2_is_waited_out_not_a_failure(tmp_path: Path, bus: MemoryBus) -> None:
    """Phase 2 meeting a store that does not answer comes back later and completes: no `.failed.json`
    (which would leave the session's last archive uncovered until its next commit), and the model's
    journaled answer is what the run that completes applies."""
    tree = StallingTree(tmp_path, 2)
    async with archiving(Namespace(tmp_path, tree), bus) as archiver:
        sid = await committed(bus, message("user", "The boat is moored at pier nine."))
        await bus.run_jobs()
        assert tree.left == 0  # it was refused twice
        assert await archive_states(bus, sid) == ["completed"] and archiver.failed == 0
        assert not list(tmp_path.rglob(".failed.json")) and list(tmp_path.rglob("archive_*/.phase2.journal.json"))


class RefusingReads(LocalTree):
    """A real disk behind a store that does not answer the first `n` reads of one file."""

    def __init__(self, root: Path, suffix: str, n: int) -> None:
        super().__init__(root)
        self.suffix, self.left = suffix, n

    def read(self, key: str) -> bytes:
        if self.left > 0 and key.endswith(self.suffix):
            self.left -= 1
            raise StoreUnavailable(f"not answering for {key}")
        return super().read(key)


async def test_a_file_the_store_cannot_read_fails_its_ingest_job_to_be_run_again(tmp_path: Path,
                                                                                 bus: MemoryBus) -> None:
    """An ingest job is not done without a file it could not read because the store did not answer
    (it was skipped as if removed, and its rows never came): the job fails, and the work queue's
    next delivery indexes it."""
    tree = RefusingReads(tmp_path, "/backups.md", 1)
    indexer = Indexer(Namespace(tmp_path, tree), HashEmbedder(), ExtractiveSummarizer(), bus)
    bus.serve(indexer)
    try:
        await call(bus, catalog.FS_WRITE, {"uri": "viking://resources/ops/backups.md", "content": GUIDE,
                                            "wait": False})
        queued = list(bus.jobs[catalog.INGEST.name])
        with pytest.raises(StoreUnavailable):
            await bus.run_jobs()
        assert tree.left == 0 and not any(c.upsert for _, _, c in bus.index)
        bus.jobs[catalog.INGEST.name] = queued  # delivered again
        await bus.run_jobs()
        rows = {c.upsert.uri for _, _, c in bus.index if c.upsert is not None}
        assert "viking://resources/ops/backups.md" in rows
    finally:
        await indexer.stop()


async def test_indexer_publishes_rows_and_the_retriever_finds_the_passage(tmp_path: Path, bus: MemoryBus) -> None:
    """Indexer to retriever through the index log: a document added is split, embedded and
    published; the retriever's replica follows the log and `find` returns it, and the assembler
    serves it in a context block (a short resource at its abstract tier)."""
    ns = Namespace(tmp_path)
    embedder, llm = HashEmbedder(), ExtractiveLLM()
    indexer = Indexer(ns, embedder, ExtractiveSummarizer(), bus)
    retriever = Retriever(ns, embedder, bus, tmp_path / ".skald", llm, None, SearchSettings(enable_intent=False))
    assembler = Assembler(ns, bus, llm)
    bus.serve(indexer, retriever, assembler)
    await retriever.start()
    try:
        added = await call(bus, catalog.RESOURCES_ADD, {"content": GUIDE, "name": "backups.md"})
        await bus.run_jobs()
        assert bus.index and all(isinstance(c, IndexChange) for _, _, c in bus.index)
        rows = {c.upsert.uri for _, _, c in bus.index if c.upsert is not None}
        assert any(u.startswith(added["root_uri"]) for u in rows)

        seq = await bus.index_last_seq()
        found = await bus.call(catalog.SEARCH_FIND, msgspec.convert(
            {"query": "how is the restore drill verified", "score_threshold": 0.0}, catalog.SEARCH_FIND.request),
            ME, 10.0, index_seq=seq)
        uris = [r["uri"] for r in found["resources"]]
        assert uris and uris[0].startswith(added["root_uri"])

        block = await bus.call(catalog.SEARCH_SEARCH, msgspec.convert(
            {"query": "restore drill row counts", "mode": "context", "score_threshold": 0.0, "max_tokens": 400},
            catalog.SEARCH_SEARCH.request), ME, 10.0, index_seq=seq)
        assert block["entries"][0]["uri"] == uris[0] and "vega cluster" in block["rendered"]
        assert re.findall(r'<memory uri="([^"]+)"', block["rendered"]) == [e["uri"] for e in block["entries"]]
    finally:
        await retriever.stop()
        await indexer.stop()
        await assembler.stop()


async def test_garbage_reaches_no_handler(tmp_path: Path, bus: MemoryBus) -> None:
    """A body the request Struct refuses is INVALID_ARGUMENT before any actor code runs; an
    operation nobody serves is UNAVAILABLE."""
    sessions = Sessions(Namespace(tmp_path), bus, "w1")
    bus.serve(sessions)
    with pytest.raises(errors.InvalidArgument):
        await bus.call(catalog.SESSIONS_ADD_MESSAGE, {"session_id": 7, "role": "user"}, ME, 5.0)  # type: ignore[arg-type]
    with pytest.raises(errors.Unavailable):
        await call(bus, catalog.SEARCH_FIND, {"query": "x"})
    assert not any(tmp_path.iterdir())  # nothing was written


async def test_a_file_the_store_cannot_read_is_named_in_the_block_and_grep_answers_unavailable(
        tmp_path: Path, bus: MemoryBus) -> None:
    """Reads the store does not answer are never passed off as missing files: a context block serves
    the entry from what the index holds and names the file in `stats.unread` (the same request a
    moment later reads it); a grep that could not read a file, and a session-start block that could
    not read the profile, answer UNAVAILABLE rather than a list of matches or a block without it."""
    ns = Namespace(tmp_path)
    embedder, llm = HashEmbedder(), ExtractiveLLM()
    indexer = Indexer(ns, embedder, ExtractiveSummarizer(), bus)
    refusing = RefusingReads(tmp_path, "/backups.md", 1)
    retriever = Retriever(Namespace(tmp_path, refusing), embedder, bus, tmp_path / ".skald", llm, None,
                          SearchSettings(enable_intent=False))
    assembler = Assembler(Namespace(tmp_path, refusing), bus, llm)
    bus.serve(indexer, retriever, assembler)
    await retriever.start()
    uri = "viking://resources/ops/backups.md"
    try:
        await call(bus, catalog.FS_WRITE, {"uri": uri, "content": GUIDE, "wait": False})
        await bus.run_jobs()
        seq = await bus.index_last_seq()
        ask = msgspec.convert({"query": "restore drill row counts", "mode": "context", "score_threshold": 0.0,
                               "max_tokens": 1000, "detail": "full"}, catalog.SEARCH_SEARCH.request)
        block = await bus.call(catalog.SEARCH_SEARCH, ask, ME, 10.0, index_seq=seq)
        assert refusing.left == 0 and block["stats"]["unread"] == [uri]
        assert block["entries"][0]["uri"] == uri and block["entries"][0]["text"]
        again = await bus.call(catalog.SEARCH_SEARCH, ask, ME, 10.0, index_seq=seq)
        assert "unread" not in again["stats"] and "nightly backups" in again["entries"][0]["text"]
        assert again["entries"][0]["detail"] == "full"

        refusing.left = 1
        grep = msgspec.convert({"uri": "viking://resources", "pattern": "restore"}, catalog.SEARCH_GREP.request)
        with pytest.raises(errors.Unavailable):
            await bus.call(catalog.SEARCH_GREP, grep, ME, 10.0)
        found = await bus.call(catalog.SEARCH_GREP, grep, ME, 10.0)
        assert [m["uri"] for m in found["matches"]] == [uri]

        profile = tmp_path / "accounts/default/user/default/memories/profile.md"
        profile.parent.mkdir(parents=True)
        profile.write_text("# Profile\nAlice, SRE, likes terse answers.\n")
        refusing.suffix, refusing.left = "/profile.md", 1
        boot = msgspec.convert({"mode": "bootstrap", "max_tokens": 1000}, catalog.SEARCH_SEARCH.request)
        with pytest.raises(errors.Unavailable):  # a session's first block is not served without its profile
            await bus.call(catalog.SEARCH_SEARCH, boot, ME, 10.0)
        assert "Alice, SRE" in (await bus.call(catalog.SEARCH_SEARCH, boot, ME, 10.0))["rendered"]
    finally:
        await retriever.stop()
        await indexer.stop()
        await assembler.stop()


async def test_stopping_the_archive_actor_waits_for_its_recovery_scan_to_end(tmp_path: Path,
                                                                             bus: MemoryBus) -> None:
    """A worker stopped while its recovery scan still reads sessions leaves no scan behind (a task
    pending as the loop closes, its reads going on against a closed store): stop returns once the
    scan has ended."""
    ns = Namespace(tmp_path)
    async with archiving(ns, bus):
        for _ in range(20):
            await committed(bus, message("user", "The boat is moored at pier nine."))
    archiver = Archiver(ns, ExtractiveLLM(), bus, worker_id="w2")
    await archiver.start()
    scan = archiver._sweep
    assert not scan.done()
    await archiver.stop()
    assert scan.done()
