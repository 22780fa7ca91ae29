"""The HTTP gateway's routes: OpenViking's paths and the operation each one forwards to."""

from __future__ import annotations

from dataclasses import dataclass

from skald.messages import catalog


@dataclass(frozen=True, slots=True)
class Route:
    """One HTTP route of the gateway and the operation it forwards to."""

    method: str
    path: str
    op: str
    kind: str = "body"  # body: JSON passes through | query: from the query string | session: id from the path
    # | resource: OpenViking's add_resource body | upload: a multipart file, sent on as resources.upload
    # | compat: served by a handler of gateway_skills (OpenViking's shape), documented as a body route


ROUTES = (
    Route("POST", "/api/v1/search/find", catalog.SEARCH_FIND.name),
    Route("POST", "/api/v1/search/search", catalog.SEARCH_SEARCH.name),
    Route("POST", "/api/v1/search/recall", catalog.SEARCH_RECALL.name),
    Route("POST", "/api/v1/search/grep", catalog.SEARCH_GREP.name),
    Route("POST", "/api/v1/search/glob", catalog.SEARCH_GLOB.name),
    Route("GET", "/api/v1/fs/ls", catalog.FS_LS.name, "query"),
    Route("GET", "/api/v1/fs/tree", catalog.FS_TREE.name, "query"),
    Route("GET", "/api/v1/fs/stat", catalog.FS_STAT.name, "query"),
    Route("POST", "/api/v1/fs/mkdir", catalog.FS_MKDIR.name),
    Route("POST", "/api/v1/fs/mv", catalog.FS_MV.name),
    Route("DELETE", "/api/v1/fs", catalog.FS_RM.name, "query"),
    Route("GET", "/api/v1/content/read", catalog.FS_READ.name, "query"),
    Route("GET", "/api/v1/content/abstract", catalog.FS_ABSTRACT.name, "query"),
    Route("GET", "/api/v1/content/overview", catalog.FS_OVERVIEW.name, "query"),
    Route("POST", "/api/v1/content/write", catalog.FS_WRITE.name),
    Route("POST", "/api/v1/content/reindex", catalog.CONTENT_REINDEX.name),
    Route("POST", "/api/v1/resources", catalog.RESOURCES_ADD.name, "resource"),
    Route("POST", "/api/v1/resources/temp_upload", catalog.RESOURCES_UPLOAD.name, "upload"),
    Route("POST", "/api/v1/skills", catalog.SKILLS_ADD.name, "compat"),
    Route("POST", "/api/v1/memories", catalog.MEMORIES_WRITE.name),
    Route("POST", "/api/v1/sessions", catalog.SESSIONS_CREATE.name),
    Route("GET", "/api/v1/sessions", catalog.SESSIONS_LIST.name, "query"),
    Route("GET", "/api/v1/sessions/{session_id}", catalog.SESSIONS_GET.name, "session"),
    Route("DELETE", "/api/v1/sessions/{session_id}", catalog.SESSIONS_DELETE.name, "session"),
    Route("POST", "/api/v1/sessions/{session_id}/messages", catalog.SESSIONS_ADD_MESSAGE.name, "session"),
    Route("POST", "/api/v1/sessions/{session_id}/commit", catalog.SESSIONS_COMMIT.name, "session"),
    Route("GET", "/api/v1/sessions/{session_id}/context", catalog.SESSIONS_CONTEXT.name, "session"),
    Route("GET", "/api/v1/sessions/{session_id}/archives", catalog.SESSIONS_ARCHIVES.name, "session"),
    Route("POST", "/api/v1/sessions/{session_id}/used", catalog.SESSIONS_USED.name, "session"),
    Route("GET", "/api/v1/system/status", catalog.SYSTEM_HEALTH.name, "query"),
    Route("GET", "/api/v1/system/stats", catalog.SYSTEM_STATS.name, "query"),
)
