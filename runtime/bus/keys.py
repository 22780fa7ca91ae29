"""API keys and roles.

A keys file (`SKALD_KEYS_FILE`, JSON) holds one record per key: its id, the SHA-256 of the key
(never the key), its role and what it is pinned to, plus the workers' shared secret:

    {"version": 1, "worker_secret": "...", "keys": [
      {"id": "k1a2b3", "hash": "<sha256 hex>", "role": "root"},
      {"id": "k4d5e6", "hash": "...", "role": "admin", "account": "acme"},
      {"id": "k7f8a9", "hash": "...", "role": "user", "account": "acme", "user": "alice"}]}

Keys are 256-bit random tokens, so one SHA-256 is enough to store them (no password stretching
is needed for a secret nobody chose). A presented key is hashed and compared with every record
in constant time, so the time taken says nothing about which record came close.

    root   acts for any account and user (identity headers choose), and sees every user's space
    admin  pinned to its account; acts for any user in it
    user   pinned to its account and user; identity headers may only repeat them
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from skald.runtime.client.login import key_digest
from skald.store.tree import write_atomic_sync

ROLES = ("root", "admin", "user")
FIELDS = ("id", "hash", "role", "account", "user")
PREFIX = "sk_"


@dataclass(frozen=True, slots=True)
class KeyRecord:
    """One API key in the keys file: its id, the digest of the key, its role and what it is pinned to."""

    id: str
    hash: str
    role: str
    account: str | None = None
    user: str | None = None




def new_key() -> str:
    return PREFIX + secrets.token_urlsafe(32)


class KeyStore:
    """The keys a worker accepts; re-read when the file changes (checked at most once a second)."""

    def __init__(self, path: Path | None, root_key: str = "", worker_secret: str = "") -> None:
        self.path = path
        self._env_root = [KeyRecord(id="env-root", hash=key_digest(root_key), role="root")] if root_key else []
        # Workers configured with the same root key and no file agree on a secret derived from it.
        self._env_secret = worker_secret or (
            hmac.new(root_key.encode(), b"skald-worker", hashlib.sha256).hexdigest() if root_key else "")
        self._records: list[KeyRecord] = []
        self.worker_secret = worker_secret
        self._mtime = -1.0
        self._checked = 0.0
        self.reload(force=True)

    @property
    def enabled(self) -> bool:
        return bool(self._env_root or self._records or self.path)

    def reload(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._checked < 1.0:
            return
        self._checked = now
        if self.path is None:
            return
        try:
            mtime = self.path.stat().st_mtime
        except FileNotFoundError:
            self._records, self._mtime = [], -1.0
            return
        if mtime == self._mtime and not force:
            return
        data = load(self.path)
        self._records = [KeyRecord(**{k: r.get(k) for k in FIELDS})
                         for r in data.get("keys", []) if r.get("role") in ROLES and r.get("hash")]
        self.worker_secret = self._env_secret or str(data.get("worker_secret", ""))
        self._mtime = mtime

    def records(self) -> list[KeyRecord]:
        """Every key accepted now (the root key from the environment first)."""
        self.reload()
        return [*self._env_root, *self._records]

    def authenticate(self, presented: str | None) -> KeyRecord | None:
        """The record of a presented key, or None; the same work whatever is presented."""
        self.reload()
        h = key_digest(presented or "")
        found: KeyRecord | None = None
        for rec in (*self._env_root, *self._records):
            if hmac.compare_digest(h, rec.hash) and found is None:
                found = rec
        return found if presented else None

    def is_worker(self, token: str | None) -> bool:
        self.reload()
        return bool(self.worker_secret) and hmac.compare_digest((token or "").encode(), self.worker_secret.encode())


def load(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return {"version": 1, "worker_secret": "", "keys": []}
    if not isinstance(data, dict):
        raise ValueError(f"{path}: not a keys file")
    return data


def save(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic_sync(path, json.dumps(data, indent=2, sort_keys=True).encode())
    os.chmod(path, 0o600)


def add(path: Path, role: str, account: str | None = None, user: str | None = None) -> tuple[str, KeyRecord]:
    """Create a key; returns the key (shown once) and its record. Initialises the file if needed."""
    if role not in ROLES:
        raise ValueError(f"role must be one of {', '.join(ROLES)}")
    if role in ("admin", "user") and not account:
        raise ValueError(f"an {role} key needs an account")
    if role == "user" and not user:
        raise ValueError("a user key needs a user")
    data = load(path)
    data.setdefault("version", 1)
    if not data.get("worker_secret"):
        data["worker_secret"] = secrets.token_urlsafe(32)
    key = new_key()
    rec = KeyRecord(id="k" + secrets.token_hex(4), hash=key_digest(key), role=role,
                    account=account if role != "root" else None, user=user if role == "user" else None)
    data.setdefault("keys", []).append({f: getattr(rec, f) for f in FIELDS if getattr(rec, f) is not None})
    save(path, data)
    return key, rec


def revoke(path: Path, key_id: str) -> bool:
    data = load(path)
    keys = data.get("keys", [])
    kept = [k for k in keys if k.get("id") != key_id]
    if len(kept) == len(keys):
        return False
    data["keys"] = kept
    save(path, data)
    return True
