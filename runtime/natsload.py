"""nats-py imported without aiohttp, which it needs only for `ws://` servers.

nats-py's transport module imports aiohttp for its websocket transport, and aiohttp's connector
builds two TLS contexts as it is imported (the system's CA certificates read and parsed): 0.27 s
of every `skald` process's start on this machine, a quarter of a worker's time to its ready line
and about half of a CLI command's, for a transport Skald's own processes use only when given a
`ws://` URL. The runtime package imports nats here, with aiohttp hidden for that one import, and
leaves nats-py's transport a stand-in that imports aiohttp the first time a websocket connection
asks for it: a `ws://` URL works as before, in Skald and in any other nats-py client of the
process. Where nats or aiohttp is already imported, nothing is done.
"""

from __future__ import annotations

import importlib
import sys
from types import ModuleType
from typing import Any


class OnFirstUse:
    """A module imported when first touched: truth (nats-py's `if not aiohttp:` check) or any
    attribute. False, as the missing module's None was, when it cannot be imported."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._module: ModuleType | None = None

    def _load(self) -> ModuleType:
        if self._module is None:
            self._module = importlib.import_module(self._name)
        return self._module

    def __bool__(self) -> bool:
        try:
            self._load()
        except ImportError:
            return False
        return True

    def __getattr__(self, attr: str) -> Any:
        return getattr(self._load(), attr)


def import_nats() -> None:
    """nats-py imported with aiohttp deferred to a websocket connection's first use."""
    if "nats" in sys.modules or "aiohttp" in sys.modules:
        return
    sys.modules["aiohttp"] = None  # type: ignore[assignment]  # `import aiohttp` raises ImportError
    try:
        import nats.aio.transport as transport
    finally:
        del sys.modules["aiohttp"]
    if transport.aiohttp is None:
        setattr(transport, "aiohttp", OnFirstUse("aiohttp"))  # noqa: B010 - typed as the module in nats-py
