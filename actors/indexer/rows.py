"""Pure helpers of ingest: which nodes get rows, what text each row embeds, skill frontmatter,
tags. No I/O here."""

from __future__ import annotations

import hashlib
import re

import numpy as np

from skald.actors.text import extract
from skald.actors.text.tags import check_tags  # noqa: F401 - re-exported for the indexer
from skald.messages.errors import InvalidArgument
from skald.messages.frontmatter import frontmatter
from skald.messages.index import IndexRow
from skald.store import vector_bytes
from skald.store.language import language_of
from skald.store.uri import category_of, context_type_of, join_uri

EMBED_CHARS = 1_500  # e5-small reads ~512 tokens; more text only costs time
MEMORY_ABSTRACT_MAX = 4_000  # a memory's body is its abstract (docs/design/context-assembly.md), within reason
KEYWORD_CHARS = 16_000  # text a row carries for BM25: identifiers and error codes deep in a file still match


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def dir_has_rows(segments: tuple[str, ...]) -> bool:
    """Directories worth a row: not the roots, not a bare user root or a peers listing."""
    if len(segments) < 2:
        return False
    if segments[0] == "user":
        if len(segments) == 2:
            return False
        if segments[2] == "sessions":
            return False
        if segments[2] == "peers" and len(segments) <= 4:
            return False
    return True


def file_is_indexed(segments: tuple[str, ...]) -> bool:
    if not segments or segments[-1].startswith("."):
        return False
    return not (segments[0] == "user" and len(segments) > 2 and segments[2] == "sessions")


def parse_skill(text: str) -> tuple[str, str]:
    """(name, description) from a SKILL.md's YAML frontmatter; both are required."""
    try:
        meta = frontmatter(text)
    except ValueError as e:
        raise InvalidArgument(f"SKILL.md {e}") from e
    name, desc = meta.get("name"), meta.get("description")
    if not isinstance(name, str) or not name.strip():
        raise InvalidArgument("SKILL.md frontmatter needs a name")
    if not isinstance(desc, str) or not desc.strip():
        raise InvalidArgument("SKILL.md frontmatter needs a description")
    name = name.strip()
    if not re.match(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$", name) or ".." in name:
        raise InvalidArgument(f"skill name {name!r} is not a valid path segment")
    return name, " ".join(desc.split())


def file_texts(segments: tuple[str, ...], text: str, summary: str) -> tuple[str, str]:
    """(abstract, text to embed) of a file row, by what the file is."""
    name = segments[-1]
    ctype = context_type_of(segments)
    if ctype == "memory":
        body = extract.strip_frontmatter(text).strip()
        return body[:MEMORY_ABSTRACT_MAX], body[: EMBED_CHARS * 2]
    if ctype == "skill" and name == "SKILL.md":
        try:
            sname, desc = parse_skill(text)
            return desc, f"{sname}: {desc}"
        except InvalidArgument:
            pass
    body = extract.strip_frontmatter(text)
    return summary, f"{name}\n{summary}\n{body[:EMBED_CHARS]}"


def row_time(own: float, at: float) -> float:
    """A row's time: its own (a file's mtime, a summary's moment) or, when earlier, the clock of the
    request whose job wrote it (`IngestJob.at`, 0 when unknown). A replayed or restored request
    writes now what happened then."""
    return min(own, at) if at else own


def make_row(account: str, segments: tuple[str, ...], level: int, abstract: str, *, tags: tuple[str, ...],
             created_at: float, updated_at: float, content_hash: str, model: str, vector: np.ndarray,
             owner: str, text: str = "", uri: str = "", parent_uri: str = "", kind: str = "", title: str = "",
             start_line: int = 0, end_line: int = 0, page: int = 0, lang: str | None = None) -> IndexRow:
    """`uri`/`parent_uri` default to the node's own; a section passes `<doc>#<anchor>` and the document.
    `lang`: the row's language when its document's rows were identified together
    (`languages_of_parts`); otherwise it is identified here."""
    ctype = context_type_of(segments)
    cat = category_of(segments) if ctype == "memory" else ""
    if ctype == "memory" and cat and not any(t.startswith("memory_type=") for t in tags) and level == 2:
        tags = (*tags, f"memory_type={cat}")
    return IndexRow(
        account=account, uri=uri or join_uri(segments), level=level, parent_uri=parent_uri or join_uri(segments[:-1]),
        context_type=ctype, category=cat, abstract=abstract, tags=tags, created_at=created_at,
        updated_at=updated_at, owner=owner, content_hash=content_hash, model=model, vector=vector_bytes.pack(vector),
        text=text[:KEYWORD_CHARS], kind=kind, title=title, start_line=start_line, end_line=end_line, page=page,
        lang=language_of(text or abstract) if lang is None else lang,
    )


def owner_of(segments: tuple[str, ...]) -> str:
    """The space a row belongs to: `user/{id}`, `agent`, or `resources`."""
    if segments[:1] == ("user",) and len(segments) > 1:
        return f"user/{segments[1]}"
    return segments[0] if segments else ""


def slug(text: str, fallback: str) -> str:
    s = re.sub(r"[^A-Za-z0-9_-]+", "-", text.strip().lower()).strip("-")[:60]
    return s or fallback
