"""Every public operation: its request and result Structs. The client, the CLI, the MCP server,
the HTTP gateway and the fuzz tests read this one table, so none of them keeps its own list."""

from __future__ import annotations

from dataclasses import dataclass

from skald.messages import context as X
from skald.messages import fs as F
from skald.messages import ingest as I
from skald.messages import search as Q
from skald.messages import sessions as M
from skald.messages import system as Y


@dataclass(frozen=True, slots=True)
class Op:
    name: str
    request: type
    result: type | None  # None: the shape depends on the request (search: list or context)
    summary: str


OPS: dict[str, Op] = {op.name: op for op in (
    Op("fs.read", F.ReadRequest, F.ReadResult, "Read a file's content (optionally a line range)."),
    Op("fs.ls", F.LsRequest, F.LsResult, "List a directory."),
    Op("fs.tree", F.TreeRequest, F.TreeResult, "A directory tree."),
    Op("fs.stat", F.StatRequest, F.StatResult, "Size and times of a node."),
    Op("fs.abstract", F.AbstractRequest, F.TextResult, "A node's L0 abstract."),
    Op("fs.overview", F.AbstractRequest, F.TextResult, "A node's L1 overview."),
    Op("fs.write", F.WriteRequest, F.WriteResult, "Write a file (replace, append or create) and index it."),
    Op("fs.mkdir", F.MkdirRequest, F.ChangeResult, "Create a directory."),
    Op("fs.rm", F.RmRequest, F.ChangeResult, "Remove a file or directory."),
    Op("fs.mv", F.MvRequest, F.ChangeResult, "Move a file or directory."),
    Op("resources.add", I.AddResourceRequest, I.IngestResult, "Ingest a resource (a path or content)."),
    Op("skills.add", I.AddSkillRequest, I.IngestResult, "Add a skill (SKILL.md with name and description)."),
    Op("memories.write", I.WriteMemoryRequest, I.IngestResult, "Write an explicit memory."),
    Op("search.find", Q.FindRequest, Q.FindResult, "Semantic find: one vector search, ranked hits."),
    Op("search.search", Q.SearchRequest, None, "Search: a ranked list, or an assembled context block."),
    Op("search.recall", Q.RecallRequest, X.ContextResult, "The auto-recall preset of context assembly."),
    Op("search.grep", Q.GrepRequest, Q.GrepResult, "Regular-expression search over file contents."),
    Op("search.glob", Q.GlobRequest, Q.GlobResult, "Match paths against a glob pattern."),
    Op("sessions.create", M.CreateRequest, M.SessionInfo, "Create a session."),
    Op("sessions.get", M.SessionRef, M.SessionInfo, "A session's counters."),
    Op("sessions.list", M.ListRequest, M.SessionList, "List sessions."),
    Op("sessions.delete", M.SessionRef, M.DeleteResult, "Delete a session."),
    Op("sessions.add_message", M.AddMessageRequest, M.AddMessageResult, "Append a message to a session."),
    Op("sessions.commit", M.CommitRequest, M.CommitResult, "Commit a session (archive, summarise)."),
    Op("sessions.context", M.ContextRequest, M.ContextResult, "A session's context: overview + live messages."),
    Op("sessions.archives", M.SessionRef, M.ArchivesResult, "A session's archives and their state."),
    Op("system.health", Y.Empty, Y.HealthResult, "Liveness of the worker that answers."),
    Op("system.stats", Y.Empty, Y.StatsResult, "Retrieval counters and queue depths."),
)}
