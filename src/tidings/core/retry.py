"""How a push outcome is classified, and how long to wait before trying again.

Pure: the delivery worker feeds it what happened, the time and a random number, and acts
on the answer. The rules (REFERENCE §6, docs/delivery.md):

* a 2xx answer is an ack; ``410 Gone`` ends the subscription;
* ``429`` or ``503`` with a valid ``Retry-After`` (delay-seconds or an HTTP date) is
  *back-pressure*: the next push waits that long (within bounds), and the push is not a
  failed try: it neither counts as an attempt nor as an error answer;
* anything else that is an answer is an *error answer*; no answer at all (connection
  refused or reset, timeout) is a *failure*.

Back-off doubles from an initial delay up to a maximum, with jitter so that many
subscriptions failing together do not retry in step.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass

__all__ = ["Backoff", "Outcome", "classify", "http_date_seconds", "retry_after_seconds"]

_MAX_DELAY_DIGITS = 12
"""Longer delay-seconds values are refused as broken (and would not fit a float exactly)."""

_MONTHS = {m: i for i, m in enumerate(
    ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"), start=1)}
_DAY = r"(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun)"
_LONG_DAY = r"(?:Monday|Tuesday|Wednesday|Thursday|Friday|Saturday|Sunday)"
_MON = r"(?P<mon>Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)"
_TIME = r"(?P<h>\d\d):(?P<mi>\d\d):(?P<s>\d\d)"
# RFC 9110 §5.6.7: IMF-fixdate, and the obsolete RFC 850 and asctime forms recipients accept.
_HTTP_DATES = (
    re.compile(rf"{_DAY}, (?P<d>\d\d) {_MON} (?P<y>\d{{4}}) {_TIME} GMT", re.ASCII),
    re.compile(rf"{_LONG_DAY}, (?P<d>\d\d)-{_MON}-(?P<yy>\d\d) {_TIME} GMT", re.ASCII),
    re.compile(rf"{_DAY} {_MON} (?P<d>[ \d]\d) {_TIME} (?P<y>\d{{4}})", re.ASCII),
)


def _days_from_civil(y: int, m: int, d: int) -> int:
    """Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's algorithm)."""
    y -= m <= 2
    era = y // 400
    yoe = y - era * 400
    doy = (153 * (m + (-3 if m > 2 else 9)) + 2) // 5 + d - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468


def http_date_seconds(text: str, now_s: float) -> float | None:
    """An HTTP date as Unix seconds, or None if ``text`` is not one. A two-digit RFC 850
    year more than 50 years ahead of ``now_s`` is read in the past century (§5.6.7)."""
    for rx in _HTTP_DATES:
        m = rx.fullmatch(text)
        if m is None:
            continue
        parts = m.groupdict()
        if parts.get("yy") is not None:
            year = 1970 + int(now_s // 31_556_952)
            year = year - year % 100 + int(parts["yy"])
            if year > 1970 + int(now_s // 31_556_952) + 50:
                year -= 100
        else:
            year = int(parts["y"])
        day, hour, minute, sec = int(parts["d"]), int(parts["h"]), int(parts["mi"]), int(parts["s"])
        month = _MONTHS[parts["mon"]]
        leap = year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)
        month_days = (31, 29 if leap else 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)[month - 1]
        if not (1 <= day <= month_days and hour < 24 and minute < 60 and sec < 61):
            return None
        return float(_days_from_civil(year, month, day) * 86_400 + hour * 3600 + minute * 60 + sec)
    return None


class Outcome(enum.Enum):
    ACK = "ack"
    GONE = "gone"
    BACK_PRESSURE = "back_pressure"
    """``429``/``503`` with ``Retry-After``: wait, then push again; not a failed try."""
    ERROR_ANSWER = "error_answer"
    """The endpoint answered, with an error (non-2xx, or an itemized ``Err``)."""
    NO_ANSWER = "no_answer"
    """Connection refused or reset, or no answer before the deadline."""


def classify(status: int | None, retry_after: float | None = None) -> Outcome:
    """The outcome of a push from its HTTP status (``None``: no answer) and the wait its
    ``Retry-After`` asked for (from :func:`retry_after_seconds`)."""
    if status is None:
        return Outcome.NO_ANSWER
    if 200 <= status < 300:
        return Outcome.ACK
    if status == 410:
        return Outcome.GONE
    if status in (429, 503) and retry_after is not None:
        return Outcome.BACK_PRESSURE
    return Outcome.ERROR_ANSWER


def retry_after_seconds(status: int | None, header: str | None, now_s: float) -> float | None:
    """The wait a ``429`` or ``503`` answer asks for in ``Retry-After`` (RFC 9110 §10.2.3):
    delay-seconds (digits only) or an HTTP date, against the wall clock ``now_s`` (Unix
    seconds). A date in the past asks for no wait. None when there is no such answer or
    the header is not valid."""
    if status not in (429, 503) or header is None:
        return None
    text = header.strip()
    if not text:
        return None
    if text.isascii() and text.isdigit():
        return float(text) if len(text) <= _MAX_DELAY_DIGITS else None
    when = http_date_seconds(text, now_s)
    return None if when is None else max(0.0, when - now_s)


@dataclass(frozen=True, slots=True)
class Backoff:
    initial_s: float = 0.5
    maximum_s: float = 30.0
    multiplier: float = 2.0
    jitter: float = 0.5
    """The delay is drawn from ``[base * (1 - jitter), base]``."""

    def delay(self, attempt: int, rand: float) -> float:
        """The wait before try ``attempt + 1`` after ``attempt`` failed tries (``attempt >= 1``).

        ``rand`` is a uniform number in [0, 1)."""
        base = min(self.maximum_s, self.initial_s * self.multiplier ** max(0, attempt - 1))
        return base * (1 - self.jitter * rand)

    def pressure_delay(self, retry_after: float, cap_s: float) -> float:
        """The wait an endpoint's ``Retry-After`` buys: what it asked for, but at least the
        initial delay (``Retry-After: 0`` must not make a busy loop) and at most ``cap_s``
        (a broken or hostile header must not park the subscription for a year)."""
        return min(max(retry_after, self.initial_s), max(cap_s, self.initial_s))
