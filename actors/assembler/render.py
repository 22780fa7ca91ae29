"""Flat XML (docs/design/context-assembly.md): one `<memory>` element per entry, metadata as attributes, the body
as element text. Every element carries its URI. A body can never forge a sibling entry or close
the envelope: any `<memory` / `</memory` (and the client's `<openviking-context` envelope tag),
in any case and with any whitespace, loses its `<`."""

from __future__ import annotations

import functools
import re

from skald.store.tokens import estimate_units

_FORGE = re.compile(r"<(\s*/?\s*(?:memory|openviking-context))", re.IGNORECASE)
SEPARATOR = "\n"
_ATTR = str.maketrans({"&": "&amp;", '"': "&quot;", "<": "&lt;", ">": "&gt;", "\n": "&#10;", "\r": "&#13;"})
_ESCAPED = re.compile(r'[&"<>\n\r]')


def attr(value: str) -> str:
    """Escaped for an attribute; most values (URIs, categories) need nothing, and finding that
    out is a quarter of what translating costs."""
    return value.translate(_ATTR) if _ESCAPED.search(value) else value


def neutralise(body: str) -> str:
    return _FORGE.sub(r"&lt;\1", body)


def score_text(score: float) -> str:
    return f"{score:.2f}"


def head(uri: str, category: str, score: float, origin: str = "self", location: str = "") -> str:
    """The element's opening up to (not including) its detail attribute; a section of a long
    document says where in it the passage lies."""
    return (f'<memory uri="{attr(uri)}" type="{attr(category)}" score="{score_text(score)}"'
            + (f' origin="{attr(origin)}"' if origin == "peer" else "")
            + (f' location="{attr(location)}"' if location else ""))


def body(text: str) -> str:
    return neutralise(text.strip())


def body_units(text: str) -> tuple[float, bool]:
    """(estimate_units(body(text)), whether the body is non-empty) without building the body
    when nothing in it needs neutralising (no `<`): budget filling prices every tier of every
    entry, and most bodies are plain text."""
    s = text.strip()
    if not s:
        return 0.0, False
    return estimate_units(s if "<" not in s else neutralise(s)), True


@functools.lru_cache(maxsize=64)
def close(detail: str, has_body: bool) -> tuple[str, str]:
    """(what follows the head up to the body, what follows the body)."""
    if detail == "uri" or not has_body:
        return f' detail="{attr(detail)}"/>', ""
    return f' detail="{attr(detail)}">\n', "\n</memory>"


@functools.lru_cache(maxsize=64)
def close_units(detail: str, has_body: bool) -> float:
    """estimate_units of what `close` puts around a body."""
    opening, ending = close(detail, has_body)
    return estimate_units(opening) + estimate_units(ending)


def element(uri: str, category: str, score: float, detail: str, text: str, origin: str = "self",
            location: str = "") -> str:
    return element_after(head(uri, category, score, origin, location), detail, text)


def element_after(head_text: str, detail: str, text: str) -> str:
    """The element from its `head` (which budget filling has built already to price it)."""
    b = body(text) if detail != "uri" else ""
    opening, ending = close(detail, bool(b))
    return head_text + opening + b + ending


def join(elements: list[str]) -> str:
    return SEPARATOR.join(elements)
