"""The score calibration a worker serves: the embedder's shipped one, or one fitted on its noise.

An OpenAI-compatible embedder has no shipped calibration, and its cosines live on a scale of
their own (an e5 model served remotely puts unrelated text near 0.8): without one, recall's floor
filters nothing and "nothing relevant" never comes. So the first worker that meets such a model
embeds the shipped noise set (`actors/retriever/noiseset.py`: 64 queries, 71 passages), fits,
and keeps the fit in `.skald/calibrations.json` by model, for every later start and every worker
of the data directory. If the model cannot be reached, scores stay raw until the next start.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
from pathlib import Path
from typing import Any

import numpy as np

from skald.actors.retriever import calibration, noiseset
from skald.actors.retriever.calibration import Calibration
from skald.store import tree

log = logging.getLogger("skald.calibrate")

FILE = "calibrations.json"
FIT_TIMEOUT_S = 20.0  # a start waits at most this long for a model that does not answer
CONCURRENT_QUERIES = 8


def noise_version() -> str:
    """What a kept fit was measured on and with: a changed set or constant fits again."""
    text = json.dumps([noiseset.SUBJECTS, noiseset.PASSAGES, noiseset.PASSAGE_CHARS,
                       calibration.FIT_LO, calibration.FIT_SPAN])
    return hashlib.sha256(text.encode()).hexdigest()[:12]


async def best_hits(embedder: Any) -> list[float]:
    """Each noise query's best cosine over the passages that do not answer it."""
    passages = await embedder.embed_passages([*noiseset.passages(), *noiseset.LINES])
    gate = asyncio.Semaphore(CONCURRENT_QUERIES)

    async def one(q: str) -> np.ndarray:
        async with gate:
            return np.asarray(await embedder.embed_query(q), dtype=np.float32)

    queries = np.stack(await asyncio.gather(*(one(q) for q in noiseset.QUERIES)))
    sims = queries @ np.asarray(passages, dtype=np.float32).T
    return [float(x) for x in np.where(np.asarray(noiseset.noise_mask()), sims, -1.0).max(axis=1)]


def _read(path: Path) -> dict[str, Any]:
    try:
        got = json.loads(path.read_text())
        return got if isinstance(got, dict) else {}
    except (OSError, ValueError):
        return {}


async def serve(embedder: Any, setting: str, fit_unknown: bool, cache_dir: Path) -> Calibration:
    """The calibration to serve. `fit_unknown`: fit a model with no shipped calibration under
    `auto` (an OpenAI-compatible one; the hashed test embedder stays raw)."""
    model = str(embedder.name)
    shipped = calibration.for_embedder(model, setting)
    if not (setting == "fit" or (setting == "auto" and shipped.identity and fit_unknown)):
        return shipped
    path = cache_dir / FILE
    version = noise_version()
    kept = await asyncio.to_thread(_read, path)
    entry = kept.get(model)
    if isinstance(entry, dict) and entry.get("version") == version:
        return Calibration(str(entry["name"]), float(entry["lo"]), float(entry["hi"]), calibration.hub_beta(model))
    try:
        hits = await asyncio.wait_for(best_hits(embedder), FIT_TIMEOUT_S)
    except Exception as e:  # noqa: BLE001 - a model that cannot be reached: raw scores, said
        log.warning("cannot fit a score calibration for %s (%s): scores stay raw until the next start", model, e)
        return shipped
    cal = calibration.fit(model, hits, calibration.hub_beta(model))
    log.info("score calibration for %s fitted on its noise: lo %.4f, hi %.4f", model, cal.lo, cal.hi)
    kept = await asyncio.to_thread(_read, path)  # another worker may have written meanwhile
    kept[model] = {"name": cal.name, "lo": cal.lo, "hi": cal.hi, "version": version,
                   "noise_median": round(calibration.quantile(hits, 0.5), 4)}
    await asyncio.to_thread(tree.write_atomic_sync, path, json.dumps(kept, indent=1, sort_keys=True).encode())
    return cal
