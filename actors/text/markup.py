"""Text formats with markup of their own, as Markdown-like text with `#` headings, each read by
the library made for it: trafilatura (Apache-2.0) for the main content of an HTML page (its own
`<h1>`..`<h6>`), docutils (public domain / BSD) for reStructuredText's section titles, the
standard library's json for a Jupyter notebook's cells, and markdownify (MIT) for an EPUB book's
chapters (XHTML in a zip, in the order its package lists them).
"""

from __future__ import annotations

import dataclasses
import html as html_lib
import io
import json
import posixpath
import re
import zipfile
from urllib.parse import unquote

from skald.actors.text.converters import derived_doc
from skald.actors.text.textfile import Doc, Unconvertible, markdown_headings

_MD_ESCAPE = re.compile(r"\\([\\`*_{}\[\]()#+\-.!|<>~])")
_ADORNMENT = re.compile(r"^([!-/:-@\[-`{-~])\1+\s*$")  # a reStructuredText title's under- or overline
_TITLE = re.compile(r"<title[^>]*>(.*?)</title>", re.I | re.S)
_TITLE_SEP = re.compile(r"\s+[-|–—·:]\s+")  # "Page - Site", "Page | Site", "Site: Page"
_TAG = re.compile(r"<[^>]+>")
_BUTTON = re.compile(r"<button\b[^>]*>.*?</button\s*>", re.I | re.S)
_META_CONTENT = re.compile(r"<meta\b[^>]*?\bcontent\s*=\s*(\"[^\"]*\"|'[^']*')", re.I)
_H1 = re.compile(r"<h1\b[^>]*>(.*?)</h1\s*>", re.I | re.S)
_HEAD = re.compile(r"<\?xml.*?\?>|<!DOCTYPE[^>]*>|<head\b.*?</head\s*>", re.I | re.S)  # not the chapter's text
_BLANKS = re.compile(r"\n{3,}")
_IMAGE = re.compile(r"!\[([^\]]*)\]\([^)]*\)")  # an image as its alt text: the address is not content


def html(text: str) -> Doc:
    """The page's main content with its headings; navigation, scripts, styles and footers go."""
    import trafilatura

    # include_images: trafilatura drops a <figure> whole otherwise, and documentation sets put their
    # code listings in figures (mdBook's `<figure class="listing">`): the Rust book's guessing-game
    # chapter kept 27 of its 33 code blocks without it. An image then stays as its alt text.
    text = _BUTTON.sub("", text)  # a control's label ("Copy item path" in rustdoc's titles) is not content
    body = trafilatura.extract(text, output_format="markdown", include_formatting=True, include_tables=True,
                               include_comments=False, include_links=False, include_images=True,
                               favor_recall=True)
    if not body or not body.strip():
        body = trafilatura.html2txt(text) or ""
    body = _MD_ESCAPE.sub(r"\1", body)  # `\_\_init\_\_` is `__init__` to a reader and to keyword search
    body = _IMAGE.sub(lambda m: f"[image: {m.group(1).strip()}]" if m.group(1).strip() else "", body)
    meta = trafilatura.extract_metadata(text)
    title = (meta.title if meta is not None and meta.title else "") or ""
    doc = derived_doc(body, "html", title.strip())
    return dataclasses.replace(doc, title=_page_title(text, doc.title, doc.headings))  # headings found once


def _page_title(page: str, found: str, hs: tuple[tuple[int, int, str], ...]) -> str:
    """The page's own title where trafilatura's is not: a documentation set's pages are titled
    "References and Borrowing - The Rust Programming Language", and trafilatura keeps the part the
    header's site name repeats, so the article's first heading, when it is the other part of
    `<title>`, names the page. And trafilatura takes any `<h2 class="...title">` for the title,
    such as mdBook's keyboard-help popup ("Keyboard shortcuts", 85 of 400 pages of the Rust
    documentation): a title that no `<title>`, `<meta>`, `<h1>` or heading of the article holds
    gives way to `<title>`."""
    m = _TITLE.search(page[:20_000])
    if m is None:
        return found
    whole = " ".join(html_lib.unescape(_TAG.sub("", m.group(1))).split())
    parts = [" ".join(x.split()) for x in _TITLE_SEP.split(whole)]
    if hs and hs[0][2] != found and hs[0][2] in parts:
        return hs[0][2]
    if not found or not whole or found in parts or found == whole or any(t == found for _, _, t in hs):
        return found or whole
    held = (_META_CONTENT.findall(page[:20_000]), _H1.findall(page))
    for text in (*held[0], *held[1]):
        if " ".join(html_lib.unescape(_TAG.sub("", text.strip("\"'"))).split()) == found:
            return found
    return whole


def rst(text: str) -> Doc:
    """reStructuredText with its section titles as `#` headings, line for line: a title's
    underline (and overline) become blank lines, so a section's lines are the file's own. The
    levels are docutils', which orders adornment styles as the file first uses them; a file
    docutils cannot parse stays plain text."""
    import docutils.core
    import docutils.nodes

    lines = text.splitlines()
    try:
        tree = docutils.core.publish_doctree(text, settings_overrides={
            "report_level": 5, "halt_level": 5, "warning_stream": io.StringIO(), "file_insertion_enabled": False,
            "raw_enabled": False, "doctitle_xform": False, "sectsubtitle_xform": False, "input_encoding": "unicode"})
    except Exception:  # noqa: BLE001 - docutils raises many kinds for broken markup; the text is still the text
        return Doc(text=text, format="rst")

    def walk(node: docutils.nodes.Element, level: int) -> None:
        for child in node.children:
            if not isinstance(child, docutils.nodes.section):
                continue
            title = child.next_node(docutils.nodes.title)
            under = (title.line or 0) - 1 if title is not None else -1  # docutils' line: the underline's, 1-based
            at = under - 1
            if title is not None and 0 <= at < len(lines) and _ADORNMENT.match(lines[under]):
                name = " ".join(title.astext().split())
                if at > 0 and lines[at - 1].strip() and _ADORNMENT.match(lines[at - 1]):
                    lines[at - 1] = ""
                lines[at], lines[under] = "#" * min(level, 6) + " " + name, ""
            walk(child, level + 1)

    walk(tree, 1)
    out = "\n".join(lines) + ("\n" if text.endswith("\n") else "")
    hs = markdown_headings(out)
    # derived: what is read is this text, said to be converted from reStructuredText
    return Doc(text=out, format="rst", title=next((t for _, lvl, t in hs if lvl == 1), ""), headings=hs,
               derived=True)


NOTEBOOK_OUTPUT_LINES = 20  # a cell's text output kept: what it printed, not a whole data dump


def notebook(text: str) -> Doc:
    """A Jupyter notebook (its JSON, nbformat 4 or 3) as Markdown: markdown cells as written, code
    cells fenced in the kernel's language, their text output (streams, plain results, errors) cut
    to NOTEBOOK_OUTPUT_LINES; images, HTML and widget state are left out, since as text they are
    base64 and markup that would drown the notebook's words."""
    try:
        nb = json.loads(text)
        cells = nb.get("cells")
        if cells is None:  # nbformat 3 kept its cells in worksheets
            cells = [c for ws in nb.get("worksheets", []) for c in ws.get("cells", [])]
        meta = nb.get("metadata") or {}
        lang = str((meta.get("kernelspec") or {}).get("language") or (meta.get("language_info") or {}).get("name")
                   or "python")
    except (ValueError, AttributeError, TypeError) as e:
        raise Unconvertible("decode_error", f"not a notebook: {e}") from e
    out: list[str] = []
    for cell in cells if isinstance(cells, list) else []:
        if not isinstance(cell, dict):
            continue
        src = _joined(cell.get("source", cell.get("input", ""))).strip("\n")
        kind = cell.get("cell_type")
        if kind == "code":
            if src:
                out += [f"```{lang}", src, "```", ""]
            shown = "\n".join(_joined(t) for t in map(_output_text, cell.get("outputs") or []) if t).strip("\n")
            if shown:
                lines = shown.splitlines()
                cut = len(lines) - NOTEBOOK_OUTPUT_LINES
                more = [f"({cut} more lines)"] if cut > 0 else []
                out += ["```text", *lines[:NOTEBOOK_OUTPUT_LINES], *more, "```", ""]
        elif src:
            out += [src, ""]
    body = "\n".join(out)
    hs = markdown_headings(body)
    title = str(meta.get("title") or "") or next((t for _, lvl, t in hs if lvl == 1), "")
    return Doc(text=body.strip("\n") + "\n", format="notebook", title=title, derived=True, headings=hs)


def _joined(v: object) -> str:
    return "".join(map(str, v)) if isinstance(v, list) else str(v or "")


def _output_text(o: object) -> object:
    """What an output cell says as text: a stream, a result's text/plain, an error's name and value."""
    if not isinstance(o, dict):
        return ""
    if o.get("output_type") == "stream":
        return o.get("text", "")
    if o.get("output_type") == "error":
        return f"{o.get('ename', '')}: {o.get('evalue', '')}"
    data = o.get("data") or {}
    return data.get("text/plain", o.get("text", "")) if isinstance(data, dict) else ""


EPUB_MAX_CHAPTERS = 2_000  # a book's spine is a few hundred documents; more is not a book
EPUB_CHAPTER_MAX_BYTES = 32 * 1024 * 1024


def epub(data: bytes) -> Doc:
    """An EPUB book: its chapters in reading order (the package's spine), each chapter's XHTML as
    Markdown, so every chapter's headings are the book's; the package's `dc:title` is the title."""
    from lxml import etree

    parser = etree.XMLParser(resolve_entities=False, no_network=True, huge_tree=False)
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as z:
            container = etree.fromstring(z.read("META-INF/container.xml"), parser)
            opf_path = next(iter(container.xpath("//*[local-name()='rootfile']/@full-path")), "")
            opf = etree.fromstring(z.read(str(opf_path)), parser)
            base = posixpath.dirname(str(opf_path))
            hrefs = {str(i.get("id")): str(i.get("href")) for i in opf.xpath("//*[local-name()='manifest']/*")}
            order = [hrefs[str(r)] for r in opf.xpath("//*[local-name()='spine']/*/@idref") if str(r) in hrefs]
            title = " ".join("".join(opf.xpath("//*[local-name()='title'][1]//text()")).split())
            paths = [posixpath.normpath(posixpath.join(base, unquote(h))) for h in order[:EPUB_MAX_CHAPTERS]]
            locked: set[str] = set()
            if "META-INF/encryption.xml" in z.namelist():  # fonts may be obfuscated; chapters must not be
                enc = etree.fromstring(z.read("META-INF/encryption.xml"), parser)
                locked = {str(u) for u in enc.xpath("//*[local-name()='CipherReference']/@URI")}
            if locked & set(paths):
                raise Unconvertible("encrypted", "the EPUB's chapters are encrypted (DRM)")
            pages = [z.read(path).decode("utf-8", "replace") for path in paths
                     if z.getinfo(path).file_size <= EPUB_CHAPTER_MAX_BYTES]  # a zip bomb is no chapter
    except (zipfile.BadZipFile, KeyError, etree.XMLSyntaxError) as e:
        raise Unconvertible("decode_error", f"unreadable EPUB: {e}") from e
    chapters = [_chapter_markdown(p) for p in pages]
    return derived_doc("\n\n".join(c for c in chapters if c), "epub", title)


def _chapter_markdown(page: str) -> str:
    """A book's chapter as Markdown through markdownify (MIT): a chapter is all content, so no
    boilerplate removal (trafilatura drops the heading of a page with a single paragraph); the
    head, links' targets and images go."""
    from markdownify import markdownify

    body = _HEAD.sub("", page)
    text = markdownify(body, heading_style="ATX", bullets="-", strip=["a", "img", "script", "style"])
    return _BLANKS.sub("\n\n", text).strip()
