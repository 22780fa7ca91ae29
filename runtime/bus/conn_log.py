"""What a worker's NATS connections say about themselves: one line when the connection goes (with
why), one when it is back, never a traceback. nats-py's own default logs every failed reconnect
attempt with its stack, twice a second while a server is down (and at every shutdown where the
server went first)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

log = logging.getLogger("skald.bus")


class Watched:
    """The connection the callbacks speak of, once made: a close or drain is not a loss."""

    nc: Any = None

    def closing(self) -> bool:
        return self.nc is not None and (self.nc.is_closed or self.nc.is_draining)


def callbacks(name: str, watched: Watched | None = None) -> dict[str, Callable[..., Awaitable[None]]]:
    """`error_cb`, `disconnected_cb` and `reconnected_cb` for `nats.connect` of connection `name`:
    the first error after a loss is logged as one line, the rest until it is back are not, and
    nothing while the connection is being closed on purpose."""
    state: dict[str, Any] = {"down": False, "told": False}
    quiet = watched.closing if watched is not None else (lambda: False)

    async def error_cb(e: Exception) -> None:
        if (state["down"] and state["told"]) or quiet():
            return
        state["told"] = True
        log.warning("%s: NATS connection error: %s", name, f"{type(e).__name__}: {e}".rstrip(": "))

    async def disconnected_cb() -> None:
        if not state["down"] and not quiet():
            state["down"], state["told"] = True, False
            log.warning("%s: NATS connection lost; reconnecting", name)

    async def reconnected_cb() -> None:
        state["down"], state["told"] = False, False
        log.info("%s: NATS connection back", name)

    return {"error_cb": error_cb, "disconnected_cb": disconnected_cb, "reconnected_cb": reconnected_cb}
