"""Ingest requests (resources, skills, memories) and the work-queue job that indexes them."""

from __future__ import annotations

import hashlib
from typing import Annotated, Literal

import msgspec
from msgspec import Meta

Name = Annotated[str, Meta(min_length=1, max_length=255)]
URI = Annotated[str, Meta(min_length=1, max_length=4096)]
MEMORY_CATEGORIES = ("events", "entities", "preferences", "experiences", "profile", "cases", "patterns", "tools")


class _Req(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, frozen=True):
    pass


class AddResourceRequest(_Req, frozen=True):
    """Exactly one source: `path` (a file, folder or local repository the server can read),
    `content` (+ `name`), `url` (an http(s) page or file, or a git repository), or `upload_id`
    (files the caller sent with `resources.upload`). A folder is taken as git sees it (its
    `.gitignore`, no `.git`, dependency or build folders) and filtered by `include`/`exclude`
    globs; re-adding it removes what vanished from it unless `keep_missing`."""

    path: Annotated[str, Meta(min_length=1, max_length=4096)] | None = None
    content: str | None = None
    url: Annotated[str, Meta(min_length=1, max_length=4096, pattern=r"^(https?|git|ssh|file)://")] | None = None
    upload_id: Annotated[str, Meta(pattern=r"^[0-9a-f]{32}$")] | None = None
    name: Name | None = None
    target_uri: Annotated[str, Meta(min_length=1, max_length=4096)] | None = None
    include: Annotated[list[Annotated[str, Meta(min_length=1, max_length=512)]], Meta(max_length=100)] | None = None
    exclude: Annotated[list[Annotated[str, Meta(min_length=1, max_length=512)]], Meta(max_length=100)] | None = None
    keep_missing: bool = False
    tags: Annotated[list[str], Meta(max_length=64)] | None = None  # k=v, on every file it adds
    reason: str = ""
    wait: bool = False


class JobRef(_Req, frozen=True):
    """The request of `resources.job`: an ingest job by the id `resources.add` answered with."""

    job_id: Annotated[str, Meta(pattern=r"^[0-9a-f]{32}$")]
    wait: bool = False  # until the job ends or the request's deadline comes


class UploadRequest(_Req, frozen=True):
    """One file (or the next piece of one) of an upload; the first call leaves `upload_id` out
    and gets one. `offset` is where the piece goes: 0 starts the file, the file's current size
    appends."""

    path: Annotated[str, Meta(min_length=1, max_length=1024)]  # relative, POSIX separators
    data: bytes  # base64 in JSON
    upload_id: Annotated[str, Meta(pattern=r"^[0-9a-f]{32}$")] | None = None
    offset: Annotated[int, Meta(ge=0)] = 0
    # The whole file's size, declared with its first piece: a file over the workers' limit is then
    # refused before it is sent (noted in the upload, reported by the add as skipped: too_large).
    size: Annotated[int, Meta(ge=0)] | None = None


class UploadResult(msgspec.Struct, kw_only=True):
    """A piece of an upload stored: the upload's id and how many bytes it holds; or the file
    refused (`refused`: too_large, with the limit), nothing of it kept."""

    upload_id: str
    path: str
    size: int  # the file's size after this piece
    refused: Literal["too_large"] | None = None
    max_bytes: int = 0  # the workers' per-file limit, when refused


class AddSkillRequest(_Req, frozen=True):
    """A skill package: a directory holding `SKILL.md`, the text of a `SKILL.md`, or an upload of
    either (a directory arrives zipped). `dry_run` checks the package and answers with where it
    would go (status `checked`), writing nothing."""

    path: Annotated[str, Meta(min_length=1, max_length=4096)] | None = None
    content: str | None = None
    upload_id: Annotated[str, Meta(pattern=r"^[0-9a-f]{32}$")] | None = None
    dry_run: bool = False
    scope: Literal["agent", "user"] = "agent"
    tags: Annotated[list[str], Meta(max_length=64)] | None = None
    wait: bool = False


class SetTagsRequest(_Req, frozen=True):
    """Tags of one file (a resource, skill or memory): `replace` its tags, `add` to them, or
    `remove` some. Keys are case-insensitive (stored lower-case); values are kept as given."""

    uri: URI
    tags: Annotated[list[str], Meta(max_length=64)]
    mode: Literal["replace", "add", "remove"] = "replace"
    wait: bool = True


class ReindexRequest(_Req, frozen=True):
    """Embed a file or a subtree again with the embedder the workers now use, and regenerate its
    directories' summaries (files whose text did not change keep theirs). For rows another
    embedder wrote (a replica's health counts them as `rows_other_model`), which no search can
    use. `mode` is OpenViking's name for what this does; it is the only one. Without `recursive`
    a directory gets its own summaries and rows again, not its entries'. `force` is accepted for
    OpenViking's clients and changes nothing: a vector kept for the same text and embedder is the
    one this would make again."""

    uri: URI
    mode: Literal["vectors_only"] = "vectors_only"
    wait: bool = True
    recursive: bool = True
    force: bool = False


class ReindexResult(msgspec.Struct, kw_only=True):
    """The reply of `content.reindex`."""

    uri: str
    index_job: str
    indexed: bool  # false when the caller did not wait, or the deadline came first: the job goes on
    rows: int = 0
    index_seq: int = 0


class SetTagsResult(msgspec.Struct, kw_only=True):
    """The reply of `content.set_tags`."""

    uri: str
    tags: list[str]
    index_job: str = ""
    indexed: bool = False
    index_seq: int = 0


class WriteMemoryRequest(_Req, frozen=True):
    """The request of `memories.write`: write an explicit memory."""

    category: Annotated[str, Meta(pattern=r"^[a-z][a-z0-9_-]{0,63}$")]
    content: Annotated[str, Meta(min_length=1)]
    name: Name | None = None
    tags: list[str] | None = None
    wait: bool = True


class UpdateMemoryRequest(_Req, frozen=True):
    """Replace a memory's text; the text it had is kept as a version (`memories.history`)."""

    uri: URI
    content: Annotated[str, Meta(min_length=1)]
    wait: bool = True


class MemoryRef(_Req, frozen=True):
    """The request of `memories.delete`, `memories.history`: forget a memory (its versions are kept for
    memories.history)."""

    uri: URI
    wait: bool = True


class MemoryVersion(msgspec.Struct, kw_only=True):
    """One earlier version of a memory."""

    version: int
    at: float
    reason: str  # update | delete | merge
    content: str


class MemoryHistory(msgspec.Struct, kw_only=True):
    """The reply of `memories.history`."""

    uri: str
    current: str | None  # None: the memory was forgotten (its versions remain)
    versions: list[MemoryVersion]


class Skipped(msgspec.Struct, kw_only=True):
    """A file that got no rows, and why: unsupported_type, encrypted, too_large, decode_error, empty."""

    uri: str
    reason: str
    detail: str = ""


class IngestResult(msgspec.Struct, kw_only=True):
    """The reply of an ingest request, and the `ingest.done.{job_id}` event a finished job publishes."""

    job_id: str
    root_uri: str
    status: Literal["queued", "done", "failed", "checked"]  # checked: a dry run, nothing written
    files: int = 0
    directories: int = 0
    rows: int = 0
    index_seq: int = 0
    error: str | None = None
    generator: str = ""
    sections: int = 0  # section rows of long documents written by this job
    removed: int = 0  # files that vanished from a re-added folder and were removed
    embedded: int = 0  # texts this job sent to the embedder (unchanged sections keep their vectors)
    skipped: list[Skipped] = []


class IngestJob(msgspec.Struct, kw_only=True, frozen=True):
    """What the indexer's work queue carries: rows to drop, subtrees to (re)index, and directories
    whose summaries (and their ancestors') must be regenerated afterwards. Replaying a job is
    harmless: every step is an upsert or a delete by key."""

    job_id: str
    account: str
    index_roots: tuple[str, ...] = ()
    remove_rows: tuple[tuple[str, int], ...] = ()
    refresh_dirs: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()
    at: float = 0.0  # the request's clock when it was queued (0: unknown); its files' rows are no younger


def memories_job_id(account: str, user: str, session_id: str, archive_id: str) -> str:
    """The id of the job that indexes the memories an archive's Phase 2 wrote: known before the
    job exists, so a commit that waits can listen for its `ingest.done` before it can happen."""
    return hashlib.sha1(f"{account}/{user}/{session_id}/{archive_id}".encode()).hexdigest()


class IngestProgress(msgspec.Struct, kw_only=True):
    """Progress of an ingest job, sent as a note (not stored): `done` of `total` files, and while a
    batch of `batch` files is being embedded (stage `embedding`), how far its passages are, so a
    long document moves the bar as it goes rather than at its end."""

    job_id: str
    done: int
    total: int
    stage: str  # converting | embedding | files (a batch finished)
    skipped: list[Skipped] = []  # files of this batch that got no rows
    batch: int = 0
    passages_done: int = 0
    passages_total: int = 0

    def fraction(self) -> float:
        """The share of the job done, counting the embedded share of the batch in hand."""
        within = self.batch * self.passages_done / self.passages_total if self.passages_total else 0.0
        return min(1.0, (self.done + within) / max(1, self.total))
