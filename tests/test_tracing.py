"""OpenTelemetry across the hop (docs/operations.md, "Tracing"): a real server exporting
over OTLP/HTTP to a real receiver in the test (``POST /v1/traces``, protobuf
``ExportTraceServiceRequest``), one trace from the publisher's span through tidings'
receive, commit, route and push spans to the traceparent the subscriber receives; and
tracing off costs nothing (OpenTelemetry is not even imported)."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.trace.v1.trace_pb2 import Span
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from tidings import tracing
from tidings.core.ingest import Prepared
from tidings.core.wire import err, ok

from .conftest import ServerProcess, admin_api, eventually, read_body, respond

NS = "com.example.traced"


class Collector:
    """An OTLP/HTTP trace receiver: keeps every span exported to it."""

    def __init__(self) -> None:
        self.spans: list[Span] = []
        self.resources: list[dict[str, Any]] = []

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = await read_body(receive)
        headers = {k.decode(): v.decode() for k, v in scope["headers"]}
        if scope["path"] != "/v1/traces" or scope["method"] != "POST":
            await respond(send, 404, b"")
            return
        if headers.get("content-encoding") == "gzip":
            body = gzip.decompress(body)
        request = ExportTraceServiceRequest.FromString(body)
        for rs in request.resource_spans:
            self.resources.append({a.key: a.value.string_value for a in rs.resource.attributes})
            for ss in rs.scope_spans:
                self.spans.extend(ss.spans)
        await respond(send, 200, ExportTraceServiceResponse().SerializeToString(),
                      content_type="application/x-protobuf")

    def named(self, name: str) -> list[Span]:
        return [s for s in self.spans if s.name == name]


class Subscriber:
    def __init__(self) -> None:
        self.pushes: list[tuple[dict[str, str], Any]] = []

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        self.pushes.append((headers, json.loads(await read_body(receive))))
        await respond(send, 200, b"")


@pytest.fixture
def traced_server(tmp_path: Path) -> Iterator[Any]:
    started: list[ServerProcess] = []

    def make(collector_url: str) -> ServerProcess:
        s = ServerProcess(tmp_path / "server", env={
            "OTEL_EXPORTER_OTLP_ENDPOINT": collector_url.rstrip("/"), "OTEL_BSP_SCHEDULE_DELAY": "50",
            "OTEL_SERVICE_NAME": "tidings-under-test",
        })
        s.data_dir.mkdir()
        s.start(new_port_if_taken=True)
        started.append(s)
        return s

    yield make
    for s in started:
        s.stop()


def attrs(span: Span) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for a in span.attributes:
        kind = a.value.WhichOneof("value")
        out[a.key] = getattr(a.value, kind) if kind else None
    return out


@pytest.mark.e2e
async def test_one_trace_runs_from_the_publisher_through_tidings_to_the_subscriber(
    traced_server: Any, endpoints: Any, http: aiohttp.ClientSession
) -> None:
    collector, subscriber = Collector(), Subscriber()
    otlp, ep = await endpoints(collector), await endpoints(subscriber)
    server = traced_server(otlp.url)
    await admin_api(http, server, "icrc72_register_publication", [{"namespace": NS}])
    await admin_api(http, server, "icrc72_register_subscription", [{"namespace": NS, "endpoint": ep.url}])
    auth = {"authorization": f"Bearer {server.admin_token}"}
    # A malformed traceparent is ignored (with its tracestate): no spans, no header.
    async with http.post(f"{server.url}/v1/icrc72_publish", headers={**auth, "traceparent": "00-zz-01",
                                                                     "tracestate": "a=1"},
                         data=json.dumps([{"namespace": NS, "data": {"Nat": 0}}])) as r:
        assert r.status == 200
    await eventually(lambda: subscriber.pushes)
    assert "traceparent" not in subscriber.pushes[0][0]

    publisher = TracerProvider().get_tracer("the-publisher")
    with publisher.start_as_current_span(f"send {NS}", kind=SpanKind.PRODUCER) as mine:
        carrier: dict[str, str] = {}
        TraceContextTextMapPropagator().inject(carrier)
        async with http.post(f"{server.url}/v1/icrc72_publish", headers={**auth, **carrier, "tracestate": "v=1"},
                             data=json.dumps([{"namespace": NS, "data": {"Nat": 1}}])) as r:
            assert r.status == 200
            (answer,) = await r.json()
    event_id = answer["Ok"][0]
    trace_id = mine.get_span_context().trace_id.to_bytes(16, "big")
    publisher_span = mine.get_span_context().span_id.to_bytes(8, "big")

    await eventually(lambda: len(subscriber.pushes) == 2)
    await eventually(lambda: all(collector.named(f"{op} {NS}") for op in ("receive", "commit", "route", "push")))
    assert {s.trace_id for s in collector.spans} == {trace_id}  # the malformed one made none
    assert {r.get("service.name") for r in collector.resources} == {"tidings-under-test"}
    (receive,) = collector.named(f"receive {NS}")
    (commit,) = collector.named(f"commit {NS}")
    (route,) = collector.named(f"route {NS}")
    (push,) = collector.named(f"push {NS}")
    assert receive.parent_span_id == publisher_span and receive.kind == Span.SPAN_KIND_CONSUMER
    assert commit.parent_span_id == receive.span_id and commit.kind == Span.SPAN_KIND_PRODUCER
    assert route.parent_span_id == receive.span_id and route.kind == Span.SPAN_KIND_INTERNAL
    assert push.parent_span_id == publisher_span and push.kind == Span.SPAN_KIND_CLIENT
    common = {"messaging.system": "tidings", "messaging.destination.name": NS}
    assert attrs(receive) == {**common, "messaging.operation.name": "receive", "messaging.operation.type": "receive",
                              "messaging.message.id": str(event_id)}
    assert attrs(commit) == {**common, "messaging.operation.name": "commit", "messaging.operation.type": "create",
                             "messaging.message.id": str(event_id)}
    assert attrs(route) == {**common, "messaging.operation.name": "route"}
    (sub,) = await admin_api(http, server, "icrc72_get_subscriptions", {})
    assert attrs(push) == {**common, "messaging.operation.name": "push", "messaging.operation.type": "send",
                           "messaging.destination.subscription.name": str(sub["id"]), "tidings.push.outcome": "ack",
                           "messaging.message.id": str(event_id)}
    assert all(s.status.code != s.status.STATUS_CODE_ERROR for s in collector.spans)

    # The subscriber's traceparent continues the trace: same trace id, parent = tidings' push span.
    headers, (note,) = subscriber.pushes[1]
    version, got_trace, parent, flags = headers["traceparent"].split("-")
    assert (version, bytes.fromhex(got_trace), bytes.fromhex(parent)) == ("00", trace_id, push.span_id)
    assert int(flags, 16) & 1  # sampled (the SDK may add Level 2's random-trace-id flag, 02)
    assert headers["tracestate"] == "v=1"
    # The notification keeps the publisher's own context, as published.
    pairs = dict((k, v["Text"]) for k, v in note["headers"] if k in ("traceparent", "tracestate"))
    assert pairs == {"traceparent": carrier["traceparent"], "tracestate": "v=1"}


_PROBE = """
import sys
import time
{block}
from tidings import tracing
from tidings.core.ingest import Prepared
from tidings.core.wire import err, ok
assert tracing.start("auto", {{}}) is None
assert tracing.start("off", {{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"}}) is None
assert tracing.start("otlp", {{"OTEL_SDK_DISABLED": "true"}}) is None
assert tracing.start("otlp", {{"OTEL_TRACES_EXPORTER": "none"}}) is None
assert not [m for m, v in sys.modules.items() if m.startswith("opentelemetry") and v], "imported while off"
print(tracing.start("auto", {{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"}}) is None)
try:
    tracing.start("otlp", {{}})
    print("started")
except tracing.TracingUnavailable as e:
    print(e)
"""


@pytest.mark.parametrize("extra", ["installed", "absent"])
def test_tracing_is_none_unless_configured_and_needs_the_extra_only_when_asked(extra: str) -> None:
    """Unconfigured, ``start`` is None and OpenTelemetry is never imported; with the extra
    absent (its import blocked, as if not installed), ``auto`` stays off even when an
    endpoint is set, and ``otlp`` is refused with the pip command to run."""
    block = 'sys.modules["opentelemetry"] = None' if extra == "absent" else ""
    out = subprocess.run([sys.executable, "-c", _PROBE.format(block=block)], capture_output=True, text=True,
                         timeout=60, check=True).stdout.splitlines()
    if extra == "absent":
        assert out[0] == "True"
        assert out[1].startswith("TIDINGS_TRACING=otlp needs the otel extra: pip install 'tidings[otel]'")
    else:
        assert out == ["False", "started"]


def test_the_setting_takes_only_its_modes() -> None:
    from tidings.errors import ConfigError
    from tidings.settings import Settings

    assert Settings.from_env({"TIDINGS_TRACING": "otlp"}).tracing == "otlp"
    with pytest.raises(ConfigError, match="TIDINGS_TRACING='yes': use auto, otlp, off"):
        Settings.from_env({"TIDINGS_TRACING": "yes"})
    assert tracing.MODES == ("auto", "otlp", "off")


@pytest.mark.e2e
async def test_a_failed_push_and_a_refused_event_have_error_spans(
    traced_server: Any, endpoints: Any, http: aiohttp.ClientSession
) -> None:
    """Each try of a push is a span: the one answered 503 has an error status naming it,
    the retry that is taken does not; an event refused (Unauthorized) ends its receive
    span in error, with no commit."""
    from tidings.client import Admin

    collector = Collector()
    failing = Subscriber()
    tries: list[int] = []

    async def flaky(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        tries.append(1)
        if len(tries) == 1:
            await read_body(receive)
            await respond(send, 503, b"")
            return
        await failing(scope, receive, send)

    otlp, ep = await endpoints(collector), await endpoints(flaky)
    server = traced_server(otlp.url)
    await admin_api(http, server, "icrc72_register_publication", [{"namespace": NS}])
    await admin_api(http, server, "icrc72_register_subscription", [{"namespace": NS, "endpoint": ep.url}])
    parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    async with http.post(f"{server.url}/v1/icrc72_publish", headers={
            "authorization": f"Bearer {server.admin_token}", "traceparent": parent},
            data=json.dumps([{"namespace": NS, "data": {"Nat": 1}}])) as r:
        assert r.status == 200
    async with Admin(server.url, server.admin_token) as admin:
        carol = await admin.create_principal("carol")
    async with http.post(f"{server.url}/v1/icrc72_publish", headers={
            "authorization": f"Bearer {carol}", "traceparent": parent.replace("00f0", "aaf0")},
            data=json.dumps([{"namespace": NS, "data": {"Nat": 2}}])) as r:
        (refused,) = await r.json()
        assert "Unauthorized" in refused["Err"]
    await eventually(lambda: failing.pushes)
    await eventually(lambda: len(collector.named(f"push {NS}")) == 2 and len(collector.named(f"receive {NS}")) == 2)
    first, second = sorted(collector.named(f"push {NS}"), key=lambda s: s.start_time_unix_nano)
    assert first.status.code == first.status.STATUS_CODE_ERROR and first.status.message == "http_503"
    assert attrs(first)["tidings.push.outcome"] == "error_answer" and attrs(first)["error.type"] == "http_503"
    assert second.status.code != second.status.STATUS_CODE_ERROR and attrs(second)["tidings.push.outcome"] == "ack"
    assert failing.pushes[0][0]["traceparent"].split("-")[2] == second.span_id.hex()
    (no,) = [s for s in collector.named(f"receive {NS}") if s.status.code == s.status.STATUS_CODE_ERROR]
    assert attrs(no)["error.type"] == "Unauthorized" and "messaging.message.id" not in attrs(no)
    assert [s.parent_span_id for s in collector.named(f"commit {NS}")] == [
        s.span_id for s in collector.named(f"receive {NS}") if s is not no]


_row = st.tuples(st.booleans(), st.booleans(), st.booleans())  # traced, accepted, answered Ok


@settings(max_examples=60, deadline=None)
@given(st.lists(_row, max_size=8), st.sampled_from([None, "store_error"]))
def test_every_span_of_a_publish_ends_under_the_right_parent(rows: list[tuple[bool, bool, bool]],
                                                             failure: str | None) -> None:
    """Whatever mix of traced, accepted and refused events a publish holds, and whether its
    commit fails: each traced event has one receive span under its publisher's, in error
    unless answered Ok; the append has one commit span (and, when it stored them, one route
    span) under the first traced accepted event's receive span, linked to the other traced
    accepted ones'; every span ends; untraced events have none."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(shutdown_on_exit=False)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    t = tracing.Tracing(provider)
    parents = [f"00-{i + 1:032x}-{i + 1:016x}-01" for i in range(len(rows))]
    prepared = [
        Prepared(i, NS, b"1", msgspec.json.encode([["traceparent", {"Text": parents[i]}]] if traced else []))
        for i, (traced, _, _) in enumerate(rows)
    ]
    spans = t.receive(prepared)
    traced = [i for i, r in enumerate(rows) if r[0]]
    if not traced:
        assert spans is None
        return
    assert spans is not None
    accepted = [i for i, r in enumerate(rows) if r[1]]
    spans.commit(accepted)
    if failure is None:
        spans.committed(accepted, [100 + i for i in accepted])
        spans.route(accepted)
    else:
        spans.committed(accepted, None, failure)
    results = [ok([100 + i]) if r[1] and r[2] and failure is None else err("Busy", "x") for i, r in enumerate(rows)]
    spans.end(results)
    done = exporter.get_finished_spans()
    receive = {s.parent.span_id: s for s in done if s.name.startswith("receive")}
    assert sorted(receive) == [i + 1 for i in traced]  # each under its publisher's span
    for i in traced:
        r = receive[i + 1]
        assert r.context.trace_id == i + 1
        assert (r.status.status_code is StatusCode.ERROR) == (results[i].Ok is msgspec.UNSET)
        stored = i in accepted and failure is None
        assert r.attributes.get("messaging.message.id") == (str(100 + i) if stored else None)
    ours = [i for i in traced if i in accepted]
    rest = [s for s in done if not s.name.startswith("receive")]
    assert sorted(s.name.split()[0] for s in rest) == ([] if not ours else ["commit"] if failure else
                                                       ["commit", "route"])
    for s in rest:
        assert s.parent.span_id == receive[ours[0] + 1].context.span_id
        assert [link.context.span_id for link in s.links] == [receive[i + 1].context.span_id for i in ours[1:]]
        assert (s.status.status_code is StatusCode.ERROR) == (s.name.startswith("commit") and failure is not None)
    assert all(s.end_time is not None for s in done)


@pytest.mark.e2e
async def test_a_collector_that_is_down_does_not_hold_a_stop_up(tmp_path: Path, http: aiohttp.ClientSession) -> None:
    """Spans left to export at SIGTERM get ``tracing.CLOSE_S``; the exporter retrying a
    dead collector (for up to 30 s here) does not keep the process from exiting 0."""
    from .conftest import free_port

    server = ServerProcess(tmp_path / "server", env={
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{free_port()}", "OTEL_BSP_SCHEDULE_DELAY": "600000",
        "OTEL_EXPORTER_OTLP_TIMEOUT": "30",
    })
    server.data_dir.mkdir()
    server.start(new_port_if_taken=True)
    try:
        await admin_api(http, server, "icrc72_register_publication", [{"namespace": NS}])
        async with http.post(f"{server.url}/v1/icrc72_publish", headers={
                "authorization": f"Bearer {server.admin_token}",
                "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
                data=json.dumps([{"namespace": NS, "data": {"Nat": 1}}])) as r:
            assert r.status == 200
    finally:
        started = time.monotonic()
        server.stop()
    assert server.exit_code == 0
    assert time.monotonic() - started < 2 * tracing.CLOSE_S + 4


def test_serve_refuses_otlp_without_the_extra_in_one_line(tmp_path: Path) -> None:
    """The extra's absence, made real for the process by blocking its import at start."""
    block = tmp_path / "block"
    block.mkdir()
    (block / "sitecustomize.py").write_text('import sys\nsys.modules["opentelemetry"] = None\n')
    env = {**os.environ, "PYTHONPATH": str(block), "TIDINGS_TRACING": "otlp"}
    done = subprocess.run([sys.executable, "-m", "tidings", "serve", "--port", "0", "--data-dir", str(tmp_path / "d")],
                          capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 2
    assert "TIDINGS_TRACING=otlp needs the otel extra: pip install 'tidings[otel]'" in done.stderr
    assert "Traceback" not in done.stderr + done.stdout


def test_a_push_of_many_traces_is_under_the_first_and_links_at_most_128() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(shutdown_on_exit=False)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    t = tracing.Tracing(provider)
    n = 300
    headers = [msgspec.json.encode([["traceparent", {"Text": f"00-{i + 1:032x}-{i + 1:016x}-01"}]]) for i in range(n)]
    push = t.push(7, list(range(1, n + 2)), [NS] * (n + 1), [b"[]", *headers])  # the first untraced
    assert push is not None
    assert push.headers["traceparent"].startswith(f"00-{1:032x}-")
    push.end("ack", "ok")
    (span,) = exporter.get_finished_spans()
    assert span.parent is not None and (span.parent.trace_id, span.parent.span_id) == (1, 1)
    assert [link.context.span_id for link in span.links] == list(range(2, 2 + tracing.LINKS_MAX))
    assert span.attributes["messaging.batch.message_count"] == n + 1
    assert t.push(7, [1], [NS], [b"[]"]) is None


@pytest.mark.parametrize(("env", "name"), [
    ({}, "tidings"), ({"OTEL_SERVICE_NAME": "orders-bus"}, "orders-bus"),
    ({"OTEL_RESOURCE_ATTRIBUTES": "service.name=from-attributes,deployment.environment=prod"}, "from-attributes"),
])
def test_the_service_name_is_tidings_unless_the_otel_environment_names_one(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], name: str
) -> None:
    for k in ("OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES"):
        monkeypatch.delenv(k, raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    t = tracing.start("otlp", {})
    assert t is not None
    try:
        assert t._provider.resource.attributes["service.name"] == name
    finally:
        t.close()
