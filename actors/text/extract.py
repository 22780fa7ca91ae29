"""Extractive text reduction: what Skald serves when no model writes summaries.

These are honest extracts, never paraphrase: an abstract is the document's first heading and
its opening sentences cut at a sentence boundary; an overview is the heading tree plus the
first paragraph; a code file is reduced to the skeleton of its signatures. Context assembly
uses the same functions to pick an overview by source type.
"""

from __future__ import annotations

import re

ABSTRACT_MAX = 256  # characters: the L2 row's abstract (OpenViking's L0 summary bound)
OVERVIEW_MAX = 4_000

CODE_EXT = frozenset({
    ".py", ".js", ".ts", ".tsx", ".jsx", ".go", ".rs", ".java", ".kt", ".c", ".h", ".cc", ".cpp",
    ".hpp", ".cs", ".rb", ".php", ".swift", ".scala", ".sh",
})
_SIGNATURE = re.compile(
    r"^\s*(?:export\s+|pub(?:\(crate\))?\s+|public\s+|private\s+|protected\s+|static\s+|async\s+|abstract\s+)*"
    r"(?:def|class|function|fn|func|interface|struct|enum|trait|impl|type|module|package|const\s+\w+\s*=\s*\(?|"
    r"[A-Za-z_][\w<>\[\],\s*&:]*\s+[A-Za-z_]\w*\s*\([^;]*\)\s*\{?)\b.*"
)
_HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$")
_SENTENCE_END = re.compile(r"(?<=[.!?。！？；;])\s*")


def is_code(name: str) -> bool:
    dot = name.rfind(".")
    return dot >= 0 and name[dot:].lower() in CODE_EXT


def strip_frontmatter(text: str) -> str:
    if text.startswith("---\n"):
        end = text.find("\n---", 4)
        if end >= 0:
            return text[end + 4 :].lstrip("\n")
    return text


def cut_sentences(text: str, limit: int) -> str:
    """The longest run of whole sentences that fits `limit`; a hard cut only if one sentence is too long.

    Only a prefix is read: once the text as normalised runs past `limit`, what follows cannot join
    the answer (a sentence reaching past it does not fit), so a 700-character section is not
    normalised and split whole for a 220-character abstract."""
    read = 2 * limit + 2
    head = " ".join(text[:read].split())
    if len(head) <= limit and len(text) > read:  # mostly whitespace so far: the rest may still fit
        head = " ".join(text.split())
    return cut_normalised(head, limit)


def cut_normalised(text: str, limit: int) -> str:
    """`cut_sentences` of a text whose whitespace is single spaces already."""
    if len(text) <= limit:
        return text
    out = ""
    for piece in _SENTENCE_END.split(text):
        if not piece:
            continue
        cand = f"{out} {piece}".strip() if out else piece
        if len(cand) > limit:
            break
        out = cand
    if out:
        return out
    cut = text[: limit - 1]
    space = cut.rfind(" ")
    return (cut[:space] if space > limit // 2 else cut) + "…"


def headings(text: str) -> list[tuple[int, str]]:
    out = []
    in_fence = False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            in_fence = not in_fence
            continue
        if not in_fence and (m := _HEADING.match(line)):
            out.append((len(m.group(1)), m.group(2)))
    return out


_SETEXT = re.compile(r"=+|-+")


def first_paragraph(text: str) -> str:
    """The first block of prose: not a heading, not a fence, not a list of links."""
    block: list[str] = []
    in_fence = False
    for line in text.splitlines():
        s = line.strip()
        if s.startswith("```"):
            in_fence = not in_fence
            if block:
                break
            continue
        if in_fence:
            continue
        if not s or _HEADING.match(s):
            if block:
                break
            continue
        if _SETEXT.fullmatch(s) and len(block) == 1:
            block = []  # the line above was a setext heading's title
            continue
        block.append(s)
    return " ".join(block)


def code_skeleton(text: str, max_lines: int = 80) -> str:
    lines = [ln.rstrip() for ln in text.splitlines() if _SIGNATURE.match(ln) and len(ln) < 300]
    return "\n".join(lines[:max_lines])


def file_abstract(name: str, text: str, limit: int = ABSTRACT_MAX) -> str:
    text = strip_frontmatter(text)
    if is_code(name):
        sigs = [s.strip().rstrip("{:").strip() for s in code_skeleton(text, 12).splitlines()]
        body = f"{name}: " + "; ".join(sigs) if sigs else f"{name}: " + " ".join(text.split())
        return cut_sentences(body, limit) if len(body) <= limit else body[: limit - 1] + "…"
    hs = headings(text)
    para = first_paragraph(text)
    lead = hs[0][1] if hs else ""
    body = f"{lead}. {para}" if lead and para and not para.startswith(lead) else (para or lead)
    if not body:
        body = " ".join(text.split())
    return cut_sentences(body, limit) if body else name


def text_overview(name: str, text: str, limit: int = OVERVIEW_MAX) -> str:
    """Overview of one document by source type: code skeleton, else heading tree + first paragraph."""
    text = strip_frontmatter(text)
    if is_code(name):
        sk = code_skeleton(text)
        return (f"# {name}\n\n```\n{sk}\n```" if sk else file_abstract(name, text))[:limit]
    if summary := memory_summary(text):
        return summary[:limit]
    hs = headings(text)
    tree = "\n".join(f"{'  ' * (lvl - 1)}- {h}" for lvl, h in hs)
    para = first_paragraph(text)
    out = "\n\n".join(p for p in (tree, para) if p)
    return (out or " ".join(text.split()))[:limit]


def memory_summary(text: str) -> str:
    """The `# Summary` section of an event memory, if it has one."""
    m = re.search(r"^#{1,3}\s*Summary\s*$", text, flags=re.M | re.I)
    if not m:
        return ""
    rest = text[m.end() :]
    nxt = re.search(r"^#{1,3}\s+\S", rest, flags=re.M)
    return rest[: nxt.start()].strip() if nxt else rest.strip()


def dir_overview(name: str, children: list[tuple[str, bool, str]], readme: str | None) -> str:
    """A directory's L1: what it is (from its README) and one line per child, as many as fit;
    when not all do, the heading says how many there are, so a reader (and the L0) knows the
    list goes on."""
    parts = [f"# {name}"]
    if readme and (para := first_paragraph(strip_frontmatter(readme))):
        parts.append(cut_sentences(para, 600))
    if children:
        lines = [f"- {n}{'/' if d else ''}: {a}" if a else f"- {n}{'/' if d else ''}" for n, d, a in children]
        longest_head = len(f"## Contents ({len(lines)} entries, the first {len(lines)} listed)")
        room = OVERVIEW_MAX - len("\n\n".join(parts)) - longest_head - 3
        shown = used = 0
        for ln in lines:
            if used + len(ln) + 1 > room:
                break
            used += len(ln) + 1
            shown += 1
        head = "## Contents" if shown == len(lines) else f"## Contents ({len(lines)} entries, the first {shown} listed)"
        parts.append(head + "\n" + "\n".join(lines[:shown]))
    out = "\n\n".join(parts)
    return out if len(out) <= OVERVIEW_MAX else out[: OVERVIEW_MAX - 1] + "…"


def dir_abstract(name: str, overview: str, limit: int = ABSTRACT_MAX) -> str:
    """A directory's L0: its own description if it has one, else what its children are about."""
    body = strip_frontmatter(overview)
    lines = body.splitlines()
    prose = first_paragraph("\n".join(ln for ln in lines if not ln.startswith("- ")))
    items = [ln[2:] for ln in lines if ln.startswith("- ")]
    if prose and prose != f"# {name}":
        return cut_sentences(f"{name}: {prose}", limit)
    if items:
        names = ", ".join(i.split(":", 1)[0] for i in items[:12])
        total = m.group(1) if (m := re.search(r"^## Contents \((\d+) entries", body, flags=re.M)) else len(items)
        return cut_sentences(f"{name}: {total} entries ({names})", limit)
    return name
