"""The runtime: NATS, the actor host, JetStream setup, the embedded server, config, model clients, CLI."""

import os

# One BLAS thread per process: a worker runs many requests at once, and several workers share the
# cores; BLAS thread pools that spin while waiting made two retrievers on 2 cores slower than one.
for _var in ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "OMP_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

__version__ = "0.1.0"
