"""How subjects are built from a prefix and a name. The prefix (`skald`) is configurable; the names of
operations and work queues are spelled in `catalog.py` only."""

from __future__ import annotations

import hashlib

# Workers' inboxes, JetStream deliveries and replies live under this prefix; no client may
# subscribe to it. Each client key gets its own `_INBOX_<user>` (see runtime/bus/auth.py).
WORKER_INBOX = "_SKALD_WORKER"


def client_inbox(bus_user: str) -> str:
    return f"_INBOX_{bus_user}"


def account_token(account: str) -> str:
    """An account as one subject token (account names may hold '.', which subjects cannot)."""
    return "a" + hashlib.sha1(account.encode()).hexdigest()[:16]


def ingest_done(account: str, job_id: str) -> str:
    """Event name of an ingest job's outcome, under its account's subjects."""
    return f"acct.{account_token(account)}.ingest.done.{job_id}"


def ingest_queued(account: str, job_id: str) -> str:
    """Event name of an ingest job whose caller did not wait for it to end (so it can be asked for)."""
    return f"acct.{account_token(account)}.ingest.queued.{job_id}"


def ingest_progress(account: str, job_id: str) -> str:
    """Note name of an ingest job's progress, under its account's subjects."""
    return f"acct.{account_token(account)}.ingest.progress.{job_id}"


def request(prefix: str, op: str) -> str:
    """Request subject of an operation: `skald.v1.search.find`."""
    return f"{prefix}.v1.{op}"


def internal(prefix: str, op: str) -> str:
    """Subject of an actor-to-actor operation: `skald.internal.search.candidates`."""
    return f"{prefix}.internal.{op}"


# JetStream names (streams are created by the runtime; subjects live under the prefix).
STREAM_WORK = "SKALD_WORK"
STREAM_INDEX = "SKALD_INDEX"
STREAM_EVENTS = "SKALD_EVENTS"


def work(prefix: str, queue: str) -> str:
    return f"{prefix}.work.{queue}"


def index_row(prefix: str, row_key: str, shard: int | None = None) -> str:
    """One subject per index row, so the stream keeps exactly the latest state of each row; in a
    sharded index, under its shard's token, so a shard's replicas follow only its rows."""
    return f"{prefix}.index.row.{row_key}" if shard is None else f"{prefix}.index.row.s{shard}.{row_key}"


def index_rows(prefix: str, shard: int | None = None) -> str:
    """What a replica follows: every row, or one shard's."""
    return f"{prefix}.index.row.>" if shard is None else f"{prefix}.index.row.s{shard}.>"


def shard_request(prefix: str, shard: int, op: str) -> str:
    """A request for one shard of the index, answered by that shard's retrievers alone. Under
    `direct.` (a token no worker id can be: `~` is not in one), so only workers may send it."""
    return f"{prefix}.direct.~shard{shard}.{op}"


def usage_token(account: str, uri: str) -> str:
    """A node of an account as one subject token (its use counter's)."""
    return hashlib.sha1(f"{account}\x00{uri}".encode()).hexdigest()


def usage(prefix: str, token: str) -> str:
    """One counter subject per used node (a JetStream counter: its last message holds the total)."""
    return f"{prefix}.usage.{token}"


def event(prefix: str, name: str) -> str:
    return f"{prefix}.evt.{name}"


def note(prefix: str, name: str) -> str:
    """Core NATS, not stored: progress and other things nobody needs to replay."""
    return f"{prefix}.note.{name}"
