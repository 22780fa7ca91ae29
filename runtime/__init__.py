"""The runtime: NATS, the actor host, JetStream setup, the embedded server, config, model clients, CLI.

Importing it changes nothing an importing process relies on (an agent host that imports the
client keeps its own threading; worker processes pin their BLAS threads in `threads.py` when
they start). It does import nats-py first, with aiohttp put off until a websocket connection
needs it (`natsload.py`: a quarter of a worker's start).
"""

from skald.runtime.natsload import import_nats

import_nats()

__version__ = "0.1.0"
