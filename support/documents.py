"""Real documents the tests write with the libraries that write them: a PDF (reportlab, with an
outline and larger heading fonts), an HTML page with navigation, scripts and a footer, a DOCX,
a PPTX, an XLSX, a Python and a TypeScript module, a 40-section Markdown handbook, a PNG and
a binary blob. Every section states one fact the tests can ask for."""

from __future__ import annotations

import io
from pathlib import Path

TOPICS = [
    ("Backups", "Backups run nightly at 02:00 UTC and are kept for thirty-five days in two regions."),
    ("Recovery objectives", "The recovery point objective is fifteen minutes and the recovery time objective "
                            "is one hour for every tier-one service."),
    ("On-call rotation", "The on-call rotation hands over every Tuesday at 10:00 in the team channel."),
    ("Incident severity", "A severity-one incident pages the incident commander within five minutes."),
    ("Change freeze", "The change freeze starts on the fifteenth of December and ends on the third of January."),
    ("Certificate renewal", "TLS certificates are renewed by the cert-bot job thirty days before expiry."),
    ("Database failover", "Database failover is triggered by the orchestrator after three missed heartbeats."),
    ("Log retention", "Application logs are kept for ninety days, audit logs for seven years."),
]
FILLER = ("Operators read this part when the dashboard turns amber and nothing obvious is wrong. It repeats the "
          "general rules of the house: write down what you did, say it in the channel, and never change two "
          "things at once. ")


def handbook_sections(n: int = 40) -> list[tuple[str, str]]:
    """(title, body) for `n` sections; the first eight carry the facts above, in the middle and end."""
    out = []
    facts = dict(TOPICS)
    order = [f"Procedure {i}" for i in range(n)]
    # facts land in the middle and at the end of the document, never at its head
    slots = [n // 2 - 4, n // 2 - 1, n // 2 + 2, n // 2 + 5, n - 7, n - 5, n - 3, n - 1]
    for (title, _), at in zip(TOPICS, slots, strict=True):
        order[at] = title
    for i, title in enumerate(order):
        body = FILLER * 3 + (facts[title] + " " if title in facts else f"Procedure {i} has no special rule. ") \
            + FILLER
        out.append((title, body))
    return out


def handbook_md(n: int = 40) -> str:
    parts = ["# Operations handbook", "", "How the platform team runs production.", ""]
    for title, body in handbook_sections(n):
        parts += [f"## {title}", "", body, ""]
    return "\n".join(parts)


def handbook_html(n: int = 40) -> str:
    secs = "".join(f"<h2>{t}</h2><p>{b}</p>" for t, b in handbook_sections(n))
    return ("<!DOCTYPE html><html><head><title>Operations handbook</title><style>body{color:#333}</style>"
            "<script>window.track = function() { return 'analytics boilerplate'; };</script></head><body>"
            "<nav><a href='/'>Home</a> <a href='/pricing'>Pricing plans and subscriptions</a></nav>"
            f"<main><article><h1>Operations handbook</h1><p>How the platform team runs production.</p>{secs}"
            "</article></main><footer>Copyright 2026 Example Corp. Cookie preferences. Privacy policy.</footer>"
            "</body></html>")


def handbook_pdf(n: int = 40, encrypt: str = "") -> bytes:
    from reportlab.lib.pagesizes import A4
    from reportlab.lib.styles import getSampleStyleSheet
    from reportlab.platypus import Paragraph, SimpleDocTemplate

    styles = getSampleStyleSheet()

    class Doc(SimpleDocTemplate):
        def afterFlowable(self, f: object) -> None:  # noqa: N802 - reportlab's hook name
            if isinstance(f, Paragraph) and f.style.name.startswith("Heading"):
                key = f"h{id(f)}"
                self.canv.bookmarkPage(key)
                self.canv.addOutlineEntry(f.getPlainText(), key, level=int(f.style.name[-1]) - 1)

    buf = io.BytesIO()
    kw = {"encrypt": encrypt} if encrypt else {}
    doc = Doc(buf, pagesize=A4, title="Operations handbook", **kw)
    story = [Paragraph("Operations handbook", styles["Heading1"]),
             Paragraph("How the platform team runs production.", styles["BodyText"])]
    for title, body in handbook_sections(n):
        story += [Paragraph(title, styles["Heading2"]), Paragraph(body, styles["BodyText"])]
    doc.build(story)
    return buf.getvalue()


def report_docx() -> bytes:
    import docx

    d = docx.Document()
    d.core_properties.title = "Quarterly report"
    d.add_heading("Quarterly report", level=0)
    d.add_paragraph("Revenue grew in every region this quarter.")
    d.add_heading("Costs", level=1)
    d.add_paragraph("Cloud spend fell by twelve percent after the storage migration.")
    t = d.add_table(rows=2, cols=2)
    t.cell(0, 0).text, t.cell(0, 1).text = "Region", "Growth"
    t.cell(1, 0).text, t.cell(1, 1).text = "EMEA", "9%"
    d.add_heading("Hiring", level=1)
    d.add_paragraph("Two site reliability engineers joined the platform team.", style="List Bullet")
    buf = io.BytesIO()
    d.save(buf)
    return buf.getvalue()


def deck_pptx() -> bytes:
    from pptx import Presentation

    prs = Presentation()
    for title, point in (("Roadmap", "Ship the search rewrite in March"), ("Risks", "The vendor contract ends")):
        s = prs.slides.add_slide(prs.slide_layouts[1])
        s.shapes.title.text = title
        s.placeholders[1].text = point
    buf = io.BytesIO()
    prs.save(buf)
    return buf.getvalue()


def budget_xlsx() -> bytes:
    import openpyxl

    wb = openpyxl.Workbook()
    ws = wb.active
    ws.title = "Budget"
    ws.append(["Team", "Amount"])
    ws.append(["Platform", 125000])
    buf = io.BytesIO()
    wb.save(buf)
    return buf.getvalue()


PY_MODULE = '''"""Rate limiting for the public API."""

import time


class TokenBucket:
    """A bucket that refills at a fixed rate."""

    def __init__(self, rate: float, burst: int) -> None:
        self.rate = rate
        self.burst = burst

    def take(self, n: int = 1) -> bool:
        """Take n tokens if there are enough."""
        return n <= self.burst


def retry_after(bucket: TokenBucket) -> float:
    """Seconds until one token is available."""
    return 1.0 / bucket.rate
'''

TS_MODULE = '''import { Request } from "./http";

/** Parses a bearer token from a request. */
export function bearerToken(req: Request): string | null {
  const h = req.headers["authorization"];
  return h?.startsWith("Bearer ") ? h.slice(7) : null;
}

export interface Session {
  user: string;
  expires: number;
}

/** Keeps sessions in memory. */
export class SessionStore {
  private items = new Map<string, Session>();

  /** Looks a session up by id. */
  get(id: string): Session | undefined {
    return this.items.get(id);
  }
}
'''

PNG = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x06\x00\x00\x00\x1f\x15\xc4\x89" \
      b"\x00\x00\x00\rIDATx\x9cc\xf8\x0f\x00\x00\x01\x01\x00\x05\x18\xd8N\x00\x00\x00\x00IEND\xaeB`\x82"
BLOB = bytes(range(256)) * 64


def handbook_rst(n: int = 40) -> str:
    bar = "=" * len("Operations handbook")
    parts = [bar, "Operations handbook", bar, "", "How the platform team runs production.", ""]
    for title, body in handbook_sections(n):
        parts += [title, "-" * len(title), "", body, ""]
    return "\n".join(parts)


def notebook_ipynb() -> str:
    import json

    cells = [{"cell_type": "markdown", "metadata": {},
              "source": ["# Churn analysis\n", "\n", "Which plans lose users."]},
             {"cell_type": "code", "metadata": {}, "execution_count": 1, "outputs": [],
              "source": "def churn_by_plan(frame):\n    return frame.groupby('plan').churned.mean()"}]
    return json.dumps({"nbformat": 4, "nbformat_minor": 5, "cells": cells,
                       "metadata": {"kernelspec": {"language": "python", "name": "python3"}}})


def book_epub(chapters: dict[str, str], spine: list[str], locked: tuple[str, ...] = ()) -> bytes:
    """An EPUB 3 book titled "Operating Queues": `chapters` (id -> XHTML body) in the order `spine`
    lists them; `locked` paths are listed as encrypted in META-INF/encryption.xml."""
    import zipfile

    manifest = "".join(f'<item id="{n}" href="text/{n}.xhtml" media-type="application/xhtml+xml"/>' for n in chapters)
    opf = ('<?xml version="1.0"?><package xmlns="http://www.idpf.org/2007/opf" version="3.0">'
           '<metadata xmlns:dc="http://purl.org/dc/elements/1.1/"><dc:title>Operating Queues</dc:title></metadata>'
           f'<manifest>{manifest}</manifest><spine>'
           + "".join(f'<itemref idref="{n}"/>' for n in spine) + "</spine></package>")
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("mimetype", "application/epub+zip")
        z.writestr("META-INF/container.xml", '<?xml version="1.0"?><container version="1.0" '
                   'xmlns="urn:oasis:names:tc:opendocument:xmlns:container"><rootfiles>'
                   '<rootfile full-path="OEBPS/content.opf" media-type="application/oebps-package+xml"/>'
                   "</rootfiles></container>")
        z.writestr("OEBPS/content.opf", opf)
        for n, body in chapters.items():
            z.writestr(f"OEBPS/text/{n}.xhtml", f'<?xml version="1.0"?><html xmlns="http://www.w3.org/1999/xhtml">'
                       f"<head><title>{n}</title></head><body>{body}</body></html>")
        if locked:
            refs = "".join(f'<EncryptedData><CipherData><CipherReference URI="{u}"/></CipherData></EncryptedData>'
                           for u in locked)
            z.writestr("META-INF/encryption.xml", f'<encryption xmlns="urn:oasis:names:tc:opendocument:xmlns:'
                       f'container">{refs}</encryption>')
    return buf.getvalue()


def write_folder(root: Path) -> dict[str, bytes]:
    """Every kind of file in one folder; returns name -> bytes written."""
    files = {
        "handbook.md": handbook_md().encode(),
        "handbook.html": handbook_html().encode(),
        "handbook.pdf": handbook_pdf(),
        "report.docx": report_docx(),
        "deck.pptx": deck_pptx(),
        "budget.xlsx": budget_xlsx(),
        "ratelimit.py": PY_MODULE.encode(),
        "session.ts": TS_MODULE.encode(),
        "logo.png": PNG,
        "blob.bin": BLOB,
    }
    root.mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        (root / name).write_bytes(data)
    return files
