"""Pulling the JSON object out of a model's answer (fenced or bare), shared by every LLM task."""

from __future__ import annotations

import json
import re
from typing import Any


def json_object(text: str) -> dict[str, Any]:
    """The first-to-last brace span of `text` (inside a ``` fence if there is one); raises ValueError."""
    body = text.strip()
    fence = re.search(r"```(?:json)?\s*(.*?)```", body, flags=re.S)
    if fence:
        body = fence.group(1)
    start, end = body.find("{"), body.rfind("}")
    if start < 0 or end < start:
        raise ValueError("no JSON object in the model's answer")
    data: Any = json.loads(body[start : end + 1])
    if not isinstance(data, dict):
        raise ValueError("the model's answer is not a JSON object")
    return data
