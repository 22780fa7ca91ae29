"""Who may do what on the bus: NATS users generated from the keys file.

With keys configured, every connection logs in. Workers use the worker user (the keys file's
worker secret) and may do anything. Every API key is its own NATS user, derived from the key so a
client needs nothing but its key:

    user      "k" + the first 16 hex digits of SHA-256(key)
    password  SHA-256(key) in hex (the keys file already holds it; the key itself is never stored)
    inbox     _INBOX_<user>: the only prefix its replies arrive on

and may publish requests (`<prefix>.v1.>`) and subscribe only to its own inbox and to the events
of its own account (`<prefix>.evt.acct.<token>.>`, `<prefix>.note.acct.<token>.>`; a root key: every
account). There is no anonymous user: a connection without credentials is refused. Workers keep
their deliveries, replies and inboxes under `_SKALD_WORKER`, which no client may subscribe to.

The embedded server writes this block into its config and reloads it (SIGHUP) when the keys file
changes, so a new key works and a revoked key's connections are closed within seconds; on a
cluster, `skald keys nats-config` prints the same block for each server's config
(`nats-server --signal reload` after a change).
"""

from __future__ import annotations

import hashlib
import json

from skald.messages import subjects
from skald.runtime.bus.keys import KeyRecord, KeyStore
from skald.runtime.client.login import bus_user

WORKER_USER = "skald-worker"


def _permissions(prefix: str, rec: KeyRecord) -> dict[str, object]:
    user = bus_user(rec.hash)
    token = "*" if rec.role == "root" or not rec.account else subjects.account_token(rec.account)
    return {
        "publish": {"allow": [f"{prefix}.v1.>"]},
        "subscribe": {"allow": [f"{subjects.client_inbox(user)}.>", f"{prefix}.evt.acct.{token}.>",
                                f"{prefix}.note.acct.{token}.>"]},
    }


def authorization(prefix: str, keys: KeyStore) -> str:
    """The server's `authorization` block for the keys `keys` holds now (JSON is valid NATS config)."""
    users: list[dict[str, object]] = [{"user": WORKER_USER, "password": keys.worker_secret}]
    seen: set[str] = set()
    for rec in keys.records():
        user = bus_user(rec.hash)
        if user in seen:  # two records of one key: the first decides, as in KeyStore.authenticate
            continue
        seen.add(user)
        users.append({"user": user, "password": rec.hash, "permissions": _permissions(prefix, rec)})
    return f"authorization {{\n  users = {json.dumps(users, indent=2, sort_keys=True)}\n}}\n"


def fingerprint(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()
