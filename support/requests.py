"""One valid request per public operation, with its required fields and its URI field: what the
wire-error, auth and client tests vary."""

from __future__ import annotations

# operation -> (a valid body, its required fields, its URI-bearing field or None)
SUBJECTS: dict[str, tuple[dict, list[str], str | None]] = {
    "fs.read": ({"uri": "viking://resources/x.md"}, ["uri"], "uri"),
    "fs.ls": ({"uri": "viking://resources"}, ["uri"], "uri"),
    "fs.tree": ({"uri": "viking://resources"}, ["uri"], "uri"),
    "fs.stat": ({"uri": "viking://resources"}, ["uri"], "uri"),
    "fs.abstract": ({"uri": "viking://resources"}, ["uri"], "uri"),
    "fs.overview": ({"uri": "viking://resources"}, ["uri"], "uri"),
    "fs.write": ({"uri": "viking://resources/x.md", "content": "x"}, ["uri", "content"], "uri"),
    "fs.mkdir": ({"uri": "viking://resources/d"}, ["uri"], "uri"),
    "fs.rm": ({"uri": "viking://resources/x.md"}, ["uri"], "uri"),
    "fs.mv": ({"from_uri": "viking://resources/x.md", "to_uri": "viking://resources/y.md"},
              ["from_uri", "to_uri"], "from_uri"),
    "resources.add": ({"content": "x", "name": "x.md"}, [], "target_uri"),
    "resources.upload": ({"path": "docs/x.md", "data": "eA=="}, ["path", "data"], None),
    "resources.job": ({"job_id": "0" * 32}, ["job_id"], None),
    "content.set_tags": ({"uri": "viking://resources/x.md", "tags": ["team=platform"]}, ["uri", "tags"], "uri"),
    "content.reindex": ({"uri": "viking://resources"}, ["uri"], "uri"),
    "skills.add": ({"content": "---\nname: s\ndescription: d\n---\n"}, [], None),
    "memories.write": ({"category": "events", "content": "x"}, ["category", "content"], None),
    "search.find": ({"query": "x"}, [], "target_uri"),
    "search.search": ({"query": "x", "session_id": "s1"}, [], "target_uri"),
    "search.recall": ({"query": "x", "session_id": "s1", "max_tokens": 500, "detail": "abstract"}, [], "target_uri"),
    "search.grep": ({"uri": "viking://resources", "pattern": "x"}, ["uri", "pattern"], "uri"),
    "search.glob": ({"pattern": "*"}, ["pattern"], "uri"),
    "memories.update": ({"uri": "viking://~/memories/preferences/x.md", "content": "y"}, ["uri", "content"], "uri"),
    "memories.delete": ({"uri": "viking://~/memories/preferences/x.md"}, ["uri"], "uri"),
    "memories.history": ({"uri": "viking://~/memories/preferences/x.md"}, ["uri"], "uri"),
    "sessions.create": ({"session_id": "s1"}, [], None),
    "sessions.get": ({"session_id": "s1"}, ["session_id"], None),
    "sessions.list": ({"limit": 5}, [], None),
    "sessions.delete": ({"session_id": "s1"}, ["session_id"], None),
    "sessions.add_message": ({"session_id": "s1", "role": "user", "parts": [{"type": "text", "text": "hi"}]},
                             ["session_id", "role", "parts"], None),
    "sessions.commit": ({"session_id": "s1", "keep_recent_count": 1}, ["session_id"], None),
    "sessions.context": ({"session_id": "s1"}, ["session_id"], None),
    "sessions.archives": ({"session_id": "s1"}, ["session_id"], None),
    "sessions.used": ({"session_id": "s1", "uris": ["viking://resources/x.md"]}, ["session_id", "uris"], None),
    "sessions.retry_archive": ({"session_id": "s1", "archive_id": "archive_001"}, ["session_id", "archive_id"],
                               None),
    "system.health": ({}, [], None),
    "system.stats": ({}, [], None),
    "system.whoami": ({}, [], None),
}

BAD_URIS = ["not-a-uri", "viking://resources/../../etc/passwd", "viking://resources/%2e%2e/x",
            "viking://resources/%252e%252e/x", "viking:///etc/passwd", "viking://nosuchroot/x",
            "viking://resources/a\\b", "viking://resources/a\x00b", "viking://resources/" + "a" * 300]
