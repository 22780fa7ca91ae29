"""The one token estimate Skald uses everywhere (sessions, context assembly, benchmarks).

CJK ideographs, kana, hangul and full-width forms cost about 1.5 tokens per character with
common BPE vocabularies; astral-plane code points (emoji, rare ideographs) about 2; other text
about 4 characters per token. Rounding up keeps a budget conservative.
"""

from __future__ import annotations

import math
import re

_WIDE_RANGES = (
    (0x1100, 0x11FF),  # hangul jamo
    (0x2E80, 0x2FDF),  # CJK radicals
    (0x3000, 0x303F),  # CJK punctuation
    (0x3040, 0x30FF),  # hiragana, katakana
    (0x3100, 0x31FF),  # bopomofo, hangul compatibility jamo, katakana ext
    (0x3200, 0x4DBF),  # enclosed CJK, CJK ext A
    (0x4E00, 0x9FFF),  # CJK unified ideographs
    (0xA960, 0xA97F),  # hangul jamo ext A
    (0xAC00, 0xD7FF),  # hangul syllables + jamo ext B
    (0xF900, 0xFAFF),  # CJK compatibility ideographs
    (0xFE30, 0xFE4F),  # CJK compatibility forms
    (0xFF00, 0xFFEF),  # half-width and full-width forms
)


_WIDE = re.compile("[" + "".join(f"\\u{lo:04x}-\\u{hi:04x}" for lo, hi in _WIDE_RANGES) + "]")
_ASTRAL = re.compile("[\U00010000-\U0010ffff]")


def estimate_units(text: str) -> float:
    """The un-rounded estimate: additive, so the cost of a concatenation is the sum of its parts."""
    if text.isascii():
        return len(text) * 0.25
    n = len(text)
    wide = n - len(_WIDE.sub("", text))
    astral = n - len(_ASTRAL.sub("", text))
    return n * 0.25 + wide * 1.25 + astral * 1.75


def estimate_tokens(text: str) -> int:
    """Tokens a model will likely spend on `text` (1.5 wide, 2.0 astral, 0.25 otherwise)."""
    if not text:
        return 0
    return math.ceil(estimate_units(text))
