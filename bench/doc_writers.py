"""The long-document bench's documents written in each format it measures: Markdown,
reStructuredText, plain text, HTML pages with boilerplate, PDFs (plain, paged as books print them,
and with bold body-size headings), Word (styled, and with bold lines for headings), and Markdown
with a section's prose on one line."""

from __future__ import annotations

import html
import io
import textwrap
from dataclasses import dataclass
from typing import Any

NAV = ("<nav><a href='/'>Docs home</a> <a href='/download'>Download installers for every platform</a> "
       "<a href='/community'>Community forums and mailing lists</a></nav>")
FOOT = "<footer>Copyright the authors. Licensed under the PSF licence. Report a bug. Cookie settings.</footer>"


@dataclass
class Block:
    kind: str  # h1 h2 h3 p pre
    text: str


def to_markdown(title: str, blocks: list[Block]) -> str:
    out = [f"# {title}", ""]
    for b in blocks:
        if b.kind.startswith("h"):
            out += ["#" * (int(b.kind[1]) + 1) + " " + b.text, ""]
        elif b.kind == "pre":
            out += ["```", b.text, "```", ""]
        else:
            out += [b.text, ""]
    return "\n".join(out)


def to_long_paragraphs(title: str, blocks: list[Block]) -> str:
    """Markdown whose sections keep their prose as one paragraph on one line, as Word documents
    and web pages often do: lines of up to 1,500 tokens, past the embedder's window."""
    out: list[Block] = []
    for b in blocks:
        if b.kind == "p" and out and out[-1].kind == "p":
            out[-1] = Block("p", f"{out[-1].text} {b.text}")
        else:
            out.append(b)
    return to_markdown(title, out)


def to_rst(title: str, blocks: list[Block]) -> str:
    """reStructuredText: an overlined title, sections underlined by level, literal blocks indented."""
    bar = "=" * len(title)
    out = [bar, title, bar, ""]
    for b in blocks:
        if b.kind.startswith("h"):
            out += [b.text, "=-~^"[int(b.kind[1]) - 1] * max(len(b.text), 4), ""]
        elif b.kind == "pre":
            out += ["::", "", *("    " + ln for ln in b.text.splitlines()), ""]
        else:
            out += [b.text, ""]
    return "\n".join(out)


def to_text(title: str, blocks: list[Block]) -> str:
    """Plain text as manuals and specs are kept: the title underlined, sections numbered (`2.`,
    `2.1.`), a third level underlined with dashes, paragraphs wrapped at 72 columns, code indented."""
    out = [title, "=" * len(title), ""]
    number = [0, 0]
    for b in blocks:
        if b.kind == "h1":
            number = [number[0] + 1, 0]
            out += [f"{number[0]}. {b.text}", ""]
        elif b.kind == "h2":
            number[1] += 1
            out += [f"{number[0]}.{number[1]}. {b.text}", ""]
        elif b.kind.startswith("h"):
            out += [b.text, "-" * len(b.text), ""]
        elif b.kind == "pre":
            out += [*("    " + ln for ln in b.text.splitlines()), ""]
        else:
            out += [*textwrap.wrap(b.text, 72), ""]
    return "\n".join(out)


def to_html(title: str, blocks: list[Block]) -> str:
    body = []
    for b in blocks:
        t = html.escape(b.text)
        if b.kind.startswith("h"):
            body.append(f"<h{int(b.kind[1]) + 1}>{t}</h{int(b.kind[1]) + 1}>")
        elif b.kind == "pre":
            body.append(f"<pre>{t}</pre>")
        else:
            body.append(f"<p>{t}</p>")
    return (f"<!DOCTYPE html><html><head><title>{html.escape(title)}</title><style>body{{margin:0}}</style>"
            "<script>function track(){return 'page view analytics';}</script></head><body>"
            f"{NAV}<main><article><h1>{html.escape(title)}</h1>{''.join(body)}</article></main>{FOOT}</body></html>")


def _pdf_story(title: str, blocks: list[Block], bold_headings: bool = False) -> list[Any]:
    from reportlab.lib.styles import ParagraphStyle, getSampleStyleSheet
    from reportlab.platypus import Paragraph, Preformatted

    st = getSampleStyleSheet()
    bold = ParagraphStyle("BoldBody", parent=st["BodyText"], fontName="Helvetica-Bold", spaceBefore=6)
    story: list[Any] = [Paragraph(html.escape(title), st["Heading1"])]
    for b in blocks:
        if b.kind.startswith("h") and bold_headings:
            story.append(Paragraph(html.escape(b.text), bold))
        elif b.kind.startswith("h"):
            story.append(Paragraph(html.escape(b.text), st[f"Heading{min(int(b.kind[1]) + 1, 4)}"]))
        elif b.kind == "pre":
            story.append(Preformatted(b.text, st["Code"]))
        else:
            story.append(Paragraph(html.escape(b.text), st["BodyText"]))
    return story


def to_bold_pdf(title: str, blocks: list[Block]) -> bytes:
    """The PDF as many reports are set: a large title, each section's heading in the body's size,
    bold."""
    from reportlab.lib.pagesizes import A4
    from reportlab.platypus import SimpleDocTemplate

    buf = io.BytesIO()
    SimpleDocTemplate(buf, pagesize=A4, title=title).build(_pdf_story(title, blocks, bold_headings=True))
    return buf.getvalue()


def to_pdf(title: str, blocks: list[Block]) -> bytes:
    from reportlab.lib.pagesizes import A4
    from reportlab.platypus import SimpleDocTemplate

    buf = io.BytesIO()
    SimpleDocTemplate(buf, pagesize=A4, title=title).build(_pdf_story(title, blocks))
    return buf.getvalue()


def to_paged_pdf(title: str, blocks: list[Block]) -> bytes:
    """The PDF as books and manuals print one: a running head (the book's name on even pages, the
    document's on odd ones) and the page number at the foot of every page."""
    from reportlab.lib.pagesizes import A4
    from reportlab.platypus import SimpleDocTemplate

    def decorate(canvas: Any, doc: Any) -> None:
        canvas.saveState()
        canvas.setFont("Helvetica", 8)
        head = "The Python Language Reference" if doc.page % 2 == 0 else title
        canvas.drawString(72, A4[1] - 40, head)
        canvas.drawCentredString(A4[0] / 2, 30, f"Page {doc.page}")
        canvas.restoreState()

    buf = io.BytesIO()
    SimpleDocTemplate(buf, pagesize=A4, title=title).build(_pdf_story(title, blocks), onFirstPage=decorate,
                                                         onLaterPages=decorate)
    return buf.getvalue()


def to_docx(title: str, blocks: list[Block], styled: bool = True) -> bytes:
    """A Word document as an office suite writes one: the built-in heading styles, code in a
    monospaced run line by line. Unstyled, as many are written: headings typed as bold lines."""
    import docx

    d = docx.Document()
    d.core_properties.title = title
    d.add_heading(title, level=1)
    for b in blocks:
        if b.kind.startswith("h") and not styled:
            d.add_paragraph().add_run(b.text).bold = True
        elif b.kind.startswith("h"):
            d.add_heading(b.text, level=min(int(b.kind[1]) + 1, 9))
        elif b.kind == "pre":
            for line in b.text.splitlines() or [""]:
                d.add_paragraph().add_run(line).font.name = "Courier New"
        else:
            d.add_paragraph(b.text)
    buf = io.BytesIO()
    d.save(buf)
    return buf.getvalue()
