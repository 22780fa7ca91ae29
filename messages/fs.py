"""File-tree operations on `viking://` URIs (reads served by the retriever, writes by the indexer)."""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec
from msgspec import Meta

Uri = Annotated[str, Meta(min_length=1, max_length=4096)]
NodeLimit = Annotated[int, Meta(ge=1, le=100_000)]


class _Req(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, frozen=True):
    pass


class ReadRequest(_Req, frozen=True):
    """A file, or a section of a long document (`<uri>#<anchor>`). `offset` and `limit` count
    lines, as OpenViking's clients send them: the window starts at line `offset` (0-based) and
    holds `limit` lines (-1: to the end). A PDF or Office document reads as its converted text;
    `raw` returns the file's own bytes (base64 when they are not UTF-8 text)."""

    uri: Uri
    offset: Annotated[int, Meta(ge=0)] = 0
    limit: Annotated[int, Meta(ge=-1)] = -1
    raw: bool = False


class ReadResult(msgspec.Struct, kw_only=True):
    """The reply of `fs.read`."""

    uri: str
    content: str
    size: int  # characters of the whole text (of the section, for a section)
    truncated: bool = False  # the window ends before the text does
    lines: int = 0  # lines of the whole text
    start_line: int = 0  # 1-based line of the file (or converted text) where `content` begins
    format: str = ""  # what the text was converted from (pdf, docx, html, ...), when it was
    encoding: Literal["text", "base64"] = "text"


class LsRequest(_Req, frozen=True):
    """The request of `fs.ls`: list a directory."""

    uri: Uri
    recursive: bool = False
    show_hidden: bool = False
    node_limit: NodeLimit = 1000


class Entry(msgspec.Struct, kw_only=True, omit_defaults=True):
    """One entry of a directory listing."""

    uri: str
    name: str
    is_dir: bool
    size: int
    created_at: float
    updated_at: float
    abstract: str | None = None


class LsResult(msgspec.Struct, kw_only=True):
    """The reply of `fs.ls`."""

    uri: str
    entries: list[Entry]
    truncated: bool = False


class TreeRequest(_Req, frozen=True):
    """The request of `fs.tree`: a directory tree."""

    uri: Uri
    level_limit: Annotated[int, Meta(ge=1, le=64)] = 3
    node_limit: NodeLimit = 1000
    show_hidden: bool = False


class TreeNode(msgspec.Struct, kw_only=True, omit_defaults=True):
    """One node of a directory tree, with its children."""

    uri: str
    name: str
    is_dir: bool
    children: list[TreeNode] | None = None


class TreeResult(msgspec.Struct, kw_only=True):
    """The reply of `fs.tree`."""

    uri: str
    tree: TreeNode
    count: int
    truncated: bool = False


class StatRequest(_Req, frozen=True):
    """The request of `fs.stat`: size and times of a node."""

    uri: Uri


class StatResult(msgspec.Struct, kw_only=True):
    """The reply of `fs.stat`."""

    uri: str
    is_dir: bool
    size: int
    created_at: float
    updated_at: float


class AbstractRequest(_Req, frozen=True):
    """The request of `fs.abstract`, `fs.overview`: a node's L0 abstract."""

    uri: Uri


class TextResult(msgspec.Struct, kw_only=True):
    """The reply of `fs.abstract`, `fs.overview`."""

    uri: str
    content: str


class WriteRequest(_Req, frozen=True):
    """The request of `fs.write`: write a file (replace, append or create) and index it."""

    uri: Uri
    content: str
    mode: Literal["replace", "append", "create"] = "replace"
    wait: bool = True


class WriteResult(msgspec.Struct, kw_only=True):
    """The reply of `fs.write`."""

    uri: str
    size: int
    created: bool
    index_job: str
    indexed: bool
    index_seq: int = 0


class MkdirRequest(_Req, frozen=True):
    """The request of `fs.mkdir`: create a directory."""

    uri: Uri
    parents: bool = True


class RmRequest(_Req, frozen=True):
    """The request of `fs.rm`: remove a file or directory."""

    uri: Uri
    recursive: bool = False
    wait: bool = True


class MvRequest(_Req, frozen=True):
    """The request of `fs.mv`: move a file or directory."""

    from_uri: Uri
    to_uri: Uri
    wait: bool = True


class ChangeResult(msgspec.Struct, kw_only=True):
    """The reply of `fs.mkdir`, `fs.rm`, `fs.mv`, `memories.delete`."""

    uri: str
    index_job: str | None = None
    indexed: bool = False
    index_seq: int = 0
    removed: int = 0
