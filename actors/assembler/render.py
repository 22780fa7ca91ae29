"""Flat XML (seed 000 §3.3): one `<memory>` element per entry, metadata as attributes, the body
as element text. Every element carries its URI. A body can never forge a sibling entry or close
the envelope: any `<memory` / `</memory` (and the client's `<openviking-context` envelope tag),
in any case and with any whitespace, loses its `<`."""

from __future__ import annotations

import re

_FORGE = re.compile(r"<(\s*/?\s*(?:memory|openviking-context))", re.IGNORECASE)
SEPARATOR = "\n"


def attr(value: str) -> str:
    return (value.replace("&", "&amp;").replace('"', "&quot;").replace("<", "&lt;").replace(">", "&gt;")
            .replace("\n", "&#10;").replace("\r", "&#13;"))


def neutralise(body: str) -> str:
    return _FORGE.sub(r"&lt;\1", body)


def score_text(score: float) -> str:
    return f"{score:.2f}"


def element(uri: str, category: str, score: float, detail: str, text: str, origin: str = "self") -> str:
    head = (f'<memory uri="{attr(uri)}" type="{attr(category)}" score="{score_text(score)}" '
            f'detail="{attr(detail)}"' + (f' origin="{attr(origin)}"' if origin == "peer" else ""))
    if detail == "uri" or not text:
        return head + "/>"
    return f"{head}>\n{neutralise(text.strip())}\n</memory>"


def join(elements: list[str]) -> str:
    return SEPARATOR.join(elements)
