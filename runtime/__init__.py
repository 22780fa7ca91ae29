"""The runtime: NATS, the actor host, JetStream setup, the embedded server, config, model clients, CLI.

Importing it changes nothing in the importing process (an agent host that imports the client
keeps its own threading); worker processes pin their BLAS threads in `threads.py` when they start.
"""

__version__ = "0.1.0"
