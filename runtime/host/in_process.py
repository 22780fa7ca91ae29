"""Requests served in the actors' own process without the bus: an actor's call to an actor of the
same worker (`call_local`), and a door of the process (`skald up --http-port`) handing a request to
the host (`request_local`). They go through the host's one invocation (decoding, identity, deadline,
typed errors, journal, metrics), so a reply is the same whichever way the request came."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Callable
from typing import Any

import msgspec

from skald.actors.kit import clock as clock_mod
from skald.actors.kit.decl import Handles
from skald.actors.kit.request import Ctx
from skald.messages import errors, subjects
from skald.runtime.client import tracing
from skald.runtime.host.encoding import encode_reply, error_reply, json_encoder
from skald.store.uri import Identity

log = logging.getLogger("skald.host")


@dataclasses.dataclass(slots=True)
class LocalMsg:
    """A request from a door of this process: what serving reads of a bus message, and the answer."""

    subject: str
    data: bytes
    headers: dict[str, str]
    reply: str = "local"
    answer: tuple[bytes, dict[str, str]] | None = None


class InProcess:
    """The in-process paths of `ActorHost` (its state and invocation are the host's own)."""

    _local: dict[str, tuple[Handles, Callable[..., Any]]]
    _op_in_flight: dict[str, int]
    _stopping: asyncio.Event
    keys: Any
    metrics: Any
    worker_id: str
    cfg: Any
    nc: Any
    local_requests: int

    def serves(self, op: str) -> bool:
        """Whether a request for `op` from an actor of this process can be served here, now."""
        local = self._local.get(op)
        if local is None or self._stopping.is_set():
            return False
        cap = local[0].concurrency
        return cap is None or self._op_in_flight.get(op, 0) < cap

    async def call_local(self, op: str, body: msgspec.Struct, identity: Identity, timeout_s: float,
                         index_seq: int = 0, into: type | None = None) -> Any:
        """An actor's request to another actor of this same process, without the two bus hops:
        the same decoding (the body goes through JSON, so validation is the wire's), deadline,
        typed errors and journal as a request from NATS, and the result as the caller would have
        decoded it from the reply (or, asked `into` a type, a copy of it as that type: no JSON text
        in between; the result itself when the handler declares `fresh_result`). A handler at its
        own concurrency cap is left to the bus."""
        decl, fn = self._local[op]
        try:
            req = self._decoder(decl.request, False).decode(json_encoder.encode(body))
        except msgspec.ValidationError as e:
            raise errors.InvalidArgument(str(e), {"type": decl.request.__name__}) from e
        if self.keys.enabled:  # the callee sees a worker's hop, as it would over the bus
            identity = dataclasses.replace(identity, role="root" if identity.is_root else "worker")
        timeout = max(0.001, min(decl.timeout_s, timeout_s))
        ctx = Ctx(identity, time.monotonic() + timeout, index_seq)
        at = clock_mod.NOW.get() or time.time()
        t0 = time.perf_counter()
        self._op_in_flight[op] = self._op_in_flight.get(op, 0) + 1
        hdrs: dict[str, str] = {}
        tracing.inject(hdrs)  # the local hop's span is the child of the caller's, as over the bus
        with tracing.serve(decl.op, hdrs, worker=self.worker_id) as span:
            try:
                reply = await self._invoke(decl, fn, req, ctx, at, timeout)
            except BaseException as e:  # noqa: BLE001 - as on the bus: a crash is an INTERNAL reply
                if isinstance(e, asyncio.CancelledError):
                    raise
                log.exception("handler crashed on local %s", decl.op)
                reply = error_reply("INTERNAL", f"internal error ({type(e).__name__})")
            finally:
                self._op_in_flight[op] -= 1
            code = reply.error.code if reply.error is not None else "OK"
            tracing.outcome(span, code)
        self.metrics.answered(decl.op, code, time.perf_counter() - t0)
        if reply.error is not None:
            raise errors.from_wire(reply.error.code, reply.error.message, reply.error.details)
        if into is msgspec.Raw:
            return msgspec.Raw(json_encoder.encode(reply.result))
        if into is not None:
            if decl.fresh_result and type(reply.result) is into:
                return reply.result  # nobody else holds it: no copy needed
            return msgspec.convert(msgspec.to_builtins(reply.result), into)
        return msgspec.json.decode(json_encoder.encode(reply.result))

    async def request_local(self, op: str, data: bytes, headers: dict[str, str]) -> tuple[bytes, dict[str, str]] | None:
        """A request from a door of this process (the HTTP gateway `skald up --http-port` runs
        beside the actors) served without the bus: the same checks, decoding, identity (keys
        included), deadline, journal, metrics and reply bytes as a request from NATS. None when no
        actor of this process serves `op` (the caller goes over the bus)."""
        local = self._local.get(op)
        if local is None or self._stopping.is_set():
            return None
        msg = LocalMsg(subjects.request(self.cfg.prefix, op), data, headers)
        task = await self._admit(msg, *local)
        if task is not None:
            await asyncio.shield(task)  # a caller that goes away does not cut the handler short, as on the bus
        self.local_requests += 1
        # Served here, whatever happened: never None, or the caller would send the request again on the bus.
        none = error_reply("INTERNAL", "no reply was made")
        return msg.answer or encode_reply(msg.headers, none, [], self.nc.max_payload)
