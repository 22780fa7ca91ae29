"""Who a request comes from and when it was made: the identity a request's headers carry, checked
against the keys file when keys are on, and the time it is applied at (a replay's original)."""

from __future__ import annotations

import contextlib
import math
import time

from skald.actors.kit.decl import Handles
from skald.messages import errors
from skald.messages.envelope import H_ACCOUNT, H_AGENT, H_API_KEY, H_CLOCK, H_PEER, H_ROOT, H_USER, H_WORKER
from skald.runtime.bus.keys import KeyStore
from skald.store.uri import Identity, check_name


def ident_key(ident: Identity) -> bytes:
    """The identity's part of a write's idempotency key."""
    return f"{ident.account}/{ident.user}/{ident.agent}/{ident.peer or ''}".encode()


def request_clock(hdrs: dict[str, str], ident: Identity) -> float:
    """The request's time: now, or on a replay the original's (`Skald-Clock`), which only
    callers that may rewrite history send: local deployments, root keys and workers."""
    raw = hdrs.get(H_CLOCK)
    if raw is not None and ident.role in ("local", "root", "worker"):
        with contextlib.suppress(ValueError):
            at = float(raw)
            if math.isfinite(at) and at > 0:
                return at
    return time.time()


def identity(hdrs: dict[str, str | None], is_root: bool = False, role: str = "local") -> Identity:
    """The identity the headers name (each name checked), defaults where they name none."""
    account = check_name("account", hdrs.get(H_ACCOUNT) or "default")
    user = check_name("user", hdrs.get(H_USER) or "default")
    agent = check_name("agent", hdrs.get(H_AGENT) or "default")
    peer = hdrs.get(H_PEER) or None
    if peer is not None:
        check_name("peer", peer)
    return Identity(account=account, user=user, agent=agent, peer=peer, is_root=is_root, role=role)


def authenticate(keys: KeyStore, direct_prefix: str, subject: str, decl: Handles, hdrs: dict[str, str]) -> Identity:
    """Who is asking. Without keys configured, the identity headers say so. With keys, a public
    subject needs a valid API key (checked before the body is even decoded, so a refused
    caller learns nothing about the request), and an actor-to-actor hop needs the workers'
    secret, which also vouches for the identity the first hop established."""
    if not keys.enabled:
        return identity(hdrs)
    if decl.internal or subject.startswith(direct_prefix):
        if not keys.is_worker(hdrs.get(H_WORKER)):
            raise errors.Unauthenticated("this subject is for workers")
        root = hdrs.get(H_ROOT) == "1"
        return identity(hdrs, is_root=root, role="root" if root else "worker")
    rec = keys.authenticate(hdrs.get(H_API_KEY))
    if rec is None:
        raise errors.Unauthenticated("a valid API key is required (Skald-Api-Key header)")
    if rec.role == "root":
        return identity(hdrs, is_root=True, role="root")
    pinned = {H_ACCOUNT: rec.account} if rec.role == "admin" else {H_ACCOUNT: rec.account, H_USER: rec.user}
    for header, value in pinned.items():
        if hdrs.get(header) not in (None, "", value):
            raise errors.PermissionDenied(f"this key acts only as {header.split('-')[-1].lower()} {value!r}")
    return identity({**hdrs, **pinned}, role=rec.role)
