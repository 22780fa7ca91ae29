"""Prometheus metrics of one worker (prometheus-client, Apache-2.0): requests by operation and
reply code, their latency, work-queue jobs by outcome and their duration, requests in flight, and
every number an actor reports in its health (index rows, replica lag, jobs done, model calls,
retries, quarantined archives...), read when scraped.

Each worker has its own registry (several workers may share a process in tests and benchmarks),
served on `SKALD_METRICS_PORT` (0: off) at `/metrics`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, GCCollector, Histogram, ProcessCollector, start_http_server
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 120.0)


def _name(*parts: str) -> str:
    return re.sub(r"[^a-zA-Z0-9_]", "_", "_".join(parts))


def _numbers(prefix: tuple[str, ...], value: Any) -> Iterator[tuple[tuple[str, ...], float]]:
    """Numeric leaves of a health dict (booleans included), with their key path."""
    if isinstance(value, bool):
        yield prefix, float(value)
    elif isinstance(value, int | float):
        yield prefix, float(value)
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _numbers((*prefix, str(k)), v)


class HealthCollector(Collector):
    """`skald_actor_<actor>_<key...>` gauges from each actor's `health()`, at scrape time."""

    def __init__(self, actors: Callable[[], dict[str, object]], in_flight: Callable[[], int]) -> None:
        self.actors = actors
        self.in_flight = in_flight

    def collect(self) -> Iterator[GaugeMetricFamily]:
        g = GaugeMetricFamily("skald_in_flight", "Requests being handled by this worker now.")
        g.add_metric([], float(self.in_flight()))
        yield g
        for actor_name, actor in self.actors().items():
            probe = getattr(actor, "health", None)
            if probe is None:
                continue
            try:
                health = probe()
            except Exception:  # noqa: BLE001 - a scrape never fails on one actor's report
                continue
            for path, v in _numbers((), health):
                fam = GaugeMetricFamily(_name("skald_actor", actor_name, *path),
                                        f"{actor_name} health: {'.'.join(path)}")
                fam.add_metric([], v)
                yield fam


class Metrics:
    """A worker's Prometheus metrics: requests, jobs, model calls, process figures, and each actor's health."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=False)  # health keys are read at scrape time
        # The process's CPU and memory, and CPython's collections by generation (see runtime/host/heap.py).
        ProcessCollector(registry=self.registry)
        GCCollector(registry=self.registry)
        self.requests = Counter("skald_requests", "Requests answered, by operation and reply code.",
                                ["op", "code"], registry=self.registry)
        self.latency = Histogram("skald_request_seconds", "Time from a request's arrival to its reply.", ["op"],
                                 buckets=LATENCY_BUCKETS, registry=self.registry)
        self.jobs = Counter("skald_jobs", "Work-queue jobs, by queue and outcome (done, retry_later, failed, "
                            "terminated, poison).", ["queue", "outcome"], registry=self.registry)
        self.job_seconds = Histogram("skald_job_seconds", "Time one work-queue job ran.", ["queue"],
                                     buckets=LATENCY_BUCKETS, registry=self.registry)
        self.url = ""
        self._children: dict[tuple[str, str], tuple[Any, Any]] = {}

    def answered(self, op: str, code: str, seconds: float) -> None:
        """One reply counted and timed. The labelled series are looked up once per (op, code):
        `labels()` validates and locks on every call, 3.5 us of a request's plumbing here."""
        got = self._children.get((op, code))
        if got is None:
            got = self._children[(op, code)] = (self.requests.labels(op, code), self.latency.labels(op))
        got[0].inc()
        got[1].observe(seconds)

    def watch(self, actors: Callable[[], dict[str, object]], in_flight: Callable[[], int]) -> None:
        self.registry.register(HealthCollector(actors, in_flight))

    def serve(self, host: str, port: int) -> str:
        """Start `/metrics` on `port` (-1: any free port); its URL."""
        server, _ = start_http_server(max(0, port), addr=host, registry=self.registry)
        self._server = server
        self.url = f"http://{host}:{server.server_address[1]}/metrics"
        return self.url

    def stop(self) -> None:
        server = getattr(self, "_server", None)
        if server is not None:
            server.shutdown()
            server.server_close()
