"""The actor host: binds declared handlers to subjects and work queues, and makes every request
get exactly one reply.

Per request: size check, decode into the declared Struct (JSON or msgpack), identity from
headers, a deadline, the handler in its own task under a bounded semaphore (nats-py runs a
subscription's callbacks one at a time, so awaiting inside the callback would serialise the
worker), then a typed reply. Nothing a client sends can raise out of here. An actor's request to
an actor of the same process (`call_local`) takes the same path minus the bus.

The bus path and the in-process path (`in_process.py`) share one invocation here (deadline, typed
errors, journal), so the rules a reply follows are in one place; who is asking is `identity.py`, a
reply's bytes are `encoding.py`.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import hashlib
import logging
import os
import socket
import time
import uuid
from collections.abc import Callable
from typing import Any

import msgspec
from nats import micro
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg

from skald.actors.kit import clock as clock_mod
from skald.actors.kit.decl import Consumes, Handles, declarations
from skald.actors.kit.request import Ctx
from skald.messages import catalog, errors, subjects
from skald.messages.envelope import (
    CONTENT_TYPE,
    H_INDEX_SEQ,
    H_TIMEOUT_MS,
    MSGPACK,
    Reply,
)
from skald.messages.journal import JournalEntry
from skald.messages.system import Empty, HealthResult, WhoAmIResult, WorkerInfo
from skald.runtime import __version__
from skald.runtime.bus.keys import KeyStore
from skald.runtime.bus.outbox import Outbox
from skald.runtime.bus.streams import RETRY_AFTER_MS, TRANSIENT
from skald.runtime.client import tracing
from skald.runtime.host.config import Config
from skald.runtime.host.encoding import encode_reply, error_reply
from skald.runtime.host.identity import authenticate, ident_key, request_clock
from skald.runtime.host.in_process import InProcess, LocalMsg
from skald.runtime.host.metrics import Metrics
from skald.runtime.host.workqueue import consume
from skald.store.treeport import StoreUnavailable
from skald.store.uri import Identity

log = logging.getLogger("skald.host")
STOP_GRACE_S = 10.0  # how long a stopping worker lets requests in flight finish
# The caller's own mistakes (logged at INFO); every other failed reply is a WARNING.
QUIET_CODES = frozenset({"INVALID_ARGUMENT", "NOT_FOUND", "CONFLICT", "UNAUTHENTICATED", "PERMISSION_DENIED"})


def new_worker_id(cfg: Config) -> str:
    raw = cfg.worker_id or f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    return "".join(c if c.isalnum() or c in "-_" else "-" for c in raw)


class ActorHost(InProcess):
    """Binds actors' declared handlers to subjects and work queues; every request gets exactly one reply."""

    def __init__(self, nc: NATS, cfg: Config, actors: dict[str, object], worker_id: str = "",
                 keys: KeyStore | None = None, metrics: Metrics | None = None) -> None:
        self.metrics = metrics or Metrics()
        self.metrics.watch(lambda: self.actors, lambda: self._in_flight)
        self.nc = nc
        self.keys = keys or KeyStore(None)
        self._direct = f"{cfg.prefix}.direct."
        self.cfg = cfg
        self.actors = actors
        self.worker_id = worker_id or new_worker_id(cfg)
        self._subs: list[Any] = []
        self._tasks: set[asyncio.Task[Any]] = set()
        self._loops: list[asyncio.Task[Any]] = []
        self._in_flight = 0
        self._op_in_flight: dict[str, int] = {}  # per operation, for handlers declaring `concurrency`
        self._handled = 0
        self._started = time.time()
        self._stopping = asyncio.Event()
        self._decoders: dict[tuple[type, bool], Any] = {}
        self._local: dict[str, tuple[Handles, Callable[..., Any]]] = {}  # op -> this process's handler
        self.local_requests = 0  # requests a door of this process had served without the bus
        self.outbox = Outbox(nc, cfg.data_dir / ".skald" / "outbox")

    # ----- lifecycle -------------------------------------------------------------------

    async def start(self) -> None:
        self.outbox.start()
        for name, actor in self.actors.items():
            hook = getattr(actor, "start", None)
            if hook is not None:
                await hook()
            for decl, fn in declarations(actor):
                if isinstance(decl, Handles):
                    self._local[decl.op] = (decl, fn)
                    subject = (subjects.internal if decl.internal else subjects.request)(self.cfg.prefix, decl.op)
                    sub = await self.nc.subscribe(subject, queue=name, cb=self._callback(decl, fn))
                    self._subs.append(sub)
                    # The same handler addressed to this worker alone (owners receive forwarded work).
                    direct = f"{self.cfg.prefix}.direct.{self.worker_id}.{decl.op}"
                    self._subs.append(await self.nc.subscribe(direct, cb=self._callback(decl, fn)))
                    # A retriever of a sharded index: what the other shards ask of this shard.
                    if (shard := getattr(actor, "serves_shard", None)) is not None:
                        self._subs.append(await self.nc.subscribe(subjects.shard_request(self.cfg.prefix, shard,
                                                                                         decl.op),
                                                                  queue=name, cb=self._callback(decl, fn)))
                elif isinstance(decl, Consumes):
                    for _ in range(decl.concurrency):
                        self._loops.append(asyncio.create_task(consume(self.nc, self.cfg, self._stopping, decl, fn,
                                                                       self.metrics),
                                                          name=f"consume-{decl.queue}"))
        wdecl = Handles(catalog.SYSTEM_WHOAMI.name, Empty, 5.0)
        self._subs.append(await self.nc.subscribe(subjects.request(self.cfg.prefix, catalog.SYSTEM_WHOAMI.name),
                                                  queue="system", cb=self._callback(wdecl, self._whoami)))
        health = subjects.request(self.cfg.prefix, catalog.SYSTEM_HEALTH.name)
        hdecl = Handles(catalog.SYSTEM_HEALTH.name, Empty, 5.0)
        self._subs.append(await self.nc.subscribe(health, queue="system", cb=self._callback(hdecl, self._health)))
        # Each worker also answers on its own subject, so an operator (or a test) can ask them all.
        own = f"{self.cfg.prefix}.direct.{self.worker_id}.{catalog.SYSTEM_HEALTH.name}"
        self._subs.append(await self.nc.subscribe(own, cb=self._callback(hdecl, self._health)))
        await self._announce()
        await self.nc.flush()

    async def _announce(self) -> None:
        """NATS service discovery (`nats micro ls`, `$SRV.PING|INFO|STATS.skald`): each worker is an
        instance of service `skald` whose metadata names its prefix, worker id, actors and health
        subject. Its operations are not registered as micro endpoints: they are served by this host
        (queue group per actor, typed envelope, deadlines, keys), which micro's handlers would bypass."""
        try:
            self._micro = await micro.add_service(
                self.nc, name="skald", version=__version__,
                description="Skald context engine worker (operations on <prefix>.v1.<op>)",
                metadata={"prefix": self.cfg.prefix, "worker_id": self.worker_id,
                          "actors": ",".join(sorted(self.actors)),
                          "health": f"{self.cfg.prefix}.direct.{self.worker_id}.{catalog.SYSTEM_HEALTH.name}"})
        except Exception as e:  # noqa: BLE001 - discovery is a convenience; the worker serves without it
            log.warning("NATS service discovery not announced (%s)", type(e).__name__)
            self._micro = None

    async def stop(self) -> None:
        """Stop taking work, let requests in flight finish, then stop the actors."""
        self._stopping.set()
        for sub in self._subs:
            with contextlib.suppress(Exception):
                await sub.unsubscribe()
        if self._tasks:
            # In-flight requests get a grace period, not their whole deadline: a drain that waited
            # out a 300 s commit would outlive any supervisor's patience (and a SIGTERM's meaning).
            _, late = await asyncio.wait(list(self._tasks), timeout=min(self.cfg.request_timeout_s, STOP_GRACE_S))
            if late:
                log.warning("stopping with %d request(s) still running (%s): cancelled", len(late),
                            ", ".join(sorted({t.get_name() for t in late})))
                for t in late:
                    t.cancel()
                await asyncio.wait(late, timeout=2.0)
        for t in self._loops:
            t.cancel()
        await asyncio.gather(*self._loops, return_exceptions=True)
        await self.outbox.stop()
        if getattr(self, "_micro", None) is not None:
            with contextlib.suppress(Exception):
                await self._micro.stop()
        for name, actor in self.actors.items():
            hook = getattr(actor, "stop", None)
            if hook is not None:
                # An actor whose stop saves state in proportion to what it holds (the retriever's
                # index snapshot) says how long that takes.
                grace = max(STOP_GRACE_S, getattr(actor, "stop_grace_s", lambda: 0.0)())
                try:
                    await asyncio.wait_for(hook(), grace)
                except TimeoutError:
                    log.warning("actor %s did not stop within %.0fs; leaving it", name, grace)
                except Exception:  # noqa: BLE001 - stopping goes on for the other actors
                    log.exception("actor %s failed to stop cleanly", name)

    def info(self) -> WorkerInfo:
        return WorkerInfo(worker_id=self.worker_id, actors=sorted(self.actors), in_flight=self._in_flight,
                          handled=self._handled, started_at=self._started)

    async def _whoami(self, req: Empty, ctx: Ctx) -> WhoAmIResult:
        i = ctx.identity
        return WhoAmIResult(account=i.account, user=i.user, agent=i.agent, peer=i.peer, role=i.role,
                            account_token=subjects.account_token(i.account))

    async def _health(self, req: Empty, ctx: Ctx) -> HealthResult:
        actors: dict[str, Any] = {}
        for name, actor in self.actors.items():
            probe = getattr(actor, "health", None)
            actors[name] = probe() if probe else {"status": "ok"}
        journal = {"outbox": self.outbox.backlog(), "parked": self.outbox.parked, "drained": self.outbox.drained}
        return HealthResult(status="ok", version=__version__, actors=actors, worker=self.info(), journal=journal)

    # ----- request / reply -------------------------------------------------------------

    def _decoder(self, typ: type, msgpack: bool) -> Any:
        key = (typ, msgpack)
        dec = self._decoders.get(key)
        if dec is None:
            dec = msgspec.msgpack.Decoder(typ) if msgpack else msgspec.json.Decoder(typ)
            self._decoders[key] = dec
        return dec

    def _callback(self, decl: Handles, fn: Callable[..., Any]) -> Callable[[Msg], Any]:
        async def on_msg(msg: Msg) -> None:
            await self._admit(msg, decl, fn)

        return on_msg

    async def _admit(self, msg: Msg | LocalMsg, decl: Handles, fn: Callable[..., Any]) -> asyncio.Task[None] | None:
        """The request's task, or None when the worker or the operation is at capacity (answered
        UNAVAILABLE here)."""
        if self._in_flight >= self.cfg.max_concurrency:
            self.metrics.requests.labels(decl.op, "UNAVAILABLE").inc()
            await self._reply(msg, error_reply("UNAVAILABLE", "worker at capacity; retry",
                                          {"max_concurrency": self.cfg.max_concurrency}), [])
            return None
        running = self._op_in_flight.get(decl.op, 0)
        if decl.concurrency is not None and running >= decl.concurrency:
            self.metrics.requests.labels(decl.op, "UNAVAILABLE").inc()
            await self._reply(msg, error_reply("UNAVAILABLE", f"{decl.op} at capacity on this worker; retry",
                                          {"concurrency": decl.concurrency, "op": decl.op}), [])
            return None
        self._in_flight += 1
        self._op_in_flight[decl.op] = running + 1
        task = asyncio.create_task(self._serve(msg, decl, fn), name=decl.op)
        self._tasks.add(task)
        task.add_done_callback(lambda t, op=decl.op: self._done(t, op))
        return task

    def _done(self, task: asyncio.Task[Any], op: str) -> None:
        self._tasks.discard(task)
        self._in_flight -= 1
        self._op_in_flight[op] -= 1
        self._handled += 1

    async def _serve(self, msg: Msg | LocalMsg, decl: Handles, fn: Callable[..., Any]) -> None:
        ctx: Ctx | None = None
        t0 = time.perf_counter()
        with tracing.serve(decl.op, msg.headers, worker=self.worker_id) as span:
            try:
                reply, ctx = await self._run(msg, decl, fn)
            except BaseException as e:  # noqa: BLE001 - the one place nothing may escape
                log.exception("handler crashed on %s", msg.subject)
                reply = error_reply("INTERNAL", f"internal error ({type(e).__name__})")
            await self._reply(msg, reply, ctx.deprecated if ctx else [])
            code = reply.error.code if reply.error is not None else "OK"
            tracing.outcome(span, code)
        took = time.perf_counter() - t0
        self.metrics.answered(decl.op, code, took)
        level = logging.DEBUG if code == "OK" else logging.INFO if code in QUIET_CODES else logging.WARNING
        if log.isEnabledFor(level):
            log.log(level, "request %s", "ok" if code == "OK" else "failed", extra={
                "worker": self.worker_id, "op": decl.op, "code": code, "duration_ms": round(took * 1000, 3),
                "account": ctx.identity.account if ctx else ""})

    async def _run(self, msg: Msg | LocalMsg, decl: Handles, fn: Callable[..., Any]) -> tuple[Reply, Ctx | None]:
        hdrs = msg.headers or {}
        data = msg.data or b""
        if len(data) > self.cfg.max_body_bytes:
            return error_reply("INVALID_ARGUMENT", "request body too large",
                          {"max_bytes": self.cfg.max_body_bytes, "bytes": len(data)}), None
        try:
            ident = authenticate(self.keys, self._direct, msg.subject, decl, hdrs)
        except errors.SkaldError as e:
            return error_reply(e.code, e.message, e.details), None
        msgpack = hdrs.get(CONTENT_TYPE, "").startswith(MSGPACK)
        if not data.strip():
            data = b"\x80" if msgpack else b"{}"
        try:
            req = self._decoder(decl.request, msgpack).decode(data)
        except msgspec.ValidationError as e:
            return error_reply("INVALID_ARGUMENT", str(e), {"type": decl.request.__name__}), None
        except msgspec.DecodeError as e:
            kind = "msgpack" if msgpack else "JSON"
            return error_reply("INVALID_ARGUMENT", f"body is not valid {kind}: {e}"), None
        timeout = decl.timeout_s
        if (raw := hdrs.get(H_TIMEOUT_MS)) is not None:
            with contextlib.suppress(ValueError):
                timeout = max(0.001, min(timeout, int(raw) / 1000))
        seq = 0
        if (raw := hdrs.get(H_INDEX_SEQ)) is not None:
            with contextlib.suppress(ValueError):
                seq = max(0, int(raw))
        ctx = Ctx(ident, time.monotonic() + timeout, seq, forwarded=hdrs.get("Skald-Forwarded") == "1")
        return await self._invoke(decl, fn, req, ctx, request_clock(hdrs, ident), timeout), ctx

    async def _invoke(self, decl: Handles, fn: Callable[..., Any], req: Any, ctx: Ctx, at: float,
                      timeout: float) -> Reply:
        """The handler under its deadline, its failures as typed replies, its journal event."""
        ident = ctx.identity
        body = msgspec.json.encode(req) if decl.journal else b""
        key = hashlib.sha1(b"|".join((decl.op.encode(), ident_key(ident), body, repr(at).encode()))).hexdigest()
        t_now, t_key = clock_mod.NOW.set(at), clock_mod.REQUEST_KEY.set(key)
        early: list[asyncio.Task[None]] = []
        if decl.journal:
            def decided() -> None:
                if not early and not ctx.relayed:
                    early.append(asyncio.create_task(self._journal(decl.op, ident, body, at, key, None)))
            ctx.decided = decided
        try:
            async with asyncio.timeout(timeout):
                result = await fn(req, ctx)
        except (*TRANSIENT, StoreUnavailable) as e:  # the bus or JetStream busy for a moment: worth a retry
            log.warning("%s: transient bus failure (%s: %s); answered UNAVAILABLE", decl.op, type(e).__name__, e)
            return error_reply("UNAVAILABLE", f"the bus is not answering right now ({type(e).__name__}); retry",
                          {"error": type(e).__name__, "retry_after_ms": RETRY_AFTER_MS})
        except TimeoutError:
            return error_reply("DEADLINE_EXCEEDED", f"no answer within {timeout:.3f}s", {"timeout_s": timeout})
        except errors.SkaldError as e:
            return error_reply(e.code, e.message, e.details)
        except OSError as e:
            if e.errno not in (errno.ENOSPC, errno.EDQUOT):
                raise
            log.error("%s: the disk is full (%s); answered UNAVAILABLE", decl.op, e)
            return error_reply("UNAVAILABLE", "the disk is full: nothing was stored; retry once space is freed",
                          {"reason": "no_space", "retry_after_ms": RETRY_AFTER_MS})
        finally:
            clock_mod.NOW.reset(t_now)
            clock_mod.REQUEST_KEY.reset(t_key)
            if early:  # decided: journaled whatever the handler did after, before any reply
                await early[0]
        if decl.journal and not ctx.relayed and not early:
            await self._journal(decl.op, ident, body, at, key, result)
        return Reply(status="ok", result=result)

    async def _journal(self, op: str, ident: Identity, body: bytes, at: float, key: str, result: Any) -> None:
        """Every accepted write is an event (`<prefix>.evt.write.<op>`): the request as it was
        applied, who made it and when. Replaying these in order rebuilds the state."""
        ids = {}
        mid = getattr(result, "message_id", None) or (result.get("message_id") if isinstance(result, dict) else None)
        if mid:
            ids["message_id"] = mid
        entry = JournalEntry(op=op, account=ident.account, user=ident.user, agent=ident.agent, peer=ident.peer,
                             at=at, body=msgspec.Raw(body), ids=ids)
        # Acknowledged by JetStream before the reply, or parked in the outbox (a file) and published
        # later: the journal is complete by construction. (add_message has its own, batched.)
        await self.outbox.publish(subjects.event(self.cfg.prefix, f"write.{op}"), msgspec.json.encode(entry),
                                  "w-" + key)

    async def _reply(self, msg: Msg | LocalMsg, reply: Reply, deprecated: list[str]) -> None:
        if not msg.reply:
            return
        body, headers = encode_reply(msg.headers, reply, deprecated, self.nc.max_payload)
        if isinstance(msg, LocalMsg):
            msg.answer = (body, headers)
            return
        with contextlib.suppress(Exception):
            await self.nc.publish(msg.reply, body, headers=headers)
