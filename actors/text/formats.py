"""Bytes become a document in one seam: the type is read from the bytes (magic numbers, then the
text encoding), and each type converts through the library made for it (`converters.py`,
`code.py`). Shared by the indexer (what is indexed) and the retriever (what `fs.read` serves).

A file that cannot be converted raises `Unconvertible` with a reason code the ingest reply
lists (`unsupported_type`, `encrypted`, `too_large`, `decode_error`, `empty`); it never fails
the rest of a job.
"""

from __future__ import annotations

import re
from pathlib import PurePosixPath

import charset_normalizer
import filetype

from skald.actors.text import code, converters, markup, plaintext
from skald.actors.text.textfile import Doc, Unconvertible, commonmark_headings
from skald.messages.frontmatter import frontmatter

PREFERRED = ("cp1252", "utf_16", "cp1251", "cp932", "gb18030", "big5")
SNIFF_BYTES = 8192  # how much of a file the text/binary decision looks at
MAX_CONVERT_BYTES = 256 * 1024 * 1024  # the per-file limit's ceiling (SKALD_MAX_FILE_MB <= 256)

HTML_EXT = frozenset({".html", ".htm", ".xhtml"})
_HTML_HEAD = re.compile(rb"^\s*(<!--.*?-->\s*)*<(!doctype\s+html|html[\s>]|head[\s>])", re.IGNORECASE | re.DOTALL)


def decode_text(data: bytes) -> str:
    """UTF-8 (with or without BOM) first; otherwise the encoding charset-normalizer finds.
    Raises `Unconvertible` for bytes that are not text in any encoding it trusts."""
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        pass
    matches = list(charset_normalizer.from_bytes(data))
    if not matches or matches[0].chaos > 0.3:
        raise Unconvertible("decode_error", "not text in any known encoding")
    best = matches[0]
    # Short Western text fits several code pages equally well; the web's commonest one wins a tie.
    tied = [m for m in matches if m.chaos == best.chaos and m.coherence == best.coherence]
    return str(next((m for m in tied if m.encoding in PREFERRED), best))


def looks_binary(head: bytes) -> bool:
    """NUL bytes outside a UTF-16/32 byte-order mark, or a type the magic numbers know."""
    if head.startswith((b"\xff\xfe", b"\xfe\xff")):
        return False
    return b"\x00" in head


def sniff(name: str, data: bytes) -> str:
    """The format a file's bytes say it is; the name only decides among text formats."""
    kind = filetype.guess(data[:SNIFF_BYTES * 4])
    ext = PurePosixPath(name).suffix.lower()
    if kind is not None:
        if kind.extension == "pdf":
            return "pdf"
        if kind.extension in ("docx", "pptx", "xlsx", "epub"):
            return kind.extension
        if kind.extension == "zip" and ext in (".docx", ".pptx", ".xlsx", ".epub"):
            return ext[1:]
        return f"binary:{kind.mime}"
    if looks_binary(data[:SNIFF_BYTES]):
        return "binary:application/octet-stream"
    if ext in HTML_EXT or (ext not in (".md", ".markdown", ".mdx") and _HTML_HEAD.match(data[:1024])):
        return "html"
    lang = code.language_of(name)
    if lang:
        return f"code:{lang}"
    if ext in (".rst", ".rest"):
        return "rst"
    if ext == ".ipynb":
        return "notebook"
    if ext in (".csv", ".tsv"):
        return "csv"
    return "markdown" if ext in (".md", ".markdown", ".mdx") else "text"


def _front_matter_title(text: str) -> str:
    """A documentation site's page title (Jekyll, Hugo, Docusaurus: `title:` in its front matter)."""
    if not text.startswith("---"):
        return ""
    try:
        title = frontmatter(text).get("title")
    except ValueError:
        return ""
    return " ".join(title.split()) if isinstance(title, str) else ""


def convert(name: str, data: bytes) -> Doc:
    """Bytes -> Doc, or `Unconvertible` with the reason."""
    if len(data) > MAX_CONVERT_BYTES:
        raise Unconvertible("too_large", f"{len(data)} bytes")
    fmt = sniff(name, data)
    if fmt.startswith("binary:"):
        raise Unconvertible("unsupported_type", fmt.removeprefix("binary:"))
    try:
        if fmt in ("pdf", "docx", "pptx", "xlsx"):
            doc = converters.CONVERTERS[fmt](data)
        elif fmt == "epub":
            doc = markup.epub(data)
        else:
            text = decode_text(data)
            if fmt == "html":
                doc = markup.html(text)
            elif fmt.startswith("code:"):
                doc = code.parse(fmt.removeprefix("code:"), text)
            elif fmt == "rst":
                doc = markup.rst(text)
            elif fmt == "notebook":
                doc = markup.notebook(text)
            elif fmt == "csv":
                doc = Doc(text=text, format="csv")  # no headings; each part repeats the header row
            elif fmt == "markdown":
                hs = commonmark_headings(text)
                doc = Doc(text=text, format=fmt, headings=hs,
                          title=_front_matter_title(text) or next((t for _, lvl, t in hs if lvl == 1), ""))
            else:
                hs = plaintext.headings(text)
                doc = Doc(text=text, format=fmt, headings=hs, title=plaintext.title(text, hs))
    except Unconvertible:
        raise
    except Exception as e:  # noqa: BLE001 - a parser's bug on one file must not fail the others
        raise Unconvertible("decode_error", f"{fmt}: {type(e).__name__}: {e}") from e
    if not doc.text.strip():
        raise Unconvertible("empty", "no text in the file")
    return doc
