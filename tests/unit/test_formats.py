"""Files converted to text, each through its library, over real files the tests write
(support/documents.py): types from the bytes, headings of every format, what conversion leaves out."""

from __future__ import annotations

import pytest

from skald.actors.text import extract, formats, sections
from skald.actors.text.textfile import Unconvertible
from support import documents as sample_docs


@pytest.mark.parametrize("name,data,fmt", [
    ("handbook.md", sample_docs.handbook_md().encode(), "markdown"),
    ("page.html", sample_docs.handbook_html().encode(), "html"),
    ("page", sample_docs.handbook_html().encode(), "html"),  # no extension: the bytes say HTML
    ("handbook.pdf", sample_docs.handbook_pdf(), "pdf"),
    ("renamed.bin", sample_docs.handbook_pdf(), "pdf"),  # the bytes decide, not the name
    ("report.docx", sample_docs.report_docx(), "docx"),
    ("deck.pptx", sample_docs.deck_pptx(), "pptx"),
    ("budget.xlsx", sample_docs.budget_xlsx(), "xlsx"),
    ("ratelimit.py", sample_docs.PY_MODULE.encode(), "code:python"),
    ("session.ts", sample_docs.TS_MODULE.encode(), "code:typescript"),
    ("notes.txt", b"plain words", "text"),
])
def test_types_come_from_the_bytes(name: str, data: bytes, fmt: str) -> None:
    assert formats.sniff(name, data) == fmt
    doc = formats.convert(name, data)
    assert doc.format == fmt and doc.text.strip()


@pytest.mark.parametrize("name,data,reason", [
    ("logo.png", sample_docs.PNG, "unsupported_type"),
    ("notes.md", sample_docs.PNG, "unsupported_type"),  # a PNG named .md is still a PNG
    ("blob.bin", sample_docs.BLOB, "unsupported_type"),
    ("locked.pdf", sample_docs.handbook_pdf(16, encrypt="secret"), "encrypted"),
    ("broken.pdf", b"%PDF-1.4\n" + b"garbage " * 40, "decode_error"),
    ("empty.md", b"   \n\n", "empty"),
])
def test_files_that_cannot_be_converted_say_why(name: str, data: bytes, reason: str) -> None:
    with pytest.raises(formats.Unconvertible) as e:
        formats.convert(name, data)
    assert e.value.reason == reason


def test_text_in_other_encodings_is_decoded_not_replaced() -> None:
    latin = "Café au lait, crème brûlée et pâte feuilletée: la carte du déjeuner d'aujourd'hui.".encode("latin-1")
    assert formats.convert("menu.txt", latin).text.startswith("Café au lait, crème brûlée")
    utf16 = "Grüße aus München".encode("utf-16")
    assert formats.convert("hello.txt", utf16).text == "Grüße aus München"


def test_html_keeps_the_main_content_and_its_headings() -> None:
    doc = formats.convert("page.html", sample_docs.handbook_html().encode())
    assert doc.title == "Operations handbook" and doc.derived
    for boilerplate in ("Pricing plans", "analytics boilerplate", "Cookie preferences", "color:#333"):
        assert boilerplate not in doc.text
    titles = [t for _, _, t in doc.headings]
    assert titles[0] == "Operations handbook" and "Recovery objectives" in titles
    assert "recovery point objective is fifteen minutes" in doc.text


def test_a_documentation_pages_title_is_its_own_not_the_sites_nor_a_popups() -> None:
    prose = "<p>" + "A reference lets a function use a value without taking ownership of it. " * 6 + "</p>"
    page = ("<html><head><title>References and Borrowing - The Foo Book</title></head><body>"
            "<div id='menu-bar'><h1 class='menu-title'>The Foo Book</h1></div><main>"
            f"<h1>References and Borrowing</h1>{prose}<h2>Mutable references</h2>{prose}</main></body></html>")
    assert formats.convert("ch04.html", page.encode()).title == "References and Borrowing"
    plain = page.replace("References and Borrowing - The Foo Book", "The Foo Book")
    assert formats.convert("ch04.html", plain.encode()).title == "The Foo Book"  # nothing says otherwise
    # trafilatura takes any <h2 class="...title"> for the title; mdBook's help popup has one.
    book = ("<html><head><title>The rustc book</title></head><body><div id='help'>"
            "<h2 class='mdbook-help-title'>Keyboard shortcuts</h2><p>Press S to search</p></div><main>"
            f"<h1>What is rustc?</h1>{prose}<h1>Command-line arguments</h1>{prose}</main></body></html>")
    assert formats.convert("print.html", book.encode()).title == "The rustc book"
    meta = book.replace("<title>", "<meta property='og:title' content='Keyboard shortcuts'><title>")
    assert formats.convert("print.html", meta.encode()).title == "Keyboard shortcuts"  # the page says so
    # rustdoc's heading holds a button; its label is not the title (nor text of the page).
    api = ("<html><head><title>env in std - Rust</title></head><body><main><h1>Macro <span>env</span>&nbsp;"
           f"<button id='copy-path' title='Copy item path to clipboard'>Copy item path</button></h1>{prose}"
           "</main></body></html>")
    doc = formats.convert("macro.env.html", api.encode())
    assert doc.title == "Macro env" and "Copy item path" not in doc.text


def test_html_keeps_code_listings_set_in_figures() -> None:
    prose = "<p>" + "The function borrows its argument instead of taking ownership of it. " * 6 + "</p>"
    page = ("<html><head><title>Borrowing</title></head><body><nav><a href='/'>Home</a></nav><main><article>"
            f"<h1>References and borrowing</h1>{prose}<figure class='listing'><span>Filename: src/main.rs</span>"
            "<pre><code>fn calculate_length(s: &amp;String) -&gt; usize {\n    s.len()\n}</code></pre></figure>"
            f"<p><img src='https://cdn.example.com/img/trpl04-05.png' alt='s points at s1 on the heap'></p>"
            f"<p><img src='spacer.gif' alt=''></p>{prose}</article></main></body></html>")
    doc = formats.convert("borrowing.html", page.encode())
    assert "fn calculate_length(s: &String) -> usize {" in doc.text and "Home" not in doc.text
    assert "[image: s points at s1 on the heap]" in doc.text  # its alt text; the address is not content
    assert "cdn.example.com" not in doc.text and "spacer" not in doc.text


def test_pdf_headings_come_from_font_sizes_and_pages_are_kept() -> None:
    doc = formats.convert("handbook.pdf", sample_docs.handbook_pdf())
    levels = {t: lvl for _, lvl, t in doc.headings}
    assert levels["Operations handbook"] == 1 and levels["Recovery objectives"] == 2
    assert len(doc.pages) > 3 and doc.pages[0] == 0
    assert "recovery point objective is fifteen minutes" in " ".join(doc.text.split())


def test_running_heads_and_page_numbers_are_left_out_and_paragraphs_run_over_page_breaks() -> None:
    """A printed book's pages carry a running head and a page number; left in, they split each
    sentence that runs over a page break and put the book's name into every page's passage."""
    import io

    from reportlab.lib.pagesizes import A4
    from reportlab.lib.styles import getSampleStyleSheet
    from reportlab.platypus import Paragraph, SimpleDocTemplate

    styles = getSampleStyleSheet()

    def decorate(canvas, doc) -> None:  # type: ignore[no-untyped-def]
        canvas.setFont("Helvetica", 8)
        canvas.drawString(72, A4[1] - 40, "Operations Guide" if doc.page % 2 else "Platform Handbook, 2nd edition")
        canvas.drawCentredString(A4[0] / 2, 30, f"- {doc.page} -")

    sentences = [f"Step {k} of the recovery drill restores replica {k} from the snapshot taken at {k} am."
                 for k in range(1, 400)]
    story = [Paragraph("Operations Guide", styles["Heading1"])]
    story += [Paragraph(" ".join(sentences[i:i + 9]), styles["BodyText"]) for i in range(0, len(sentences), 9)]
    buf = io.BytesIO()
    SimpleDocTemplate(buf, pagesize=A4).build(story, onFirstPage=decorate, onLaterPages=decorate)
    doc = formats.convert("guide.pdf", buf.getvalue())
    assert len(doc.pages) > 4 and doc.title == "Operations Guide"
    assert [t for _, _, t in doc.headings] == ["Operations Guide"]  # the title, once, not each odd page's head
    assert "Platform Handbook" not in doc.text and "- 3 -" not in doc.text
    flat = " ".join(doc.text.split())
    assert all(s in flat for s in sentences)  # none cut by a page's furniture


def test_words_a_typesetter_hyphenated_at_a_lines_end_are_whole_again() -> None:
    import io

    from reportlab.pdfgen import canvas as pdf_canvas

    lines = ["The replica keeps a durable copy of the log and its man-", "agement of snapshots is automatic.",
             "Timestamps are written as YYMMDDhhmm-", "hh'mm' in the header of every file.",
             "It follows a state-of-the-", "art design that many systems share today."]
    buf = io.BytesIO()
    c = pdf_canvas.Canvas(buf)
    c.setFont("Helvetica", 11)
    for i, line in enumerate(lines):
        c.drawString(72, 700 - 14 * i, line)
    c.save()
    doc = formats.convert("notes.pdf", buf.getvalue())
    flat = " ".join(doc.text.split())
    assert "its management, of snapshots" not in flat and "its management of snapshots is automatic." in flat
    assert "YYMMDDhhmm- hh'mm'" in flat and "state-of-the- art design" in flat  # not plain words: kept
    assert len(doc.text.splitlines()) >= len(lines)  # lines keep their places (pages start where they did)


def test_word_headings_without_heading_styles() -> None:
    """Many Word documents are written without heading styles: headings typed as bold lines, a
    house style based on "Heading 2", or an outline level set on the paragraph."""
    import io

    import docx as python_docx
    from docx.enum.style import WD_STYLE_TYPE
    from docx.oxml import OxmlElement
    from docx.oxml.ns import qn

    def save(d: python_docx.document.Document) -> bytes:
        buf = io.BytesIO()
        d.save(buf)
        return buf.getvalue()

    body = "Messages are kept for thirty days and deleted by the nightly job. " * 4
    d = python_docx.Document()
    d.add_heading("Retention", level=1)  # one styled heading: the title
    for name in ("Scope", "Deletion"):
        d.add_paragraph().add_run(name).bold = True
        p = d.add_paragraph(body)
    p = d.add_paragraph()
    p.add_run("Note: ").bold = True
    p.add_run("a sentence that opens in bold is not a heading.")
    doc = formats.convert("policy.docx", save(d))
    assert [(lvl, t) for _, lvl, t in doc.headings] == [(2, "Retention"), (3, "Scope"), (3, "Deletion")]

    d = python_docx.Document()
    house = d.styles.add_style("Section Title", WD_STYLE_TYPE.PARAGRAPH)
    house.base_style = d.styles["Heading 2"]
    d.add_heading("Handbook", level=1)
    d.add_paragraph("Backups", style="Section Title")
    d.add_paragraph(body)
    outlined = d.add_paragraph("Restores")
    lvl = OxmlElement("w:outlineLvl")
    lvl.set(qn("w:val"), "2")  # outline level 3
    outlined._p.get_or_add_pPr().append(lvl)
    d.add_paragraph(body)
    d.add_paragraph().add_run("Important").bold = True  # emphasis in a styled document, not a heading
    d.add_paragraph(body)
    doc = formats.convert("handbook.docx", save(d))
    assert [(lvl, t) for _, lvl, t in doc.headings] == [(2, "Handbook"), (3, "Backups"), (4, "Restores")]


def test_pdf_headings_set_bold_at_the_bodys_size_and_prose_beside_much_code() -> None:
    """Reports set section headings bold in the body's size; manuals hold more code, in a smaller
    monospaced font, than prose, and the body's size was then the code's, every line of prose a
    heading. A title wrapped onto a second line is one heading."""
    import io

    from reportlab.lib.pagesizes import A4
    from reportlab.lib.styles import ParagraphStyle, getSampleStyleSheet
    from reportlab.platypus import Paragraph, Preformatted, SimpleDocTemplate

    st = getSampleStyleSheet()
    bold = ParagraphStyle("BoldBody", parent=st["BodyText"], fontName="Helvetica-Bold")
    code = "\n".join(f"    restore(replica_{i}, snapshot=latest, verify=True, timeout_s=30)" for i in range(40))
    story = [Paragraph("Recovery handbook for the storage cluster: replicas, snapshots, drills and "
                       "audits", st["Title"])]
    for name in ("Restoring a replica", "Verifying a snapshot", "Running the drill"):
        story += [Paragraph(name, bold),
                  Paragraph("The operator restores each replica from the latest snapshot and checks it. " * 3,
                            st["BodyText"]),
                  Preformatted(code, st["Code"])]
    buf = io.BytesIO()
    SimpleDocTemplate(buf, pagesize=A4).build(story)
    doc = formats.convert("handbook.pdf", buf.getvalue())
    assert [t for _, _, t in doc.headings] == [
        "Recovery handbook for the storage cluster: replicas, snapshots, drills and audits",
        "Restoring a replica", "Verifying a snapshot", "Running the drill"]
    assert [lvl for _, lvl, _ in doc.headings] == [1, 2, 2, 2]


def test_contents_lines_and_quoted_comments_are_not_headings() -> None:
    """A printed contents page ("2 Naming . . . . 3") is set in a heading's font, and a shell or
    config comment quoted in a document opens with `#`: neither may open a section, and the
    contents lines are left out."""
    import io

    import docx as python_docx
    from reportlab.lib.pagesizes import A4
    from reportlab.lib.styles import getSampleStyleSheet
    from reportlab.platypus import Paragraph, Preformatted, SimpleDocTemplate

    styles = getSampleStyleSheet()
    buf = io.BytesIO()
    SimpleDocTemplate(buf, pagesize=A4).build([
        Paragraph("Manual", styles["Heading1"]),
        Paragraph("1 Introduction . . . . . . . . . . 1", styles["Heading3"]),
        Paragraph("2 Naming . . . . . . . . . . . . 3", styles["Heading3"]),
        Paragraph("Introduction", styles["Heading2"]),
        Paragraph("The cache file is written by the updater and starts like this. " * 4, styles["BodyText"]),
        Preformatted("# This file was generated by the updater. DO NOT EDIT!\nkey = value", styles["Code"]),
        Paragraph("Naming", styles["Heading2"]),
        Paragraph("Names are dotted paths. " * 6, styles["BodyText"]),
    ])
    pdf = formats.convert("manual.pdf", buf.getvalue())
    assert [t for _, _, t in pdf.headings] == ["Manual", "Introduction", "Naming"]
    assert ". . . ." not in pdf.text  # the contents page refers to pages; the document node lists sections
    assert "\\# This file was generated by the updater." in pdf.text  # kept, as text
    d = python_docx.Document()
    d.add_paragraph("Contents", style="TOC Heading")
    toc = d.styles.add_style("toc 1", 1)  # WD_STYLE_TYPE.PARAGRAPH, as Word names its contents entries
    d.add_paragraph("Setup\t1", style=toc)
    d.add_heading("Setup", level=1)
    d.add_paragraph("# enable the cache")
    out = io.BytesIO()
    d.save(out)
    word = formats.convert("setup.docx", out.getvalue())
    assert [t for _, _, t in word.headings] == ["Setup"] and "\\# enable the cache" in word.text
    assert "Contents" not in word.text and "Setup\t1" not in word.text  # Word's contents entries


def test_markdown_headings_are_commonmarks_setext_included_front_matter_and_code_excluded() -> None:
    src = ("---\ntitle: Guide\nlayout: page\n---\n\nGuide\n=====\n\nWhat it is.\n\nInstall\n-------\n\n"
           "Steps.\n\n```\n# not a heading\n---\n```\n\n    # indented code\n\n## Usage\n\nUse it.\n")
    doc = formats.convert("README.md", src.encode())
    assert doc.headings == ((5, 1, "Guide"), (10, 2, "Install"), (22, 2, "Usage"))
    assert doc.title == "Guide"  # the front matter's title (a site's page title), else the first level-1 heading
    start = sections.split(doc, "README.md")[0]
    assert "layout" not in start.abstract and "What it is." in start.abstract
    assert extract.first_paragraph("Install\n-------\n\nSteps.\n") == "Steps."  # an abstract skips the title


def test_restructuredtext_sections_are_headings_line_for_line() -> None:
    src = ("=========\n Manual\n=========\n\nWhat the tool does.\n\nInstall\n-------\n\nRun this::\n\n"
           "    Not a title\n    -----------\n\nUsage\n-----\n\nCall it.\n\nOptions\n~~~~~~~\n\nThe flags.\n")
    doc = formats.convert("manual.rst", src.encode())
    assert doc.format == "rst" and doc.title == "Manual" and doc.derived  # reads say it was converted
    assert [(lvl, t) for _, lvl, t in doc.headings] == [(1, "Manual"), (2, "Install"), (2, "Usage"), (3, "Options")]
    lines, original = doc.text.splitlines(), src.splitlines()
    assert len(lines) == len(original)  # a section's lines are the file's own
    assert [lines[i] for i, _, _ in doc.headings] == ["# Manual", "## Install", "## Usage", "### Options"]
    assert [original[i] for i, _, _ in doc.headings] == [" Manual", "Install", "Usage", "Options"]
    assert "    Not a title\n    -----------" in doc.text  # a literal block is text, whatever it looks like
    broken = formats.convert("notes.rst", b"Title\n=====\n\n.. unknown-directive::\n\n   body\n")
    assert [t for _, _, t in broken.headings] == ["Title"]  # unknown markup does not lose the structure


def test_a_notebook_is_its_cells_not_its_json() -> None:
    import json

    nb = {"nbformat": 4, "nbformat_minor": 5, "metadata": {"kernelspec": {"language": "python", "name": "python3"}},
          "cells": [
              {"cell_type": "markdown", "metadata": {},
               "source": ["# Churn analysis\n", "\n", "Which plans lose users."]},
              {"cell_type": "code", "metadata": {}, "execution_count": 1,
               "source": "df = load('plans.csv')\ndf.churn.mean()",
               "outputs": [{"output_type": "execute_result", "execution_count": 1, "metadata": {},
                            "data": {"text/plain": ["0.042"], "image/png": "iVBORw0KGgo" + "A" * 4000}},
                           {"output_type": "stream", "name": "stdout", "text": [f"row {i}\n" for i in range(30)]}]},
              {"cell_type": "markdown", "metadata": {}, "source": "## By plan\n\nThe free plan churns most."},
          ]}
    doc = formats.convert("churn.ipynb", json.dumps(nb).encode())
    assert doc.format == "notebook" and doc.derived and doc.title == "Churn analysis"
    assert [t for _, _, t in doc.headings] == ["Churn analysis", "By plan"]
    assert "```python\ndf = load('plans.csv')\ndf.churn.mean()\n```" in doc.text and "0.042" in doc.text
    assert "row 18" in doc.text and "row 29" not in doc.text and "(11 more lines)" in doc.text
    assert "iVBORw0KGgo" not in doc.text and '"cell_type"' not in doc.text
    with pytest.raises(Unconvertible):
        formats.convert("broken.ipynb", b"{not json")


def test_office_documents_keep_headings_tables_slides_and_sheets() -> None:
    report = formats.convert("report.docx", sample_docs.report_docx())
    assert [t for _, _, t in report.headings] == ["Quarterly report", "Costs", "Hiring"]
    assert "| EMEA | 9% |" in report.text and "- Two site reliability engineers" in report.text
    deck = formats.convert("deck.pptx", sample_docs.deck_pptx())
    assert [t for _, _, t in deck.headings] == ["Slide 1: Roadmap", "Slide 2: Risks"]
    assert deck.text.count("Roadmap") == 1  # the title is the heading, not repeated as a bullet
    sheet = formats.convert("budget.xlsx", sample_docs.budget_xlsx())
    assert "## Sheet: Budget" in sheet.text and "| Platform | 125000 |" in sheet.text


def test_a_slides_tables_and_grouped_shapes_are_read() -> None:
    import io

    from pptx import Presentation
    from pptx.util import Inches

    prs = Presentation()
    slide = prs.slides.add_slide(prs.slide_layouts[5])  # title only
    slide.shapes.title.text = "Capacity"
    table = slide.shapes.add_table(2, 2, Inches(1), Inches(2), Inches(4), Inches(1)).table
    for (r, c), text in {(0, 0): "Region", (0, 1): "Nodes", (1, 0): "EMEA", (1, 1): "42"}.items():
        table.cell(r, c).text = text
    group = slide.shapes.add_group_shape()
    group.shapes.add_textbox(Inches(1), Inches(4), Inches(3), Inches(1)).text_frame.text = "Queue feeds the indexer"
    buf = io.BytesIO()
    prs.save(buf)
    doc = formats.convert("capacity.pptx", buf.getvalue())
    assert [t for _, _, t in doc.headings] == ["Slide 1: Capacity"]
    assert "| Region | Nodes |" in doc.text and "| EMEA | 42 |" in doc.text
    assert "- Queue feeds the indexer" in doc.text and doc.text.count("Capacity") == 1


def test_an_epub_is_its_chapters_in_reading_order() -> None:
    prose = "<p>" + "Consumers acknowledge each message once it is processed and stored. " * 5 + "</p>"
    chapters = {"intro": f"<h1>Introduction</h1>{prose}",
                "acks": f"<h1>Acknowledgements</h1>{prose}<h2>Redelivery</h2>{prose}"}
    doc = formats.convert("queues.epub", sample_docs.book_epub(chapters, ["intro", "acks"]))
    assert doc.format == "epub" and doc.derived and doc.title == "Operating Queues"
    assert [t for _, _, t in doc.headings] == ["Introduction", "Acknowledgements", "Redelivery"]
    assert "xml version" not in doc.text and "<title>" not in doc.text and "Consumers acknowledge" in doc.text
    reordered = formats.convert("queues.epub", sample_docs.book_epub(chapters, ["acks", "intro"]))
    assert [t for _, _, t in reordered.headings][0] == "Acknowledgements"  # the spine, not the zip, orders
    with pytest.raises(Unconvertible) as e:
        locked = sample_docs.book_epub(chapters, ["intro", "acks"], locked=("OEBPS/text/acks.xhtml",))
        formats.convert("locked.epub", locked)
    assert e.value.reason == "encrypted"
    fonts = sample_docs.book_epub(chapters, ["intro"], locked=("OEBPS/fonts/a.otf",))
    fonts_only = formats.convert("f.epub", fonts)
    assert [t for _, _, t in fonts_only.headings] == ["Introduction"]  # obfuscated fonts are no DRM
    import io
    import zipfile

    hollow = io.BytesIO()
    with zipfile.ZipFile(hollow, "w") as z:
        z.writestr("mimetype", "application/epub+zip")  # an EPUB by its bytes, with no package inside
    cut = sample_docs.book_epub(chapters, ["intro"])[:300]
    for name, data in (("hollow.epub", hollow.getvalue()), ("cut.epub", cut)):
        with pytest.raises(Unconvertible) as bad:
            formats.convert(name, data)
        assert bad.value.reason in ("decode_error", "unsupported_type"), name
