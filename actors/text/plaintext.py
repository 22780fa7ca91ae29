"""Headings of a plain-text file, as people write them without a markup language.

Manuals, specifications and notes kept as `.txt` (a library's manual, an RFC-style spec, an
editor's help files, a README without an extension) mark their sections by convention: a title
underlined with `===` or `---`, a numbered line (`3.2. Framing`, `IV. Writing`, `Chapter 2`), a
line right after a rule across the page, a short capitalised line standing alone between blank
lines, or Markdown's `# Title`. Without them a long text file is cut by size into parts with no
titles, whose anchors say nothing (`#part7`) and whose embeddings carry no heading path.

No library reads these conventions (docutils reads reStructuredText, which is stricter), so the
rules are Skald's own and deliberately narrow: a candidate must stand alone between blank lines
(or under a rule, or over an underline), be short, and not read as a sentence; a numbered or bare
line followed by less than two lines of its own is an item of a list, not a heading. Levels come
from the order in which each style first appears, as reStructuredText assigns its underlines,
with numbering depth kept in order (`1.` above `1.1.`).
"""

from __future__ import annotations

import re

MAX_TITLE = 80  # characters of a heading line (after a help file's trailing tags)
BARE_WORDS = 8  # a bare title (no number, no underline) is at most this many words
_RULE = re.compile(r"^\s*([=\-*_~#+])\1{19,}\s*$")  # a rule across the page
_UNDERLINE = re.compile(r"^([=\-~^*+#])\1{2,}\s*$")
_ATX = re.compile(r"^(#{1,6}) (\S.*?)(?:\s+#+)?\s*$")
_NUMBER = re.compile(
    r"^(?:(?P<arabic>\d{1,3}(?:\.\d{1,3}){0,4})\.?|(?P<roman>[IVXLC]{2,7})\.|(?P<letter>[A-Z])\.)\s+(?P<rest>\S.*)$|"
    r"^(?P<named>(?:[Cc]hapter|CHAPTER|[Pp]art|PART|[Aa]ppendix|APPENDIX|[Ss]ection|SECTION)\s+"
    r"(?:\d{1,3}|[IVXLC]{1,7}|[A-Z])\b)[.:]?(?:\s+(?P<named_rest>\S.*))?$")
# A help file's link targets, set apart from a title by a tab or two spaces (`*regexp*`), not
# emphasis in it (`The purpose of *__getitem__*`).
_TAGS = re.compile(r"(?:^|\t| {2})\s*[*|][^*|\s]+[*|](?:\s+[*|][^*|\s]+[*|])*\s*$")
_COLUMNS = re.compile(r"\S(?:\t+| {3,})\S")  # text set in columns: a table's row, not a title
_SENTENCE_END = re.compile(r"[.,;:!?]$")
_FENCE = re.compile(r"^\s*(```|~~~)")
# A line ending in one of these leads into what follows ("Choices for the mode are"): not a title.
_OPEN_ENDS = frozenset("a an the of to for with from by and or are is as use in on at be".split())
_LETTER = re.compile(r"[^\W\d_]")


def headings(text: str) -> tuple[tuple[int, int, str], ...]:
    """A plain-text file's headings as (0-based line, level, title), in line order."""
    lines = text.splitlines()
    untagged = [_TAGS.sub("", ln).strip() for ln in lines]  # a line of link targets only is blank
    found: list[tuple[int, tuple[str, int], str, bool]] = []  # line, style, title, strong
    fence = ""
    i = 0
    while i < len(lines):
        line = lines[i]
        if m := _FENCE.match(line):
            fence = "" if fence == m.group(1) else (fence or m.group(1))
            i += 1
            continue
        if fence:
            i += 1
            continue
        hit = _candidate(lines, untagged, i)
        if hit:
            found.append((i, *hit))
            i += 2 if hit[0][0] in "uo" else 1  # an underline is not a line of its own
            continue
        i += 1
    if any(style[0] == "r" for _, style, _, _ in found):  # "I." beside "II." is a number
        found = [(n, ("r", 1) if style[0] == "l" and title[0] in "IVX" else style, title, strong)
                 for n, style, title, strong in found]
    kept = _drop_list_items(found, lines)
    order: dict[tuple[str, int], int] = {}
    out: list[tuple[int, int, str]] = []
    for line_no, style, title, _ in kept:
        level = order.setdefault(style, _level_for(style, order))
        out.append((line_no, level, title))
    return tuple(out)


def title(text: str, heads: tuple[tuple[int, int, str], ...]) -> str:
    """A plain-text file's title: its first heading, when that is the file's first line of text."""
    if not heads:
        return ""
    first = next((i for i, line in enumerate(text.splitlines()) if line.strip()), -1)
    return heads[0][2] if heads[0][0] == first else ""


def _candidate(lines: list[str], untagged: list[str], i: int) -> tuple[tuple[str, int], str, bool] | None:
    """(style, title, strong) when line `i` reads as a heading; strong ones (underlined, after a
    rule, Markdown's) need no body of their own to count. `untagged`: each line without a help
    file's link targets, stripped."""
    line, title_line = lines[i], untagged[i]
    if not title_line or _RULE.match(line) or _UNDERLINE.match(line):
        return None
    before = lines[i - 1] if i > 0 and untagged[i - 1] else ""
    after = lines[i + 1] if i + 1 < len(lines) and untagged[i + 1] else ""
    if before and after and not _ATX.match(line) and not _RULE.match(before) and not _UNDERLINE.match(after.strip()):
        return None  # a line inside a paragraph: the commonest case, decided first
    title = " ".join(title_line.split())
    if not title or len(title) > MAX_TITLE or not _LETTER.search(title):
        return None
    if m := _ATX.match(line):
        if before.strip() and not _ATX.match(before):
            return None
        return ("#", len(m.group(1))), " ".join(m.group(2).split()), True
    under = after.strip()
    if _UNDERLINE.match(under) and not _RULE.match(after) or (
            _RULE.match(after) and len(under) <= 2 * len(line.strip()) + 2):
        # An underline about the title's length (a rule across the page under a short last line
        # of a paragraph is the paragraph's end, not its heading's underline).
        if len(under) >= max(3, len(line.strip()) // 2) and not line.startswith((" ", "\t")) \
                and not _COLUMNS.search(title_line):
            over = bool(before.strip()) and before.strip() == under
            if over or not before.strip():
                return ("o" if over else "u", ord(under[0])), title, True
        return None
    after_rule = bool(_RULE.match(before))
    if before.strip() and not after_rule:
        return None
    if (outdented := _outdented(line, title, after)) is not None:
        return ("i", outdented), title, title.upper() == title
    num = _NUMBER.match(title)
    if line.startswith((" ", "\t")) or _SENTENCE_END.search(title) and not num:
        return None
    if num and _SENTENCE_END.search(num.group("rest") or num.group("named_rest") or ""):
        return None
    words = title_line.split(None, 1)
    if after.strip() or _COLUMNS.search(words[-1] if num else title_line):
        return None  # a heading stands alone; columns apart are a table's row
    if num:
        if num.group("arabic"):
            return ("n", num.group("arabic").count(".") + 1), title, after_rule
        kind = "r" if num.group("roman") else "l" if num.group("letter") else "c"
        return (kind, 1), title, after_rule
    if after_rule:
        return ("s", 1), title, True
    first = next((c for c in title if c.isalpha()), "")
    if len(title.split()) > BARE_WORDS or not first.isupper() or title[0] in "*-+•·>" \
            or any(c in title for c in ",()[]{}<>=;\"'`") or title.rsplit(None, 1)[-1] in _OPEN_ENDS \
            or title[-1] in "—–…":
        return None  # a list's bullet, a clause, or a lead-in to what follows
    return ("b", 1), title, False


def _indent(line: str) -> int:
    return len(line.expandtabs(8)) - len(line.expandtabs(8).lstrip())


def _outdented(line: str, title: str, after: str) -> int | None:
    """The indent of a manual page's heading: `NAME`, `DESCRIPTION` at the margin or a title
    indented a little (`   Shell Grammar`), each directly over text indented further. A line
    at the margin over indented text is a heading only in capitals (in mixed case it is as often
    a lead-in to code)."""
    own = _indent(line)
    if not after.strip() or own > 4 or _indent(after) < own + 2 or _COLUMNS.search(line.strip()):
        return None
    if len(title) > 60 or _SENTENCE_END.search(title) or any(c in title for c in ",()[]{}<>=;\"'`"):
        return None
    letters = [c for c in title if c.isalpha()]
    caps = len(letters) >= 2 and all(c.isupper() for c in letters)
    if caps or own > 0 and letters[:1] and letters[0].isupper() and len(title.split()) <= 6 \
            and title.rsplit(None, 1)[-1] not in _OPEN_ENDS:
        return own
    return None


def _drop_list_items(found: list[tuple[int, tuple[str, int], str, bool]],
                     lines: list[str]) -> list[tuple[int, tuple[str, int], str, bool]]:
    """A weak candidate with less than two lines of text before the next candidate is an item of
    a list or a line of an address, not a section; one directly over a heading of another style, or a
    numbered one over its first subsection (`3.` over `3.1.`), is a heading over it."""
    out = []
    for k, (line_no, style, title, strong) in enumerate(found):
        if not strong:
            end = found[k + 1][0] if k + 1 < len(found) else len(lines)
            body = sum(1 for ln in lines[line_no + 1:end] if ln.strip() and not _RULE.match(ln))
            nxt = found[k + 1] if k + 1 < len(found) else None
            parent = nxt is not None and (nxt[3] or nxt[1] != style or style[0] == "n" and  # 3. over 3.1.
                                          nxt[2].startswith(title.split()[0].rstrip(".") + "."))
            if body < 2 and not parent:
                continue
        out.append((line_no, style, title, strong))
    return out


def _level_for(style: tuple[str, int], order: dict[tuple[str, int], int]) -> int:
    """The next level for a style first seen now; a deeper number sits under its parent depth."""
    kind, depth = style
    if kind == "n" and depth > 1 and ("n", depth - 1) in order:
        return order[("n", depth - 1)] + 1
    if kind == "#":
        return depth
    return min(6, max(order.values(), default=0) + 1)
