"""The runtime: NATS, the actor host, JetStream setup, the embedded server, config, model clients, CLI."""

__version__ = "0.1.0"
