"""OpenTelemetry spans of an event's hop through tidings (docs/operations.md, "Tracing").

::

    tracing = start("auto")          # None: tracing is off, and costs a None check
    spans = tracing.receive(rows)    # the publish of the traced rows (None if none is traced)
    push = tracing.push(sub_id, events)

The broker calls this small interface and nothing else of OpenTelemetry, which is an
optional extra (``pip install 'tidings[otel]'``) imported only once tracing is on. With
the extra absent, or present but not configured, :func:`start` returns None and the
broker's only cost is the check for it.

Spans follow OpenTelemetry's messaging semantic conventions (``messaging.system`` =
``tidings``, names ``{operation} {destination}``), and continue the trace each event
came with (its ``traceparent``/``tracestate`` headers, ``core.tracecontext``):

* ``receive <namespace>`` (CONSUMER), child of the publisher's span: the broker taking the
  event (rights, schema, back-pressure, the append);
* ``commit <namespace>`` (PRODUCER, operation type ``create``): the durable append that
  gives the request's events their ids, one span for all of them (one commit), as the
  conventions do a batch: the child of the first traced event's receive span, linked to
  the others';
* ``route <namespace>`` (INTERNAL), the same way: the hand-off of the stored events to
  delivery (the in-memory tail, the namespaces' subscription workers woken);
* ``push <namespace>`` (CLIENT, operation type ``send``), child of the publisher's span of
  the first traced event of the batch and linked to the others': one push to a
  subscriber; its own context is the ``traceparent`` an HTTP endpoint receives.

An event that came without a trace context gets no spans: tidings starts no traces of
its own (a publish of a hundred thousand events a second would otherwise make as many).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, cast

import msgspec

from .core import tracecontext
from .core.ingest import Prepared

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.trace import Span, Tracer

__all__ = ["MODES", "PublishSpans", "PushSpan", "Tracing", "TracingUnavailable", "start"]

MODES: Final = ("auto", "otlp", "off")
"""``TIDINGS_TRACING``: ``auto`` traces when the extra is installed and an OTLP endpoint is
configured (``OTEL_EXPORTER_OTLP_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``);
``otlp`` traces to the OTLP/HTTP default (``http://localhost:4318``) without one, and
refuses to start without the extra; ``off`` never traces."""

SYSTEM: Final = "tidings"
LINKS_MAX: Final = 128
"""Most links a span gets (the SDK's default limit, OTEL_SPAN_LINK_COUNT_LIMIT): a request
may hold 10,000 traced events, each of another trace."""
CLOSE_S: Final = 2.0
"""How long a stop waits for the spans still buffered to be exported."""
_ENDPOINTS: Final = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")


class TracingUnavailable(Exception):
    """``TIDINGS_TRACING=otlp`` without the ``otel`` extra installed."""


def start(mode: str, env: Mapping[str, str] | None = None) -> Tracing | None:
    """The broker's tracing for ``mode`` (:data:`MODES`), or None when it is off: the
    extra absent, nothing configured, ``OTEL_SDK_DISABLED=true`` or
    ``OTEL_TRACES_EXPORTER=none``. Only then is OpenTelemetry imported."""
    env = os.environ if env is None else env
    if env.get("TIDINGS_HOPS_DIR", "").strip():
        # bench.profile hops: per-hop timestamps in memory instead of spans (tidings/hops.py)
        from .hops import recorder

        return cast("Tracing | None", recorder())
    if mode == "off" or env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    if env.get("OTEL_TRACES_EXPORTER", "").strip().lower() == "none":
        return None
    if mode == "auto" and not any(env.get(k, "").strip() for k in _ENDPOINTS):
        return None
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import SERVICE_NAME, Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError as e:
        if mode == "auto":
            return None
        raise TracingUnavailable(
            f"TIDINGS_TRACING=otlp needs the otel extra: pip install 'tidings[otel]' ({e})"
        ) from None
    # The OTEL_* environment configures the rest as for any OpenTelemetry SDK: the
    # exporter's endpoint, headers and timeout, the batch processor, the sampler, and
    # the resource (OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES).
    resource = Resource.create()
    if str(resource.attributes.get(SERVICE_NAME, "unknown_service")).startswith("unknown_service"):
        resource = resource.merge(Resource({SERVICE_NAME: "tidings"}))  # neither OTEL_* named it
    provider = TracerProvider(resource=resource, shutdown_on_exit=False)
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    return Tracing(provider)


class Tracing:
    """Spans of the broker's publish and push paths, from one tracer provider."""

    def __init__(self, provider: TracerProvider) -> None:
        from opentelemetry import trace
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        self._provider = provider
        self._trace = trace
        self._tracer: Tracer = provider.get_tracer("tidings")
        self._propagator = TraceContextTextMapPropagator()

    def _remote(self, context: tracecontext.TraceContext) -> Any:
        return self._propagator.extract(context.pairs())

    def receive(self, rows: Sequence[Prepared]) -> PublishSpans | None:
        """Start the ``receive`` span of each row that has a trace context; None if none has."""
        kind = self._trace.SpanKind.CONSUMER
        spans: dict[int, tuple[str, Span]] = {}
        for row in rows:
            context = tracecontext.of_headers(row.headers)
            if context is None:
                continue
            spans[row.index] = (row.namespace, self._tracer.start_span(
                f"receive {row.namespace}", context=self._remote(context), kind=kind,
                attributes=_attributes("receive", "receive", row.namespace),
            ))
        return PublishSpans(self, spans) if spans else None

    def push(
        self, sub_id: int, ids: Sequence[int], namespaces: Sequence[str], headers: Sequence[bytes]
    ) -> PushSpan | None:
        """Start the span of one push of events (their ids, namespaces and stored headers,
        in push order) to subscription ``sub_id``; None if none of them has a trace context."""
        contexts = [tracecontext.of_headers(h) for h in headers]
        traced = [(i, c) for i, c in enumerate(contexts) if c is not None]
        if not traced:
            return None
        first, context = traced[0]
        ns = namespaces[first]
        attributes = _attributes("push", "send", ns)
        attributes["messaging.destination.subscription.name"] = str(sub_id)
        if len(headers) > 1:
            attributes["messaging.batch.message_count"] = len(headers)
        else:
            attributes["messaging.message.id"] = str(ids[0])
        links = [self._trace.Link(self._trace.get_current_span(self._remote(c)).get_span_context())
                 for _, c in traced[1:LINKS_MAX + 1]]
        span = self._tracer.start_span(f"push {ns}", context=self._remote(context), kind=self._trace.SpanKind.CLIENT,
                                       attributes=attributes, links=links)
        carrier: dict[str, str] = {}
        self._propagator.inject(carrier, context=self._trace.set_span_in_context(span))
        if context.tracestate is not None and tracecontext.TRACESTATE not in carrier:
            carrier[tracecontext.TRACESTATE] = context.tracestate
        return PushSpan(self, span, carrier)

    def close(self, timeout_s: float = CLOSE_S) -> None:
        """Export what is buffered and stop (the broker's stop), waiting at most
        ``timeout_s``: the SDK's own shutdown waits up to 30 s, and longer while the
        exporter retries a collector that is down; a stop must not."""
        done = threading.Thread(target=self._provider.shutdown, name="tidings-tracing-close", daemon=True)
        done.start()
        done.join(timeout_s)


class PublishSpans:
    """The spans of one publish's traced rows, by the row's position in the request."""

    def __init__(self, tracing: Tracing, receive: dict[int, tuple[str, Span]]) -> None:
        self._t = tracing
        self._receive = receive
        self._open: list[Span] = []

    def _open_one(self, operation: str, kind: Any, accepted: Sequence[int], op_type: str | None) -> None:
        """One span for the request's accepted rows (an append is one commit for all): the
        child of the first traced one's receive span, linked to the other traced ones'."""
        t = self._t
        traced = [self._receive[i] for i in accepted if i in self._receive]
        if not traced:
            return
        ns, parent = traced[0]
        attributes = _attributes(operation, op_type, ns)
        if len(accepted) > 1:
            attributes["messaging.batch.message_count"] = len(accepted)
        links = [t._trace.Link(span.get_span_context()) for _, span in traced[1:LINKS_MAX + 1]]
        self._open.append(t._tracer.start_span(
            f"{operation} {ns}", context=t._trace.set_span_in_context(parent), kind=kind, attributes=attributes,
            links=links,
        ))

    def _close_open(self, error: str | None, message_id: int | None = None) -> None:
        for span in self._open:
            if message_id is not None:
                span.set_attribute("messaging.message.id", str(message_id))
            if error is not None:
                _failed(self._t, span, error)
            span.end()
        self._open = []

    def commit(self, accepted: Sequence[int]) -> None:
        """The append of the rows at these positions begins."""
        self._open_one("commit", self._t._trace.SpanKind.PRODUCER, accepted, "create")

    def committed(self, accepted: Sequence[int], ids: Sequence[int] | None, error: str | None = None) -> None:
        """The append ended: the ids the rows at ``accepted`` got, or why it failed."""
        if ids is None:
            self._close_open(error)
            return
        for i, event_id in zip(accepted, ids, strict=True):
            got = self._receive.get(i)
            if got is not None:
                got[1].set_attribute("messaging.message.id", str(event_id))
        self._close_open(error, ids[0] if len(ids) == 1 else None)

    def route(self, accepted: Sequence[int]) -> None:
        """The hand-off of the stored rows to delivery begins."""
        self._open_one("route", self._t._trace.SpanKind.INTERNAL, accepted, None)

    def end(self, results: Sequence[Any] | None) -> None:
        """End every span; a row answered ``Err`` (or all, without ``results``: the publish
        failed as a whole) has an error status."""
        self._close_open(None if results is not None else "publish_failed")
        for i, (_, span) in self._receive.items():
            result = results[i] if results is not None and i < len(results) else None
            if result is None or getattr(result, "Err", msgspec.UNSET) is not msgspec.UNSET:
                _failed(self._t, span, _error_type(result))
            span.end()


class PushSpan:
    """One push's span, and the ``traceparent``/``tracestate`` the push carries for it."""

    def __init__(self, tracing: Tracing, span: Span, headers: dict[str, str]) -> None:
        self._t = tracing
        self._span = span
        self.headers = headers

    def end(self, outcome: str, reason: str) -> None:
        """End the span: ``outcome`` is the push's (``ack``, ``no_answer``, ...), ``reason`` its log reason."""
        self._span.set_attribute("tidings.push.outcome", outcome)
        if outcome != "ack":
            _failed(self._t, self._span, reason)
        self._span.end()


def _attributes(operation: str, op_type: str | None, namespace: str) -> dict[str, Any]:
    out: dict[str, Any] = {
        "messaging.system": SYSTEM, "messaging.operation.name": operation, "messaging.destination.name": namespace,
    }
    if op_type is not None:
        out["messaging.operation.type"] = op_type
    return out


def _failed(t: Tracing, span: Span, error: str) -> None:
    span.set_attribute("error.type", error)
    span.set_status(t._trace.Status(t._trace.StatusCode.ERROR, error))


def _error_type(result: Any) -> str:
    """The ``Err`` code of an item's result (``Unauthorized``, ``Busy``...)."""
    err = getattr(result, "Err", msgspec.UNSET)
    if err is msgspec.UNSET:
        return "publish_failed"
    return next((f for f in err.__struct_fields__ if getattr(err, f) is not msgspec.UNSET), "error")
