"""Subject names. The prefix (`skald`) is configurable; everything else is fixed by PROTOCOL.md."""

from __future__ import annotations

SYSTEM_HEALTH = "system.health"
SYSTEM_STATS = "system.stats"

FS_READ = "fs.read"
FS_LS = "fs.ls"
FS_TREE = "fs.tree"
FS_STAT = "fs.stat"
FS_ABSTRACT = "fs.abstract"
FS_OVERVIEW = "fs.overview"
FS_WRITE = "fs.write"
FS_MKDIR = "fs.mkdir"
FS_RM = "fs.rm"
FS_MV = "fs.mv"

RESOURCES_ADD = "resources.add"
SKILLS_ADD = "skills.add"
MEMORIES_WRITE = "memories.write"

SEARCH_FIND = "search.find"
SEARCH_SEARCH = "search.search"
SEARCH_GREP = "search.grep"
SEARCH_GLOB = "search.glob"
SEARCH_RECALL = "search.recall"

SESSIONS_GET = "sessions.get"
SESSIONS_CREATE = "sessions.create"

# Internal operations (actor to actor).
SEARCH_CANDIDATES = "search.candidates"  # assembler -> retriever: every bucket, every query, one trip
ASSEMBLE_CONTEXT = "assemble.context"  # retriever -> assembler: search.search with mode context/bootstrap


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


def index_row(prefix: str, row_key: str) -> str:
    """One subject per index row, so the stream keeps exactly the latest state of each row."""
    return f"{prefix}.index.row.{row_key}"


def event(prefix: str, name: str) -> str:
    return f"{prefix}.evt.{name}"
