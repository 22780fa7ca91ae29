"""How a client holding an API key logs in to the bus: its NATS user, password and inbox are all
derived from the key, so an agent host needs nothing but the key (the server side of the rule,
which users exist and what each may do, is `skald.runtime.bus.auth`)."""

from __future__ import annotations

import hashlib

from skald.messages import subjects


def key_digest(api_key: str) -> str:
    """SHA-256 of a key in hex: what the keys file keeps instead of the key."""
    return hashlib.sha256(api_key.encode()).hexdigest()


def bus_user(digest: str) -> str:
    """The NATS user of the key whose digest this is."""
    return "k" + digest[:16]


def client_login(api_key: str) -> dict[str, str]:
    """nats-py connect options for a client holding `api_key`: its user, password and inbox."""
    d = key_digest(api_key)
    user = bus_user(d)
    return {"user": user, "password": d, "inbox_prefix": subjects.client_inbox(user)}
