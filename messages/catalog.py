"""Every operation and work queue, spelled once. Handlers declare themselves with these `Op`s,
the bus addresses them, and the client, CLI, MCP server, HTTP gateway, replay and fuzz tests read
this table, so none of them keeps its own list or its own string.

Public operations answer on `<prefix>.v1.<name>`; internal ones (actor to actor) on
`<prefix>.internal.<name>`, which clients may not use. Work queues are JetStream subjects
`<prefix>.work.<queue>`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from skald.messages import context as context_msgs
from skald.messages import fs as fs_msgs
from skald.messages import ingest as ingest_msgs
from skald.messages import search as search_msgs
from skald.messages import sessions as session_msgs
from skald.messages import system as system_msgs

R = TypeVar("R")


@dataclass(frozen=True, slots=True)
class Op(Generic[R]):
    """One operation of the API: its name, request Struct, result Struct, and who may call it."""

    name: str
    request: type
    result: type[R] | None  # None: the shape depends on the request (search: list or context)
    summary: str
    internal: bool = False  # actor to actor, on `<prefix>.internal.<name>`; not part of the public API


@dataclass(frozen=True, slots=True)
class Queue:
    """A JetStream work queue: jobs that must run to the end even if their worker dies."""

    name: str
    job: type


FS_READ = Op("fs.read", fs_msgs.ReadRequest, fs_msgs.ReadResult, "Read a file's content (optionally a line range).")
FS_LS = Op("fs.ls", fs_msgs.LsRequest, fs_msgs.LsResult, "List a directory.")
FS_TREE = Op("fs.tree", fs_msgs.TreeRequest, fs_msgs.TreeResult, "A directory tree.")
FS_STAT = Op("fs.stat", fs_msgs.StatRequest, fs_msgs.StatResult, "Size and times of a node.")
FS_ABSTRACT = Op("fs.abstract", fs_msgs.AbstractRequest, fs_msgs.TextResult, "A node's L0 abstract.")
FS_OVERVIEW = Op("fs.overview", fs_msgs.AbstractRequest, fs_msgs.TextResult, "A node's L1 overview.")
FS_WRITE = Op("fs.write", fs_msgs.WriteRequest, fs_msgs.WriteResult,
              "Write a file (replace, append or create) and index it.")
FS_MKDIR = Op("fs.mkdir", fs_msgs.MkdirRequest, fs_msgs.ChangeResult, "Create a directory.")
FS_RM = Op("fs.rm", fs_msgs.RmRequest, fs_msgs.ChangeResult, "Remove a file or directory.")
FS_MV = Op("fs.mv", fs_msgs.MvRequest, fs_msgs.ChangeResult, "Move a file or directory.")
RESOURCES_ADD = Op("resources.add", ingest_msgs.AddResourceRequest, ingest_msgs.IngestResult,
                   "Ingest a resource (a server path, content, a URL or git repository, or an upload).")
RESOURCES_UPLOAD = Op("resources.upload", ingest_msgs.UploadRequest, ingest_msgs.UploadResult,
                      "Send one file (or the next piece of one) for a later resources.add.")
RESOURCES_JOB = Op("resources.job", ingest_msgs.JobRef, ingest_msgs.IngestResult,
                   "An ingest job's outcome (done or failed, with its counts), or queued while it runs.")
SKILLS_ADD = Op("skills.add", ingest_msgs.AddSkillRequest, ingest_msgs.IngestResult,
                "Add a skill (SKILL.md with name and description).")
CONTENT_SET_TAGS = Op("content.set_tags", ingest_msgs.SetTagsRequest, ingest_msgs.SetTagsResult,
                      "Replace, add or remove the k=v tags of a file (its rows are re-indexed with them).")
CONTENT_REINDEX = Op("content.reindex", ingest_msgs.ReindexRequest, ingest_msgs.ReindexResult,
                     "Embed a file or subtree again with the current embedder (and regenerate its summaries).")
MEMORIES_WRITE = Op("memories.write", ingest_msgs.WriteMemoryRequest, ingest_msgs.IngestResult,
                    "Write an explicit memory.")
MEMORIES_UPDATE = Op("memories.update", ingest_msgs.UpdateMemoryRequest, ingest_msgs.IngestResult,
                     "Replace a memory's text (the old text is kept as a version).")
MEMORIES_DELETE = Op("memories.delete", ingest_msgs.MemoryRef, fs_msgs.ChangeResult,
                     "Forget a memory (its versions are kept for memories.history).")
MEMORIES_HISTORY = Op("memories.history", ingest_msgs.MemoryRef, ingest_msgs.MemoryHistory,
                      "A memory's text now and every earlier version.")
SEARCH_FIND = Op("search.find", search_msgs.FindRequest, search_msgs.FindResult,
                 "Semantic find: one vector search, ranked hits.")
SEARCH_SEARCH: Op[Any] = Op("search.search", search_msgs.SearchRequest, None,
                   "Search: a ranked list, or an assembled context block.")
SEARCH_RECALL = Op("search.recall", search_msgs.RecallRequest, context_msgs.ContextResult,
                   "The auto-recall preset of context assembly.")
SEARCH_GREP = Op("search.grep", search_msgs.GrepRequest, search_msgs.GrepResult,
                 "Regular-expression search over file contents.")
SEARCH_GLOB = Op("search.glob", search_msgs.GlobRequest, search_msgs.GlobResult, "Match paths against a glob pattern.")
SESSIONS_CREATE = Op("sessions.create", session_msgs.CreateRequest, session_msgs.SessionInfo, "Create a session.")
SESSIONS_GET = Op("sessions.get", session_msgs.SessionRef, session_msgs.SessionInfo, "A session's counters.")
SESSIONS_LIST = Op("sessions.list", session_msgs.ListRequest, session_msgs.SessionList, "List sessions.")
SESSIONS_DELETE = Op("sessions.delete", session_msgs.SessionRef, session_msgs.DeleteResult, "Delete a session.")
SESSIONS_ADD_MESSAGE = Op("sessions.add_message", session_msgs.AddMessageRequest, session_msgs.AddMessageResult,
                          "Append a message to a session.")
SESSIONS_COMMIT = Op("sessions.commit", session_msgs.CommitRequest, session_msgs.CommitResult,
                     "Commit a session (archive, summarise).")
SESSIONS_CONTEXT = Op("sessions.context", session_msgs.ContextRequest, session_msgs.ContextResult,
                      "A session's context: overview + live messages.")
SESSIONS_RETRY_ARCHIVE = Op("sessions.retry_archive", session_msgs.RetryArchiveRequest, session_msgs.ArchiveInfo,
                            "Run Phase 2 of a failed or quarantined archive again.")
SESSIONS_USED = Op("sessions.used", session_msgs.UsedRequest, session_msgs.UsedResult,
                    "Report what the agent used: each node's use count (active_count) goes up by one.")
SESSIONS_ARCHIVES = Op("sessions.archives", session_msgs.SessionRef, session_msgs.ArchivesResult,
                       "A session's archives and their state.")
SYSTEM_HEALTH = Op("system.health", system_msgs.Empty, system_msgs.HealthResult, "Liveness of the worker that answers.")
SYSTEM_WHOAMI = Op("system.whoami", system_msgs.Empty, system_msgs.WhoAmIResult,
                   "Who the caller is (account, user, role) and its account's event subjects.")
SYSTEM_STATS = Op("system.stats", system_msgs.Empty, system_msgs.StatsResult, "Retrieval counters and queue depths.")

# Internal: the assembler asks the retriever for every bucket x every expanded query in one trip,
# and the retriever relays search.search in context/bootstrap mode to the assembler.
SEARCH_CANDIDATES = Op("search.candidates", context_msgs.CandidatesRequest, context_msgs.CandidatesResult,
                       "Candidates for context assembly: every bucket, every query.", internal=True)
SEARCH_FIND_SHARD = Op("search.find_shard", search_msgs.ShardFindRequest, search_msgs.FindResult,
                       "search.find answered from one shard of a sharded index, the query embedded once.",
                       internal=True)
SEARCH_SEARCH_SHARD = Op("search.search_shard", search_msgs.ShardSearchRequest, search_msgs.FindResult,
                         "search.search in list mode answered from one shard of a sharded index, with the plan "
                         "and query vectors the asking retriever made.", internal=True)
ASSEMBLE_CONTEXT = Op("assemble.context", search_msgs.SearchRequest, context_msgs.ContextResult,
                      "search.search in context or bootstrap mode, served by the assembler.", internal=True)

INGEST = Queue("ingest", ingest_msgs.IngestJob)  # abstracts, overviews, embeddings, index rows of a write
ARCHIVE = Queue("archive", session_msgs.Phase2Job)  # Phase 2 of a committed archive

_ALL = tuple(v for v in dict(globals()).values() if isinstance(v, Op))
OPS: dict[str, Op] = {op.name: op for op in _ALL if not op.internal}
INTERNAL_OPS: dict[str, Op] = {op.name: op for op in _ALL if op.internal}
QUEUES: dict[str, Queue] = {q.name: q for q in (INGEST, ARCHIVE)}
# Sending one of these again after UNAVAILABLE or a lost reply cannot change state twice: reads,
# and adds and use reports that carry an id or an idempotency key (the client supplies one). Clients retry only these.
RETRY_SAFE: frozenset[str] = frozenset(op.name for op in (
    FS_READ, FS_LS, FS_TREE, FS_STAT, FS_ABSTRACT, FS_OVERVIEW, MEMORIES_HISTORY, SEARCH_FIND, SEARCH_SEARCH,
    SEARCH_RECALL, SEARCH_GREP, SEARCH_GLOB, SESSIONS_GET, SESSIONS_LIST, SESSIONS_ADD_MESSAGE, SESSIONS_CONTEXT,
    SESSIONS_USED, CONTENT_REINDEX, RESOURCES_JOB,
    SESSIONS_ARCHIVES, SYSTEM_HEALTH, SYSTEM_WHOAMI, SYSTEM_STATS))
