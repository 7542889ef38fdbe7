"""Numbers for people in the pipeline's progress lines and summaries: ``1,234,567 events``,
``312,000 events/s``, ``1.4 GiB``, ``2 min 5 s``; never ``4.33e+03``."""

from __future__ import annotations

__all__ = ["fmt_bytes", "fmt_count", "fmt_figure", "fmt_rate", "fmt_seconds"]


def fmt_figure(v: float) -> str:
    """Any figure a person reads, in plain notation: a count exactly, with separators
    (``2,000``, never ``2e+03``); a fraction to at most three significant digits
    (``0.25``, ``12.5``); 100 and above to a whole number; below 0.001, ``<0.001``."""
    if isinstance(v, int):
        return f"{v:,}"
    if v == int(v) or abs(v) >= 100:
        return f"{v:,.0f}"
    if abs(v) >= 10:
        return f"{v:,.1f}"
    if abs(v) >= 0.001:
        return f"{v:.3f}".rstrip("0").rstrip(".") if abs(v) < 1 else f"{v:.2f}"
    return "<0.001" if v > 0 else ">-0.001"


def fmt_count(n: int | float) -> str:
    """``1234567`` -> ``1,234,567`` (rounded to a whole number)."""
    return f"{round(n):,}"


def fmt_rate(n: float, unit: str = "events") -> str:
    """A throughput to three significant figures with separators: ``312,000 events/s``."""
    if n >= 1000:
        digits = len(str(int(n))) - 3
        n = round(n, -digits)
    return f"{n:,.0f} {unit}/s" if n >= 10 else f"{n:,.1f} {unit}/s"


def fmt_bytes(n: int | float) -> str:
    """``1536`` -> ``1.5 KiB``; bytes below 1 KiB as they are."""
    if abs(n) < 1024:
        return f"{n:,.0f} B"
    units = ["KiB", "MiB", "GiB"]
    n /= 1024
    while abs(n) >= 1024 and len(units) > 1:
        n /= 1024
        units.pop(0)
    return f"{n:,.1f} {units[0]}"


def fmt_seconds(s: float) -> str:
    """``0.42`` -> ``0.42 s``, ``12.3`` -> ``12.3 s``, ``125`` -> ``2 min 5 s``, ``7300`` -> ``2 h 1 min``."""
    if s < 1:
        return f"{s:.2f} s"
    if s < 60:
        return f"{s:.1f} s"
    if s < 3600:
        return f"{int(s // 60)} min {int(s % 60)} s"
    return f"{int(s // 3600):,} h {int(s % 3600 // 60)} min"
