"""A file as text: what every converter returns and what sections are cut from."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from typing import Any

_HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$")


class Unconvertible(Exception):
    """A file that gets no rows; `reason` is the typed code the ingest reply carries."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail


@dataclass(frozen=True, slots=True)
class Symbol:
    """A code symbol with its 1-based inclusive line range; methods sit in `children`."""

    kind: str  # function, class, method, interface, type, enum, const
    name: str
    start: int
    end: int
    signature: str
    doc: str = ""
    children: tuple[Symbol, ...] = ()


@dataclass(frozen=True, slots=True)
class Doc:
    """What a file is as text. `text` is what is indexed, split and served; `derived` says it
    is not the file's own bytes (PDF, Office, HTML), so reads serve it instead of the bytes."""

    text: str
    format: str  # markdown, rst, text, html, pdf, docx, pptx, xlsx, code:<language>
    title: str = ""
    derived: bool = False
    pages: tuple[int, ...] = ()  # 0-based line where each page starts (PDF)
    headings: tuple[tuple[int, int, str], ...] = ()  # (0-based line, level, title)
    symbols: tuple[Symbol, ...] = ()
    meta: dict[str, str] = field(default_factory=dict)


_FRONT_MATTER_END = re.compile(r"^---\s*$")
_SETEXT_LINE = re.compile(r"^ {0,3}(?:=+|-+)[ \t]*$", re.M)  # what could underline a setext heading


def commonmark_headings(text: str) -> tuple[tuple[int, int, str], ...]:
    """A Markdown file's headings, ATX (`## Usage`) and setext (`Usage` over `-----`), with their
    0-based line, as markdown-it-py (MIT, a CommonMark parser) reads them: code blocks, fenced or
    indented, hold none. A YAML front matter block is not read as markup (its closing `---` would
    otherwise make its last line a heading). The parser reads about 4 MB a second, the ATX pattern
    150: a file with no line a setext heading could be underlined by takes the pattern. For
    converters' own output, which writes ATX headings only, `markdown_headings` is enough."""
    if not text.startswith("---") and not _SETEXT_LINE.search(text):
        return markdown_headings(text)  # nothing setext could read: the same headings, 50 times faster
    lines = text.splitlines()
    skip = 0
    if lines and _FRONT_MATTER_END.match(lines[0]):
        skip = next((i + 1 for i in range(1, len(lines)) if _FRONT_MATTER_END.match(lines[i])), 0)
    tokens = _commonmark().parse("\n" * skip + "\n".join(lines[skip:]))
    out: list[tuple[int, int, str]] = []
    for i, tok in enumerate(tokens):
        if tok.type == "heading_open" and tok.map and i + 1 < len(tokens):
            title = " ".join(tokens[i + 1].content.split())
            if title:
                out.append((tok.map[0], int(tok.tag[1:]), title))
    return tuple(out)


@functools.cache
def _commonmark() -> Any:
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark")


def markdown_headings(text: str) -> tuple[tuple[int, int, str], ...]:
    """ATX headings outside fenced code, with their 0-based line."""
    out: list[tuple[int, int, str]] = []
    fence = ""
    for i, line in enumerate(text.splitlines()):
        s = line.lstrip()
        if s.startswith(("```", "~~~")):
            mark = s[:3]
            fence = "" if fence == mark else (fence or mark)
            continue
        if not fence and (m := _HEADING.match(line)):
            out.append((i, len(m.group(1)), m.group(2).strip()))
    return out
