"""Bytes become text in one seam: a registry of formats the ingest pipeline asks in order.

Each format recognises its bytes (by content, falling back on the name where content cannot
tell) and converts them to the text Skald summarises, embeds and serves; the first that answers
wins. A file no format takes gets no row. Parsers for PDF, HTML, Office documents and the like
register here, each behind the well-kept library that does the job.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

SNIFF_BYTES = 8192  # how much of a file content detection looks at


@dataclass(frozen=True, slots=True)
class Format:
    name: str
    convert: Callable[[str, bytes], str | None]  # (file name, bytes) -> text, or None: not this format


@dataclass(frozen=True, slots=True)
class Converted:
    text: str
    format: str


def plain_text(name: str, data: bytes) -> str | None:
    """Anything without a NUL in its head is text; undecodable bytes become U+FFFD, never an error."""
    if b"\x00" in data[:SNIFF_BYTES]:
        return None
    return data.decode("utf-8", errors="replace")


class Registry:
    def __init__(self, formats: list[Format] | None = None) -> None:
        self.formats: list[Format] = list(formats or [])

    def register(self, fmt: Format, *, before: str | None = None) -> None:
        """Add a format; `before` puts it ahead of a named one (a specific parser ahead of plain text)."""
        names = [f.name for f in self.formats]
        if fmt.name in names:
            raise ValueError(f"format {fmt.name!r} is registered already")
        at = names.index(before) if before in names else len(self.formats)
        self.formats.insert(at, fmt)

    def convert(self, name: str, data: bytes) -> Converted | None:
        for f in self.formats:
            text = f.convert(name, data)
            if text is not None:
                return Converted(text, f.name)
        return None


def default_registry() -> Registry:
    return Registry([Format("text", plain_text)])
