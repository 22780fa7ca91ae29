"""Binary documents as Markdown-like text, each through the library made for it: pypdf (BSD) for
PDF, python-docx / python-pptx / openpyxl (MIT) for Office files. Structure survives as `#`
headings: PDF headings from font sizes (or the outline when the fonts tell nothing), Word heading
styles, one heading per slide and per sheet. Text formats with markup of their own (HTML,
reStructuredText, notebooks) are in `markup.py`.
"""

from __future__ import annotations

import io
import re
from collections import Counter
from collections.abc import Callable
from typing import Any

from skald.actors.text.textfile import Doc, Unconvertible, markdown_headings

HEADING_SIZE_RATIO = 1.12  # a line this much larger than the body's font is a heading
HEADING_MAX_CHARS = 150
XLSX_MAX_ROWS = 5_000  # per sheet; a spreadsheet is summarised, not reproduced
_SPACES = re.compile(r"[ \t]+")
PARAGRAPH_END = frozenset(".!?:;。！？")
# "2.1 Naming . . . . . 3": a line of a printed contents page or index (dotted leaders to a page
# number). Not a heading, and not text worth a passage: it refers to pages the converted text does
# not have, the document's node lists its sections itself, and an index page that names every
# function would outrank each function's own section on its name.
_LEADERS = re.compile(r"(?:\.\s?){4,}\s*(?:\d{1,4}|[ivxlc]{1,6})\s*$", re.I)
_HASH_LINE = re.compile(r"^(\s*)#")
_BOLD_FONT = re.compile(r"bold|black|heavy|semibold|demi", re.I)  # a font's /BaseFont ("Helvetica-Bold")
_MONO_FONT = re.compile(r"courier|mono|consol|menlo|code|typewriter|^/[A-Z]{6}\+CMTT", re.I)
Line = tuple[float, str, bool, bool]  # a PDF line: font size, text, all of it bold, all monospaced


def literal(line: str) -> str:
    """A body line as text, never as structure: a `#` that opens it (a shell comment, a config
    file quoted in a PDF) is escaped, so the section splitter does not take it for a heading."""
    return _HASH_LINE.sub(r"\1\\#", line)


def derived_doc(text: str, fmt: str, title: str, pages: tuple[int, ...] = ()) -> Doc:
    """A converted text as a Doc: derived (reads serve it), its headings found in it."""
    text = text.strip("\n") + "\n"
    return Doc(text=text, format=fmt, title=title, derived=True, pages=pages, headings=markdown_headings(text))


def pdf(data: bytes) -> Doc:
    import pypdf
    from pypdf.errors import DependencyError, PdfReadError

    try:
        reader = pypdf.PdfReader(io.BytesIO(data))
        if reader.is_encrypted:
            try:
                if not reader.decrypt(""):
                    raise Unconvertible("encrypted", "the PDF needs a password")
            except (DependencyError, NotImplementedError) as e:
                raise Unconvertible("encrypted", str(e)) from e
        pages: list[list[Line]] = []  # per page: (font size, line text, all of it bold)
        for page in reader.pages:
            lines: list[Line] = []
            cur: list[str] = []
            size = 0.0
            kind = [True, True]  # the line so far all bold, all monospaced

            def visit(text: str, cm: list[float], tm: list[float], font: object, font_size: float,
                      cur: list[str] = cur, lines: list[Line] = lines, kind: list[bool] = kind) -> None:
                nonlocal size
                parts = text.split("\n")
                name = str(font.get("/BaseFont", "")) if isinstance(font, dict) else ""
                heavy, mono = bool(_BOLD_FONT.search(name)), bool(_MONO_FONT.search(name))
                for i, part in enumerate(parts):
                    if part.strip() and not "".join(cur).strip():
                        size = abs(font_size * (tm[3] if tm[3] else 1.0))
                    if part.strip():
                        kind[0], kind[1] = kind[0] and heavy, kind[1] and mono
                    cur.append(part)
                    if i < len(parts) - 1:
                        lines.append((size, "".join(cur), kind[0], kind[1]))
                        cur.clear()
                        size, kind[0], kind[1] = 0.0, True, True

            page.extract_text(visitor_text=visit)
            if "".join(cur).strip():
                lines.append((size, "".join(cur), kind[0], kind[1]))
            pages.append(lines)
        outline = _outline(reader)
        title = str((reader.metadata or {}).get("/Title") or "").strip("() ")
        if title.lower() in ("anonymous", "untitled", "unspecified"):
            title = ""
    except Unconvertible:
        raise
    except (PdfReadError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise Unconvertible("decode_error", f"unreadable PDF: {e}") from e
    # The body's size is the prose's: a manual's code, in a smaller monospaced font, can outweigh
    # it, and then every line of prose read as a heading.
    weights: Counter[float] = Counter()
    for lines in pages:
        for s, t, _, mono in lines:
            weights[round(s, 1)] += 0 if mono else len(t.strip())
    if not any(weights.values()):
        for lines in pages:
            for s, t, _, _ in lines:
                weights[round(s, 1)] += len(t.strip())
    body = weights.most_common(1)[0][0] if weights else 0.0
    pages = _without_furniture(pages, body)
    big = sorted({round(s, 1) for lines in pages for s, t, _, mono in lines
                  if body and s >= body * HEADING_SIZE_RATIO and not mono and _heading_like(t)}, reverse=True)
    level = {s: min(i + 1, 6) for i, s in enumerate(big)}
    # Bold lines standing alone are headings where sizes name one level at most (a title) and no
    # outline gives them: many reports and papers set their sections in the body's size, bold.
    bold_level = min(len(big) + 1, 6) if big or not outline else 0
    out: list[str] = []
    starts: list[int] = []
    for n, lines in enumerate(pages):
        if out and out[-1] != "" and (out[-1].startswith("#") or out[-1][-1] in PARAGRAPH_END):
            out.append("")  # a paragraph that runs on over the page break stays one
        starts.append(len(out))
        if not big:
            for lvl, t in outline.get(n, []):
                out += ["#" * min(lvl, 6) + " " + t, ""]
        widest = max((len(t.strip()) for _, t, _, _ in lines), default=0)
        for s, t, heavy, mono in lines:
            t = _SPACES.sub(" ", t).strip()
            if not t:
                continue
            if _LEADERS.search(t):
                continue
            lv = level.get(round(s, 1)) if _heading_like(t) and not mono else None
            if not lv and heavy and not mono and bold_level and _bold_heading(t, out):
                lv = bold_level
            if lv:
                mark = "#" * lv + " "
                if len(out) >= 2 and out[-1] == "" and out[-2].startswith(mark) \
                        and (t[0].islower() or out[-2][-1] in ",:-–&"):
                    out[-2] += " " + t  # a heading wrapped onto a second line is one heading
                    continue
                if out and out[-1] != "":
                    out.append("")
                out += [mark + t, ""]
            else:
                out.append(literal(t))
                if t[-1] in PARAGRAPH_END and len(t) < widest * 0.8:
                    out.append("")  # a short line closing a sentence ends its paragraph
    _join_hyphenated(out)
    if not title:
        hs = markdown_headings("\n".join(out))
        title = hs[0][2] if hs else ""
    return derived_doc("\n".join(out), "pdf", title, tuple(starts))


FURNITURE_LINES = 2  # a page's first and last lines where running heads and page numbers sit
FURNITURE_MIN_PAGES = 3
_DIGITS = re.compile(r"\d+")
_PAGE_NUMBER = re.compile(r"^[-–—(\[]?\s*(?:page\s*)?(?:#|[ivxlc]{1,6})(?:\s*(?:of|/)\s*#)?\s*[-–—)\]]?$")


def _without_furniture(pages: list[list[Line]], body: float) -> list[list[Line]]:
    """Pages without their running heads and page numbers: a line among a page's first or last
    two that (digits aside) recurs there on three pages or more, or is a page number alone, in a
    font no larger than the body's. Left in, they split every paragraph that runs over a page
    break and put the book's name into every page's passage."""
    def key(t: str) -> str:
        return " ".join(_DIGITS.sub("#", t).lower().split())

    def zone(lines: list[Line]) -> list[int]:
        filled = [i for i, (_, t, _, _) in enumerate(lines) if t.strip()]
        return sorted(set(filled[:FURNITURE_LINES] + filled[-FURNITURE_LINES:]))

    zones = [zone(lines) for lines in pages]
    seen: Counter[str] = Counter()
    for lines, z in zip(pages, zones, strict=True):
        seen.update({key(lines[i][1]) for i in z})
    repeated = {k for k, n in seen.items() if n >= FURNITURE_MIN_PAGES and len(pages) >= FURNITURE_MIN_PAGES}
    out = []
    for lines, z in zip(pages, zones, strict=True):
        drop = {i for i in z if lines[i][0] <= body * 1.01 and (
            key(lines[i][1]) in repeated or len(pages) > 1 and _PAGE_NUMBER.match(key(lines[i][1])))}
        out.append([x for i, x in enumerate(lines) if i not in drop])
    return out


_SPLIT_WORD = re.compile(r"(?:^|\s)[A-Za-z][a-z]+-$")  # "manip-": a word the typesetter broke
_WORD_REST = re.compile(r"^([a-z]+)([^\sa-z]*)(?:\s+|$)")


def _join_hyphenated(lines: list[str]) -> None:
    """Words a typesetter hyphenated at a line's end made whole again ("manip-" / "ulation." ->
    "manipulation."), so keyword search and a quoted phrase find them. Only a plain word broken
    before a lowercase one: "YYMMDDhhmm-" and "state-of-the-" stay. Lines keep their count (the
    rest of the word moves up), so page starts stay where they are."""
    for i in range(len(lines) - 1):
        cur, nxt = lines[i], lines[i + 1]
        if not _SPLIT_WORD.search(cur) or nxt.startswith("#"):
            continue
        m = _WORD_REST.match(nxt)
        if m is None or m.end() >= len(nxt):
            continue  # the next line is that word alone: leave it
        lines[i] = cur[:-1] + m.group(1) + m.group(2)
        lines[i + 1] = nxt[m.end():]


BOLD_TITLE_CHARS, BOLD_TITLE_WORDS = 100, 12


def bold_title(t: str) -> bool:
    """Bold text that can be a heading (PDF lines, Word paragraphs set all in bold): short, with
    a letter, and not ending as a sentence or a lead-in does ("Note:")."""
    return (0 < len(t) <= BOLD_TITLE_CHARS and len(t.split()) <= BOLD_TITLE_WORDS and t[-1] not in ".,;:!?"
            and any(c.isalpha() for c in t))


def _bold_heading(t: str, out: list[str]) -> bool:
    """A bold line that is a heading: a `bold_title`, not inside a sentence the line before left
    open (a bold paragraph's lines, emphasis, run long and end in a stop)."""
    if not bold_title(t):
        return False
    prev = out[-1] if out else ""
    return not prev or not (prev[-1].isalpha() or prev[-1] in ",-")


def _heading_like(t: str) -> bool:
    t = t.strip()
    return 0 < len(t) <= HEADING_MAX_CHARS and any(c.isalpha() for c in t) and not _LEADERS.search(t)


def _outline(reader: object) -> dict[int, list[tuple[int, str]]]:
    """Outline (bookmark) titles by 0-based page, with their depth from 1."""
    out: dict[int, list[tuple[int, str]]] = {}

    def walk(items: list, depth: int) -> None:
        for it in items:
            if isinstance(it, list):
                walk(it, depth + 1)
                continue
            try:
                page = reader.get_destination_page_number(it)  # type: ignore[attr-defined]
            except Exception:  # noqa: BLE001 - a broken bookmark is skipped, not fatal
                continue
            if page is not None and getattr(it, "title", None):
                out.setdefault(page, []).append((depth, " ".join(str(it.title).split())))

    try:
        walk(reader.outline, 1)  # type: ignore[attr-defined]
    except Exception:  # noqa: BLE001 - outlines are optional structure
        return {}
    return out


def docx(data: bytes) -> Doc:
    import docx as python_docx
    from docx.table import Table

    try:
        d = python_docx.Document(io.BytesIO(data))
    except Exception as e:  # noqa: BLE001 - python-docx raises many kinds for a bad package
        raise Unconvertible("decode_error", f"unreadable DOCX: {e}") from e
    items: list[tuple[str, str, int]] = []  # (kind, text, heading level): table, title, heading, list, bold, body
    for block in d.iter_inner_content():
        if isinstance(block, Table):
            items += [("table", "| " + " | ".join(" ".join(c.text.split()) for c in row.cells) + " |", 0)
                      for row in block.rows]
            items.append(("table", "", 0))
            continue
        text = " ".join(block.text.split())
        if not text:
            continue
        style = (block.style.name if block.style is not None else "") or ""
        if style.lower().startswith("toc"):
            continue  # Word's table of contents ("TOC Heading", "toc 1"...): page references, as in a PDF
        level = _docx_heading_level(block)
        if style == "Title":
            items.append(("title", text, 1))
        elif level:
            items.append(("heading", text, level))
        elif style.startswith("List"):
            items.append(("list", text, 0))
        else:
            items.append(("bold" if _docx_bold_line(block, text) else "body", text, 0))
    # Bold lines are headings in a document that does not structure itself with heading styles
    # (one styled heading at most: a title), nested under that one.
    styled = [level for kind, _, level in items if kind == "heading"]
    bold_level = max(styled, default=0) + 1 if len(styled) <= 1 else 0
    out: list[str] = []
    for kind, text, level in items:
        if kind == "table":
            out.append(text)
        elif kind == "title":
            out += ["# " + text, ""]
        elif kind == "heading" or kind == "bold" and bold_level:
            out += ["#" * min((level or bold_level) + 1, 6) + " " + text, ""]
        elif kind == "list":
            out.append("- " + text)
        else:
            out += [literal(text), ""]
    title = (d.core_properties.title or "").strip()
    return derived_doc("\n".join(out), "docx", title)


def _docx_heading_level(p: Any) -> int:
    """A Word paragraph's heading level: a "Heading N" style, or one based on it, or an outline
    level (what Word's navigation pane follows) set on the paragraph or its style; 0 for text."""
    levels = p._p.xpath("./w:pPr/w:outlineLvl/@w:val")
    style = p.style
    for _ in range(4):
        if style is None:
            break
        if m := re.match(r"Heading (\d)", style.name or ""):
            return int(m.group(1))
        levels = levels or style.element.xpath("./w:pPr/w:outlineLvl/@w:val")
        style = style.base_style
    level = int(levels[0]) + 1 if levels and str(levels[0]).isdigit() else 0
    return level if 1 <= level <= 9 else 0


def _docx_bold_line(p: Any, text: str) -> bool:
    """A `bold_title` paragraph set all in bold: the heading of a document written without heading
    styles (counted only when the document has none)."""
    if not bold_title(text):
        return False
    runs = [r for r in p.runs if r.text.strip()]
    style_bold = bool(p.style is not None and p.style.font.bold)
    return bool(runs) and all(r.bold or (r.bold is None and style_bold) for r in runs)


def pptx(data: bytes) -> Doc:
    import pptx as python_pptx

    try:
        prs = python_pptx.Presentation(io.BytesIO(data))
    except Exception as e:  # noqa: BLE001
        raise Unconvertible("decode_error", f"unreadable PPTX: {e}") from e
    out: list[str] = []
    for n, slide in enumerate(prs.slides, 1):
        title_shape = slide.shapes.title
        title = " ".join(title_shape.text.split()) if title_shape is not None and title_shape.has_text_frame else ""
        out += [f"## Slide {n}" + (f": {title}" if title else ""), ""]
        skip = title_shape.shape_id if title_shape is not None else None
        out += _slide_shapes(slide.shapes, skip)
        if slide.has_notes_slide:
            notes = " ".join(slide.notes_slide.notes_text_frame.text.split())
            if notes:
                out += ["", "Notes: " + notes]
        out.append("")
    return derived_doc("\n".join(out), "pptx", (prs.core_properties.title or "").strip())


def _slide_shapes(shapes: Any, skip: int | None) -> list[str]:
    """A slide's text in reading order: text frames as bullets, tables as rows, and the shapes
    inside a group (decks group a diagram's boxes and labels) as if they stood alone."""
    out: list[str] = []
    for shape in shapes:
        if shape.shape_id == skip:
            continue
        if getattr(shape, "shapes", None) is not None:  # a group shape
            out += _slide_shapes(shape.shapes, skip)
        elif getattr(shape, "has_table", False) and shape.has_table:
            for row in shape.table.rows:
                out.append("| " + " | ".join(" ".join(c.text.split()) for c in row.cells) + " |")
            out.append("")
        elif shape.has_text_frame:
            for para in shape.text_frame.paragraphs:
                t = " ".join("".join(r.text for r in para.runs).split())
                if t:
                    out.append(("  " * para.level) + "- " + t)
    return out


def xlsx(data: bytes) -> Doc:
    import openpyxl

    try:
        wb = openpyxl.load_workbook(io.BytesIO(data), read_only=True, data_only=True)
    except Exception as e:  # noqa: BLE001
        raise Unconvertible("decode_error", f"unreadable XLSX: {e}") from e
    out: list[str] = []
    try:
        for ws in wb.worksheets:
            out += [f"## Sheet: {ws.title}", ""]
            for i, row in enumerate(ws.iter_rows(values_only=True)):
                if i >= XLSX_MAX_ROWS:
                    out.append(f"(rows after {XLSX_MAX_ROWS} left out)")
                    break
                cells = ["" if v is None else " ".join(str(v).split()) for v in row]
                if any(cells):
                    out.append("| " + " | ".join(cells) + " |")
            out.append("")
        title = (wb.properties.title or "").strip()
    finally:
        wb.close()
    return derived_doc("\n".join(out), "xlsx", title)


CONVERTERS: dict[str, Callable[[bytes], Doc]] = {"pdf": pdf, "docx": docx, "pptx": pptx, "xlsx": xlsx}
