"""The executor side of the sink: events to the broker over blocking HTTP, with retries.

A Spark task publishes its rows in order, ``batch_size`` events per ``icrc72_publish``
call, on one kept-alive ``http.client`` connection (stdlib: nothing to pickle, nothing
to start). How each answer is handled:

* ``200``, item ``Ok``: published;
* ``200``, item ``Busy``, ``GenericBatchError``, ``null`` or ``GenericError`` 6 (may have been
  stored): sent again after a back-off, with the same idempotency keys;
* ``200``, any other item ``Err``: refused (``Unauthorized``, a schema violation...);
* ``404 namespace_not_found``: nothing applied; each namespace is sent on its own and the
  rows of an unknown one are refused;
* ``400`` or ``413``: nothing applied; the batch is sent again in halves, down to the one
  event the broker refuses (too large, malformed);
* ``401`` or ``403``: the token may not publish at all; the task fails at once;
* ``5xx``, connection refused, reset or timed out: sent again after a back-off, then the task fails.

A call that failed in transit may have been stored before the answer was lost; each
event carries an idempotency key made from where its row is (``sink.row_key``), so the
call sent again stores nothing twice and is answered with the ids of the first
(docs/pipeline.md, "Exactly once").
"""

from __future__ import annotations

import http.client
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Final
from urllib.parse import urlsplit

import msgspec
from msgspec import UNSET, structs

from ..core.ingest import ERR_MAYBE_STORED
from ..core.undecodable import UNDECODABLE
from ..core.wire import Event, GenericError, ItemResult
from .errors import PipelineError

__all__ = ["Backoff", "BrokerPublisher", "Refusal", "Tally"]

MAX_REFUSALS_KEPT: Final = 5
"""Refusals a task reports in full; the others are only counted."""
_RETRYABLE_ITEMS: Final = frozenset({"Busy", "GenericBatchError"})
_SPLITTABLE: Final = frozenset({400, 404, 413})
_encode = msgspec.json.Encoder().encode
_results = msgspec.json.Decoder(list[ItemResult | None])


class _Problem(msgspec.Struct):
    code: str
    message: str


class _ProblemBody(msgspec.Struct):
    error: _Problem


_problem = msgspec.json.Decoder(_ProblemBody)


@dataclass(frozen=True)
class Refusal:
    """One row the broker (or the sink) would not publish."""

    partition: int
    row: int
    """The row's index among its task's rows, from 0."""
    namespace: str | None
    code: str
    message: str


@dataclass
class Tally:
    """What one task did: the commit message it sends to the driver (picklable)."""

    partition: int
    rows: int = 0
    published: int = 0
    refused: int = 0
    refusals: list[Refusal] = field(default_factory=list)
    """The first :data:`MAX_REFUSALS_KEPT` refusals."""
    codes: dict[str, int] = field(default_factory=dict)
    """Refused rows per error code, all of them."""
    warnings: list[str] = field(default_factory=list)

    def refuse(self, row: int, namespace: str | None, code: str, message: str) -> None:
        self.refused += 1
        self.codes[code] = self.codes.get(code, 0) + 1
        if len(self.refusals) < MAX_REFUSALS_KEPT:
            self.refusals.append(Refusal(self.partition, row, namespace, code, message))


@dataclass(frozen=True)
class Backoff:
    """Delays between tries: ``initial_s``, doubling up to ``max_s``, ``retries`` of them."""

    retries: int = 5
    initial_s: float = 0.5
    max_s: float = 8.0

    def delays(self) -> Iterator[float]:
        delay = self.initial_s
        for _ in range(self.retries):
            yield delay
            delay = min(self.max_s, delay * 2)


class _Transient(Exception):
    """No usable answer: worth another try."""


class BrokerPublisher:
    """Publishes ``(row, Event)`` batches as one principal, recording each row's fate in a :class:`Tally`.

    ``sleep`` is injectable so tests of the back-off need not wait."""

    def __init__(
        self, url: str, token: str, *, timeout_s: float = 30.0, backoff: Backoff = Backoff(),
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        parts = urlsplit(url.rstrip("/"))
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise PipelineError(f"url must be http(s)://host[:port][/prefix], not {url!r}", code="invalid_option")
        self._https = parts.scheme == "https"
        self._host = parts.hostname
        self._port = parts.port
        self._path = f"{parts.path}/v1/icrc72_publish"
        self._headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
        self._timeout = timeout_s
        self._backoff = backoff
        self._sleep = sleep
        self._conn: http.client.HTTPConnection | None = None
        self._url = f"{parts.scheme}://{parts.netloc}{parts.path}"

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def publish(self, batch: list[tuple[int, Event]], tally: Tally) -> None:
        """Publish ``batch`` (row index, event) in order; raise :class:`PipelineError` if the task must fail."""
        pending = batch
        delays = self._backoff.delays()
        while pending:
            try:
                status, body, warnings = self._post(_encode([e for _, e in pending]))
            except _Transient as e:
                self._wait(delays, "broker_unavailable", f"no answer from {self._url} ({e})")
                continue
            for w in warnings:
                if w not in tally.warnings:
                    tally.warnings.append(w)
            if status == 200:
                pending, why = self._settle(pending, _results.decode(body), tally)
                if pending:
                    self._wait(delays, "broker_busy", f"the broker did not store {len(pending)} events ({why})")
                continue
            code, message = _problem_of(status, body)
            if status in (401, 403):
                raise PipelineError(
                    f"write_unauthorized: {self._url} refused the token: {status} {code}: {message}",
                    code="write_unauthorized",
                )
            if status not in _SPLITTABLE:
                raise PipelineError(f"write_failed: {self._url}: {status} {code}: {message}", code="write_failed")
            namespaces = {e.namespace for _, e in pending}
            if code == "namespace_not_found" and len(namespaces) > 1:
                # Nothing was applied: publish each namespace on its own, so only the
                # unknown ones are refused (order is kept within each namespace).
                for ns in sorted(namespaces):
                    self.publish([p for p in pending if p[1].namespace == ns], tally)
                return
            if len(pending) == 1 or code == "namespace_not_found":
                for row, event in pending:
                    tally.refuse(row, event.namespace, code, message)
                return
            # Nothing of the batch was applied: find the events at fault by halves, in order.
            mid = len(pending) // 2
            self.publish(pending[:mid], tally)
            self.publish(pending[mid:], tally)
            return

    @staticmethod
    def _settle(
        pending: list[tuple[int, Event]], results: list[ItemResult | None], tally: Tally
    ) -> tuple[list[tuple[int, Event]], str]:
        """Count what was published or refused; return what must be sent again, and why."""
        again, why = [], ""
        for (row, event), r in zip(pending, results, strict=True):
            if r is None:
                again.append((row, event))
                why = why or "not processed"
                continue
            if r.Err is UNSET:
                tally.published += 1
                continue
            code = r.Err.code
            detail = structs.asdict(r.Err)[code]
            maybe = isinstance(detail, GenericError) and detail.error_code == ERR_MAYBE_STORED
            if code in _RETRYABLE_ITEMS or maybe:
                again.append((row, event))
                why = why or f"{code}: {detail}"
                continue
            if code == "GenericError":
                detail = f"error_code {detail.error_code}: {detail.message}"
            tally.refuse(row, event.namespace, code, str(detail))
        return again, why

    def _wait(self, delays: Iterator[float], code: str, why: str) -> None:
        delay = next(delays, None)
        if delay is None:
            raise PipelineError(f"{code}: {why}, after {self._backoff.retries} retries", code=code)
        self._sleep(delay)

    def _post(self, body: bytes) -> tuple[int, bytes, list[str]]:
        if self._conn is None:
            cls = http.client.HTTPSConnection if self._https else http.client.HTTPConnection
            self._conn = cls(self._host, self._port, timeout=self._timeout)
        try:
            self._conn.request("POST", self._path, body, self._headers)
            resp = self._conn.getresponse()
            raw = resp.read()
        except (OSError, http.client.HTTPException) as e:
            # Refused, reset, timed out, or a kept-alive connection the server closed.
            self.close()
            raise _Transient(repr(e)) from e
        if resp.status >= 500:
            code, message = _problem_of(resp.status, raw)
            raise _Transient(f"{resp.status} {code}: {message}")
        return resp.status, raw, resp.headers.get_all("Warning") or []


def _problem_of(status: int, body: bytes) -> tuple[str, str]:
    try:
        p = _problem.decode(body).error
    except UNDECODABLE:
        return "http_error", body[:200].decode(errors="replace")
    return p.code, p.message
