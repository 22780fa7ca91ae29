"""Thread pools of a worker process, pinned when the process starts (never on import)."""

from __future__ import annotations

import os
import sys

BLAS_VARS = ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "OMP_NUM_THREADS")


def one_blas_thread() -> bool:
    """One BLAS thread per worker process: a worker runs many requests at once and several workers
    share the cores; BLAS pools that spin while waiting made two retrievers on 2 cores slower than
    one. Only effective before numpy loads, so `skald up` / `skald worker` call it first thing; an
    operator's explicit setting wins."""
    for var in BLAS_VARS:
        os.environ.setdefault(var, "1")
    return "numpy" not in sys.modules  # False: too late for this process's pools
