"""Figures the hardening tests report at the end of a run (printed by conftest's summary hook)."""

from __future__ import annotations

from collections import Counter

FIGURES: Counter[str] = Counter()
