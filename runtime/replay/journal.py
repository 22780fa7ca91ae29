"""Record the write journal of a deployment and replay it into another.

    skald replay record --out journal.jsonl          # every accepted write, in stream order
    skald replay apply --in journal.jsonl --nats-url nats://other:4222

Each journal entry is re-sent as the request it was, with the original identity and the
original acceptance time (`Skald-Clock`), and with the ids the original assigned (a message's
id) pinned; commits wait for their background summary so the replay is sequential. Job and
session ids derive from the request and its clock, memory names from their content, message
ids from their position, so the replayed deployment answers as the original did.

Model answers are in the journal too (`model.output` entries, from `<prefix>.evt.model.output.*`):
`apply` puts them into the target's event log before the first write, so Phase 2 and model-written
abstracts are re-applied from the log, byte for byte, with no model reachable.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
from nats.aio.client import Client as NATS
from nats.js.errors import NotFoundError

from skald.messages import catalog, errors
from skald.messages.envelope import H_ACCOUNT, H_AGENT, H_API_KEY, H_CLOCK, H_PEER, H_TIMEOUT_MS, H_USER
from skald.messages.journal import JournalEntry, ModelOutput
from skald.messages.sessions import MessagesAdded
from skald.runtime.bus.streams import stream_name
from skald.runtime.models import model_log
from skald.runtime.models.model_log import EVENT as MODEL_EVENT

_dec = msgspec.json.Decoder(JournalEntry)
_added = msgspec.json.Decoder(MessagesAdded)
_model = msgspec.json.Decoder(ModelOutput)
MODEL_OP = MODEL_EVENT


async def record(nc: NATS, prefix: str, *, after: int = 0, upto: int | None = None) -> list[JournalEntry]:
    """The journal as it stands, oldest first: the write events, and each message of the
    `session.messages_added` batches (the journal of add_message), in stream order. `after` and
    `upto` bound the events-stream sequences of the writes (a snapshot's tail); model answers are
    taken from everything after `after`, since one logged past `upto` may belong to a write before it."""
    js = nc.jetstream(timeout=5.0)
    stream = stream_name(prefix, "events")
    writes, added = f"{prefix}.evt.write.", f"{prefix}.evt.session.messages_added"
    model = f"{prefix}.evt.{MODEL_EVENT}."
    out: list[JournalEntry] = []
    seen: set[tuple[str, str, str, str]] = set()
    seq = after + 1
    while True:
        try:
            msg = await js.get_msg(stream, seq=seq, subject=f"{prefix}.evt.>", next=True)
        except NotFoundError:
            return out
        subject, at_seq = msg.subject or "", msg.seq or seq
        seq = at_seq + 1
        if subject.startswith(model):
            m = _model.decode(msg.data or b"{}")
            out.append(JournalEntry(op=MODEL_OP, account="", user="", at=m.at, body=msgspec.to_builtins(m)))
        elif upto is not None and at_seq > upto:
            continue
        elif subject.startswith(writes):
            out.append(_dec.decode(msg.data or b"{}"))
        elif subject == added or subject.startswith(added + "."):
            for e in _added.decode(msg.data or b"{}").entries:
                m = e.message
                seen_key = (e.account, e.user, e.session_id, m.id)
                if seen_key in seen:  # published twice (a recovery racing a late publish): once is enough
                    continue
                seen.add(seen_key)
                body = {"session_id": e.session_id, "role": m.role, "parts": msgspec.to_builtins(m.parts),
                        **{k: v for k, v in (("turn_id", m.turn_id), ("message_kind", m.message_kind),
                                             ("source_message_ids", m.source_message_ids)) if v is not None}}
                out.append(JournalEntry(op=catalog.SESSIONS_ADD_MESSAGE.name, account=e.account, user=e.user,
                                        agent=e.agent,
                                        peer=e.peer, at=m.created_at, body=body, ids={"message_id": m.id}))


def answers(entries: list[JournalEntry]) -> list[ModelOutput]:
    """The model answers a journal carries."""
    return [msgspec.convert(e.body, ModelOutput) for e in entries if e.op == MODEL_OP]


def save(entries: list[JournalEntry], path: Path) -> None:
    with path.open("wb") as f:
        for e in entries:
            f.write(msgspec.json.encode(e) + b"\n")


def load(path: Path) -> list[JournalEntry]:
    return [_dec.decode(line) for line in path.read_bytes().splitlines() if line.strip()]


def request_for(entry: JournalEntry) -> bytes:
    body = dict(entry.body) if isinstance(entry.body, dict) else {}
    if entry.op == catalog.SESSIONS_ADD_MESSAGE.name and entry.ids.get("message_id"):
        body["id"] = entry.ids["message_id"]
    if entry.op == catalog.SESSIONS_COMMIT.name:
        body["wait"] = True
    if entry.op in (catalog.FS_WRITE.name, catalog.FS_RM.name, catalog.FS_MV.name, catalog.RESOURCES_ADD.name,
                    catalog.SKILLS_ADD.name, catalog.MEMORIES_WRITE.name):
        body["wait"] = True
    return json.dumps(body).encode()


async def apply(nc: NATS, prefix: str, entries: list[JournalEntry], *, api_key: str | None = None,
                timeout_s: float = 300.0, progress: Callable[[int], None] | None = None) -> int:
    """Re-send every entry in order; stops at the first refusal (a replay must not diverge). The
    model answers go into the target's event log first: a write may need an answer logged after it."""
    await model_log.publish_answers(nc, prefix, answers(entries), "replay")
    writes = 0
    for i, e in enumerate(entries):
        if e.op == MODEL_OP:
            continue
        writes += 1
        headers = {H_ACCOUNT: e.account, H_USER: e.user, H_AGENT: e.agent, H_CLOCK: repr(e.at),
                   H_TIMEOUT_MS: str(int(timeout_s * 1000))}
        if e.peer:
            headers[H_PEER] = e.peer
        if api_key:
            headers[H_API_KEY] = api_key
        msg = await nc.request(f"{prefix}.v1.{e.op}", request_for(e), timeout=timeout_s + 1, headers=headers)
        env: dict[str, Any] = json.loads(msg.data)
        if env.get("status") != "ok":
            err = env.get("error") or {}
            raise errors.from_wire(str(err.get("code", "INTERNAL")), f"replay stopped at entry {i} ({e.op}): "
                                   f"{err.get('message', '')}", err.get("details"))
        if progress:
            progress(i + 1)
    return writes
