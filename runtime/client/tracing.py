"""OpenTelemetry tracing, off by default.

On, every hop of a request is a span: each actor's handling of it (the requests actors make to
each other and the work-queue jobs a write leaves behind included) and the HTTP gateway's, joined
into one trace by the W3C trace context (`traceparent`, `tracestate`) carried in NATS headers; a
caller's own trace (the client's current span, an HTTP `traceparent`) is the parent of it all.
Spans go out over OTLP/HTTP (`SKALD_TRACING=otlp`, endpoint from `SKALD_OTLP_ENDPOINT` or
OpenTelemetry's own `OTEL_EXPORTER_OTLP_*` variables), or through the provider an embedding
application configured (`global`). Off, each hook costs one test of a module global, so the hot
path pays nothing for a feature it does not use.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, MutableMapping
from typing import Any

TRACING_MODES = ("off", "otlp", "global")
_tracer: Any = None  # the tracer while tracing is on in this process
_processor: Any = None  # where ended spans go (a batch to OTLP, or a test's exporter)
_provider: Any = None
_prop: Any = None
_NULL = contextlib.nullcontext()


def setup(mode: str, service: str = "skald", endpoint: str = "", exporter: Any = None, sample: float = 1.0) -> None:
    """Turn tracing on for this process. `otlp`: spans batched to an OTLP/HTTP collector;
    `global`: the application's own tracer provider; an `exporter` (tests: an in-memory one)
    receives each span as it ends. `off` without an exporter leaves tracing off. `sample`: the
    share of traces started here that are recorded (a caller's sampled trace always is)."""
    global _tracer, _processor, _prop, _provider, _api
    if mode == "off" and exporter is None:
        return
    _api = _api or _Api()
    from opentelemetry import trace
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    _prop = TraceContextTextMapPropagator()  # W3C, whatever global propagator an application set
    if mode == "global" and exporter is None:
        _tracer = trace.get_tracer("skald")
        return
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
    from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased

    if exporter is None:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        processor: Any = BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint or None))
    else:
        processor = SimpleSpanProcessor(exporter)
    if _processor is not None:
        _processor.shutdown()
    _processor = processor
    if _provider is None:
        # A provider of Skald's own (an application's global one is `global` mode's), fed through
        # one relay so that turning tracing off and on again never stacks processors.
        _provider = TracerProvider(resource=Resource.create({"service.name": service}))
        _provider.add_span_processor(_relay(SpanProcessor)())
    _provider.sampler = ParentBased(TraceIdRatioBased(sample))
    _tracer = _provider.get_tracer("skald")
    _tracer.sampler = _provider.sampler  # the provider hands out the tracer it made first


def shutdown() -> None:
    """Flush what is buffered and turn tracing off in this process."""
    global _tracer, _processor
    if _processor is not None:
        _processor.shutdown()
    _tracer = _processor = None


@contextlib.contextmanager
def suspended() -> Iterator[None]:
    """Tracing off in this process for the block: a benchmark compares alike requests with and
    without it, interleaved, instead of in separate runs whose drift is larger than the cost."""
    global _tracer
    kept, _tracer = _tracer, None
    try:
        yield
    finally:
        _tracer = kept


def serve(name: str, headers: Mapping[str, str] | None, **attrs: Any) -> contextlib.AbstractContextManager[Any]:
    """A span for handling a message or HTTP request, the child of the trace its headers carry."""
    if _tracer is None:
        return _NULL
    return _Span(name, "SERVER", headers, attrs)


def job(name: str, headers: Mapping[str, str] | None, **attrs: Any) -> contextlib.AbstractContextManager[Any]:
    """A span for a work-queue job, the child of the request that enqueued it."""
    if _tracer is None:
        return _NULL
    return _Span(name, "CONSUMER", headers, attrs)


def inject(headers: MutableMapping[str, str]) -> None:
    """Write the current trace context into headers that leave this process: a request to another
    actor or a job. Calls are not spans of their own: the span of the hop they reach is the child
    of the span that sent them, and the time on the bus is the gap between the two (one span per
    hop instead of two halves the cost of tracing a request)."""
    if _tracer is not None:
        _prop.inject(headers)


def outcome(span: Any, code: str) -> None:
    """Record a reply's code; anything but OK marks the span as failed."""
    if span is None:
        return
    span.set_attribute("skald.code", code)
    if code != "OK":
        span.set_status(_api.error(code))


class _Span:
    """One span made current for the `with` block (by hand: the SDK's own context managers cost
    more than the span on a request of a millisecond or two)."""

    __slots__ = ("name", "kind", "parent", "attrs", "span", "token")

    def __init__(self, name: str, kind: str, parent: Mapping[str, str] | None, attrs: dict[str, Any]) -> None:
        self.name, self.kind, self.parent, self.attrs = name, kind, parent, attrs

    def __enter__(self) -> Any:
        ctx = _prop.extract(self.parent) if self.parent and "traceparent" in self.parent else _api.empty
        self.span = _tracer.start_span(self.name, context=ctx, kind=_api.kinds[self.kind],
                                       attributes={f"skald.{k}": v for k, v in self.attrs.items() if v is not None})
        self.token = _api.attach(_api.in_context(self.span))
        return self.span

    def __exit__(self, typ: Any, exc: BaseException | None, tb: Any) -> None:
        _api.detach(self.token)
        if exc is not None and self.span.is_recording():
            self.span.record_exception(exc)
            self.span.set_status(_api.error(f"{type(exc).__name__}: {exc}"))
        self.span.end()


class _Api:
    """The OpenTelemetry names the hot path uses, imported once tracing is turned on."""

    def __init__(self) -> None:
        from opentelemetry import context
        from opentelemetry.trace import SpanKind, Status, StatusCode, set_span_in_context

        self.empty = context.Context()  # a request without a trace context starts a new trace
        self.attach, self.detach, self.in_context = context.attach, context.detach, set_span_in_context
        self.kinds = {k.name: k for k in SpanKind}
        self.error = lambda text: Status(StatusCode.ERROR, text)


_api: Any = None


def _relay(base: type) -> type:
    """The span processor Skald's provider holds for good; it hands each span to the current one."""

    class Relay(base):
        def on_end(self, span: Any) -> None:
            if (p := _processor) is not None:
                p.on_end(span)

        def force_flush(self, timeout_millis: int = 30000) -> bool:
            p = _processor
            return True if p is None else bool(p.force_flush(timeout_millis))

    return Relay
