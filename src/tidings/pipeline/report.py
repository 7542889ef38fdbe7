"""The statistics report: one self-contained HTML file a person opens in a browser.

::

    from tidings.pipeline.report import write_report
    write_report(result, "report.html")      # result: tidings.pipeline.stats.Stats

No scripts, no fonts, no CDN: the plots are inline SVG drawn here, so the file opens
offline and can be mailed around. Every string that comes from users (namespaces,
principal names, the data dir) is HTML-escaped.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Iterable, Sequence
from html import escape
from pathlib import Path
from typing import Final

from ._human import fmt_figure
from .stats import Dimension, Point, Row, Stats

__all__ = ["render", "write_report"]

_COLOURS: Final = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf")
_TOP: Final = 8
"""Keys drawn per chart of a dimension, the busiest first (all of them are in its table)."""
_W, _H = 760, 260
_LEFT, _RIGHT, _TOP_M, _BOTTOM = 70, 20, 36, 40

Series = tuple[str, list[float | None]]


def write_report(result: Stats, path: str | Path) -> Path:
    """Write the report of ``result`` to ``path`` (folders made as needed); the path written."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(render(result), encoding="utf-8")
    return p


def render(result: Stats) -> str:
    """The report as one HTML document."""
    grid = _grid(result)
    parts = [
        _HEAD,
        "<h1>tidings delivery statistics</h1>",
        f"<p class=meta>Store <code>{escape(result.data_dir)}</code> · window {_window(result)} · "
        f"buckets of {_duration(result.bucket_s)} · generated {_time(result.generated_at_ns)} UTC "
        f"in {result.spark_s:.1f} s</p>",
        "<h2>Totals</h2>",
        _table([result.totals], key_title=None),
    ]
    if grid:
        overall = _points(result, "all", "", grid)
        parts += [
            "<h2>Over time</h2>",
            _chart("Traffic per bucket", grid, [
                ("events", [float(p.events or 0) for p in overall]),
                ("notifications", [float(p.notifications) for p in overall]),
                ("confirmations", [float(p.confirmations) for p in overall]),
            ]),
            _chart("Delivery latency, publish to confirmation (ms)", grid, [
                ("p50", [p.p50_ms for p in overall]),
                ("p90", [p.p90_ms for p in overall]),
                ("p99", [p.p99_ms for p in overall]),
            ]),
            _chart("Retries and failures per bucket", grid, [
                ("retries", [float(p.retries) for p in overall]),
                ("dead letters", [float(p.dead_letters) for p in overall]),
                ("dropped", [float(p.dropped) for p in overall]),
            ]),
        ]
    titles: dict[Dimension, str] = {
        "publication": "Publications", "publisher": "Publishers", "subscriber": "Subscribers",
    }
    for dim, title in titles.items():
        rows = [r for r in result.rows if r.dimension == dim]
        parts.append(f"<h2>{title}</h2>")
        if not rows:
            parts.append("<p>None in this window.</p>")
            continue
        parts.append(_table(rows, key_title=title[:-1].lower()))
        if grid:
            busiest = sorted(rows, key=lambda r: (-(r.events or r.notifications), r.key))[:_TOP]
            volume = "notifications" if dim == "subscriber" else "events"
            parts.append(_chart(f"{volume.capitalize()} per {title[:-1].lower()} and bucket", grid, [
                (r.key, [float(getattr(p, volume) or 0) for p in _points(result, dim, r.key, grid)]) for r in busiest
            ]))
            parts.append(_chart(f"p99 latency per {title[:-1].lower()} (ms)", grid, [
                (r.key, [p.p99_ms for p in _points(result, dim, r.key, grid)]) for r in busiest
                if r.p99_ms is not None
            ]))
    parts.append(_NOTES)
    parts.append("</body></html>\n")
    return "\n".join(parts)


# -- tables ---------------------------------------------------------------------------

_COLUMNS: Final = (
    ("events", "events"), ("notifications", "notifications"), ("confirmations", "confirmations"),
    ("retries", "retries"), ("dead_letters", "dead letters"), ("dropped", "dropped"), ("pending", "pending"),
    ("p50_ms", "p50 ms"), ("p90_ms", "p90 ms"), ("p99_ms", "p99 ms"),
)


def _table(rows: Sequence[Row], *, key_title: str | None) -> str:
    head = "".join(f"<th>{escape(t)}</th>" for _, t in _COLUMNS)
    out = ["<table><thead><tr>", f"<th>{escape(key_title)}</th>" if key_title else "", head, "</tr></thead><tbody>"]
    for r in rows:
        cells = "".join(f"<td>{_cell(getattr(r, name))}</td>" for name, _ in _COLUMNS)
        out.append(f"<tr>{f'<td class=key>{escape(r.key)}</td>' if key_title else ''}{cells}</tr>")
    out.append("</tbody></table>")
    return "".join(out)


def _cell(v: int | float | None) -> str:
    if v is None:
        return "&ndash;"
    if isinstance(v, float):
        return f"{v:,.1f}"
    return f"{v:,}"


# -- charts ---------------------------------------------------------------------------


def _grid(result: Stats) -> list[int]:
    """Every bucket start from the first to the last that has figures, so gaps show as zeros."""
    starts = [p.start_ns for p in result.series]
    if not starts:
        return []
    step = result.bucket_s * 10**9
    lo, hi = min(starts), max(starts)
    if (hi - lo) // step > 5000:  # a very long window in small buckets: only the buckets with figures
        return sorted(set(starts))
    return list(range(lo, hi + 1, step))


def _points(result: Stats, dim: Dimension, key: str, grid: list[int]) -> list[Point]:
    have = {p.start_ns: p for p in result.series if p.dimension == dim and p.key == key}
    return [have.get(t) or _zero(dim, key, t) for t in grid]


def _zero(dim: Dimension, key: str, start_ns: int) -> Point:
    return Point(dimension=dim, key=key, start_ns=start_ns, events=0, notifications=0, confirmations=0, retries=0,
                 dead_letters=0, dropped=0, pending=0, p50_ms=None, p90_ms=None, p99_ms=None)


def _chart(title: str, xs: list[int], series: Sequence[Series]) -> str:
    """A line chart as inline SVG: one line per series over the bucket starts ``xs``."""
    values = [v for _, ys in series for v in ys if v is not None]
    if not series or not values:
        return f"<figure><figcaption>{escape(title)}</figcaption><p>No data.</p></figure>"
    top = _nice(max(values))
    pw, ph = _W - _LEFT - _RIGHT, _H - _TOP_M - _BOTTOM
    x0, x1 = xs[0], xs[-1]

    def x(t: int) -> float:
        return _LEFT + (pw / 2 if x1 == x0 else (t - x0) / (x1 - x0) * pw)

    def y(v: float) -> float:
        return _TOP_M + ph - (v / top * ph if top else 0)

    out = [f'<figure><svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {_W} {_H}" width="{_W}" height="{_H}" '
           f'role="img" aria-label="{escape(title)}">']
    for i in range(5):  # horizontal grid and y labels
        v = top * i / 4
        out.append(f'<line x1="{_LEFT}" x2="{_W - _RIGHT}" y1="{y(v):.1f}" y2="{y(v):.1f}" class="grid" />'
                   f'<text x="{_LEFT - 6}" y="{y(v) + 4:.1f}" text-anchor="end">{fmt_figure(v)}</text>')
    for t in _ticks(xs):
        out.append(f'<text x="{x(t):.1f}" y="{_H - _BOTTOM + 16}" text-anchor="middle">{_time(t, short=True)}</text>')
    out.append(f'<line x1="{_LEFT}" x2="{_LEFT}" y1="{_TOP_M}" y2="{_TOP_M + ph}" class="axis" />'
               f'<line x1="{_LEFT}" x2="{_W - _RIGHT}" y1="{_TOP_M + ph}" y2="{_TOP_M + ph}" class="axis" />')
    lx = _LEFT
    for k, (name, ys) in enumerate(series):
        colour = _COLOURS[k % len(_COLOURS)]
        for run in _runs(xs, ys):
            if len(run) < 2 and len(xs) <= 120:
                continue  # a lone point: its circle shows it
            pts = " ".join(f"{x(t):.1f},{y(v):.1f}" for t, v in run)
            out.append(f'<polyline points="{pts}" fill="none" stroke="{colour}" stroke-width="1.8" />')
        if len(xs) <= 120:
            for t, value in zip(xs, ys, strict=True):
                if value is not None:
                    out.append(f'<circle cx="{x(t):.1f}" cy="{y(value):.1f}" r="2.6" fill="{colour}">'
                               f"<title>{escape(name)} {_time(t)}: {fmt_figure(value)}</title></circle>")
        label = escape(name if len(name) <= 28 else name[:27] + "…")
        out.append(f'<rect x="{lx}" y="10" width="10" height="10" fill="{colour}" />'
                   f'<text x="{lx + 14}" y="19">{label}</text>')
        lx += 24 + 7 * min(len(name), 28)
    out.append(f"</svg><figcaption>{escape(title)}</figcaption></figure>")
    return "".join(out)


def _runs(xs: list[int], ys: list[float | None]) -> Iterable[list[tuple[int, float]]]:
    """Consecutive points with values: a bucket without one breaks the line."""
    run: list[tuple[int, float]] = []
    for t, v in zip(xs, ys, strict=True):
        if v is None:
            if run:
                yield run
            run = []
        else:
            run.append((t, v))
    if run:
        yield run


def _ticks(xs: list[int]) -> list[int]:
    if len(xs) <= 6:
        return xs
    step = math.ceil(len(xs) / 6)
    return xs[::step]


def _nice(v: float) -> float:
    """The smallest 1, 2 or 5 times a power of ten at or above ``v``."""
    if v <= 0:
        return 1.0
    mag = 10 ** math.floor(math.log10(v))
    return next(m * mag for m in (1, 2, 5, 10) if m * mag >= v)


def _time(ns: int, *, short: bool = False) -> str:
    t = dt.datetime.fromtimestamp(ns / 1e9, dt.UTC)
    return t.strftime("%m-%d %H:%M" if short else "%Y-%m-%d %H:%M:%S")


def _duration(s: int) -> str:
    for unit, n in (("d", 86_400), ("h", 3600), ("m", 60)):
        if s % n == 0:
            return f"{s // n}{unit}"
    return f"{s}s"


def _window(result: Stats) -> str:
    since = "the beginning" if result.since_ns is None else _time(result.since_ns)
    until = "now" if result.until_ns is None else _time(result.until_ns)
    return f"{since} to {until}"


_HEAD: Final = """<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>tidings delivery statistics</title>
<style>
body { font: 14px/1.4 system-ui, sans-serif; margin: 2em auto; max-width: 1100px; color: #222; padding: 0 1em; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 2em; border-bottom: 1px solid #ddd; }
.meta { color: #555; }
table { border-collapse: collapse; margin: 0.5em 0 1em; font-variant-numeric: tabular-nums; }
th, td { padding: 3px 10px; border-bottom: 1px solid #eee; text-align: right; }
th:first-child, td.key { text-align: left; } td.key { font-family: ui-monospace, monospace; }
figure { margin: 1em 0; } figcaption { color: #444; font-weight: 600; }
svg text { font: 11px system-ui, sans-serif; fill: #444; }
svg .grid { stroke: #eee; } svg .axis { stroke: #888; }
</style></head><body>"""

_NOTES: Final = """<h2>What is counted</h2>
<ul>
<li><b>events</b>: events published in the window (by event timestamp), from the hot log and the archive.</li>
<li><b>notifications</b>: notifications recorded in the window (a redriven dead letter counts again).</li>
<li><b>confirmations</b>, <b>dead letters</b>, <b>dropped</b>: notifications confirmed, dead-lettered, or whose
dead letter was deleted, in the window (by when it happened).</li>
<li><b>retries</b>: pushes beyond the first, over the confirmed and dead-lettered notifications.</li>
<li><b>pending</b>: notifications recorded in the window and not settled yet.</li>
<li><b>latency</b>: from the event's timestamp to its confirmation, approximate percentiles of the notifications
confirmed (replays left out: a replayed event may be old).</li>
</ul>"""
