"""``python -m bench.stall``: a store that stops committing, under open-loop load.

A real ``tidings serve`` takes publishes at a steady rate (open loop: each request is sent
at its time whatever became of the earlier ones, as real traffic arrives) while its store
stops committing for a while, then comes back:

- ``sqlite``: every ``fsync``/``fdatasync`` of the server's processes waits while a control
  file exists (``tests/fixtures/fsync_stall.c``, built here with ``cc`` and loaded with
  ``LD_PRELOAD``);
- ``postgresql``: a throwaway PostgreSQL cluster of its own (``initdb``/``pg_ctl`` on a free
  port, as the ``postgres`` user) whose processes are all paused with SIGSTOP.

It records the server's RSS (broker and fronts) idle and during the stall, every answer
(status, code, ``Retry-After``, time), the ``/readyz`` timeline and the overload gauges of
``/metrics`` (docs/operations.md, "Overload and a stalling store"). Loopback only; bounded
in requests and in time. Figures are printed and written as JSON, never asserted.

    .venv/bin/python -m bench.stall                                  # both stores, 250/s, 20 s stall
    .venv/bin/python -m bench.stall --store sqlite --stall 5 --rate 100 --json stall.json
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp

SHIM_SOURCE = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "fsync_stall.c"
STALL_FILE_ENV = "TIDINGS_TEST_STALL_FILE"
FAIL_FILE_ENV = "TIDINGS_TEST_FAIL_FILE"
"""While the file it names exists, the shim's fsync fails with the error number in it."""
_LOOPBACK = ("127.0.0.1", "::1", "localhost")


def build_shim(folder: Path) -> Path:
    """``fsync_stall.so`` built from ``SHIM_SOURCE`` in ``folder`` (needs ``cc``)."""
    out = folder / "fsync_stall.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-O2", "-o", str(out), str(SHIM_SOURCE), "-ldl"], check=True,
                   capture_output=True, timeout=120)
    return out


@dataclass
class Answer:
    sent_s: float
    """When it was sent, from the run's start."""
    seconds: float
    status: int
    """0: no answer (the connection failed, or the client's own timeout)."""
    code: str = ""
    retry_after: str | None = None


async def open_loop(
    url: str, body: bytes, headers: dict[str, str], *, rate: float, seconds: float, t0: float,
    max_requests: int = 100_000, timeout_s: float = 60.0,
) -> list[Answer]:
    """POST ``body`` to ``url`` ``rate`` times a second for ``seconds`` (at most
    ``max_requests``), each at its time whether or not the earlier ones were answered."""
    if urlsplit(url).hostname not in _LOOPBACK:
        raise ValueError("the load generator sends to loopback only")
    n = min(max_requests, int(rate * seconds))
    answers: list[Answer] = []
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    # Idle connections are let go before the server's keep-alive (5 s) would close them: a
    # client that keeps them longer races the server's close (REFERENCE.md §16).
    connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=3.0)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as http:

        async def one(at: float) -> None:
            start = time.monotonic()
            try:
                async with http.post(url, data=body, headers=headers) as r:
                    raw = await r.read()
                    code = ""
                    with contextlib.suppress(ValueError, KeyError, TypeError, AttributeError, IndexError):
                        if r.status != 200:
                            code = json.loads(raw)["error"]["code"]
                        elif b'"Err"' in raw:  # 200 with an item not stored: its kind
                            code = "Err " + next(iter(json.loads(raw)[0]["Err"]))
                    answers.append(Answer(at - t0, time.monotonic() - start, r.status, code,
                                          r.headers.get("Retry-After")))
            except (aiohttp.ClientError, TimeoutError) as e:
                answers.append(Answer(at - t0, time.monotonic() - start, 0, type(e).__name__))

        tasks = []
        begin = time.monotonic()
        for i in range(n):
            at = begin + i / rate
            delay = at - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(one(at)))
        await asyncio.gather(*tasks)
    return answers


def gauges(text: str) -> dict[str, float]:
    """The unlabelled samples and the refusal counters (the broker's and its fronts') of a
    ``/metrics`` page."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("#") or " " not in line:
            continue
        name, _, value = line.rpartition(" ")
        if "{" in name and not name.startswith(("tidings_publish_refused_total", "tidings_front_refused_total")):
            continue
        with contextlib.suppress(ValueError):
            out[name] = float(value)
    return out


@dataclass
class Timeline:
    """What the watcher saw, every ``every_s``."""

    ready: list[tuple[float, int]] = field(default_factory=list)
    """(time the probe was sent, /readyz status) at each change."""
    waiting_max: float = 0.0
    waiting_bytes_max: float = 0.0
    cap_reached_s: float | None = None
    rss: list[tuple[float, int]] = field(default_factory=list)
    metrics: dict[str, float] = field(default_factory=dict)


async def watch(url: str, pid: int, t0: float, cap: int, stop: asyncio.Event, every_s: float = 0.1) -> Timeline:
    """Three loops, so that a slow ``/metrics`` (its stored gauges wait for the store)
    never delays the readiness probes."""
    from bench._harness import rss_bytes

    tl = Timeline()
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as http:

        async def readiness() -> None:
            while not stop.is_set():
                status = 0
                now = time.monotonic() - t0  # when the probe was sent: the state it asked about
                with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                    async with http.get(f"{url}/readyz") as r:
                        status = r.status
                if not tl.ready or tl.ready[-1][1] != status:
                    tl.ready.append((round(now, 2), status))
                await asyncio.sleep(every_s)

        async def metrics() -> None:
            while not stop.is_set():
                with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                    async with http.get(f"{url}/metrics") as r:
                        if r.status == 200:
                            g = gauges(await r.text())
                            tl.metrics = g
                            w = g.get("tidings_publish_waiting_requests", 0.0)
                            tl.waiting_max = max(tl.waiting_max, w)
                            tl.waiting_bytes_max = max(tl.waiting_bytes_max,
                                                       g.get("tidings_publish_waiting_bytes", 0.0))
                            if w >= cap and tl.cap_reached_s is None:
                                tl.cap_reached_s = round(time.monotonic() - t0, 2)
                await asyncio.sleep(every_s)

        async def memory() -> None:
            while not stop.is_set():
                with contextlib.suppress(Exception):
                    tl.rss.append((round(time.monotonic() - t0, 2), rss_bytes(pid)))
                await asyncio.sleep(every_s)

        await asyncio.gather(readiness(), metrics(), memory())
    return tl


def _pct(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    s = sorted(values)
    return round(s[min(len(s) - 1, int(q * len(s)))], 3)


def _per_second(answers: list[Answer]) -> list[str]:
    """Each second of sending: how many got each answer, and the longest answer time."""
    rows: dict[int, list[Answer]] = {}
    for a in answers:
        rows.setdefault(int(a.sent_s), []).append(a)
    out = []
    for sec in sorted(rows):
        c = Counter(f"{a.status}{' ' + a.code if a.code else ''}" for a in rows[sec])
        longest = max(a.seconds for a in rows[sec])
        out.append(f"{sec:3d} s: " + ", ".join(f"{k} x{v}" for k, v in sorted(c.items())) + f"; max {longest:.2f} s")
    return out


def summary(answers: list[Answer], tl: Timeline, stall_at: float, stall_end: float) -> dict[str, Any]:
    """The figures BENCHMARKS.md records."""
    idle = [b for t, b in tl.rss if t < stall_at]
    during = [b for t, b in tl.rss if stall_at <= t <= stall_end + 1]
    idle_rss = max(idle) if idle else 0
    by = Counter(f"{a.status} {a.code}".strip() for a in answers)
    refused = [a for a in answers if a.status in (429, 503)]
    first_refusal = min((a.sent_s + a.seconds for a in refused if a.sent_s >= stall_at), default=None)
    unready = next((t for t, s in tl.ready if t >= stall_at and s != 200), None)
    ready_again = next((t for t, s in tl.ready if t >= stall_end and s == 200), None)
    return {
        "requests": len(answers),
        "answers": dict(sorted(by.items())),
        "refused_without_retry_after": sum(1 for a in refused if not a.retry_after),
        "answer_seconds": {"p50": _pct([a.seconds for a in answers], 0.5),
                           "p99": _pct([a.seconds for a in answers], 0.99),
                           "max": round(max((a.seconds for a in answers), default=0.0), 3)},
        "ok_answer_seconds_max": round(max((a.seconds for a in answers if a.status == 200), default=0.0), 3),
        "rss_idle_mib": round(idle_rss / 2**20, 1),
        "rss_peak_mib": round(max(during, default=0) / 2**20, 1),
        "rss_growth_mib": round((max(during, default=0) - idle_rss) / 2**20, 1),
        "waiting_requests_max": tl.waiting_max,
        "waiting_bytes_max": tl.waiting_bytes_max,
        "cap_reached_after_s": None if tl.cap_reached_s is None else round(tl.cap_reached_s - stall_at, 2),
        "first_refusal_after_s": None if first_refusal is None else round(first_refusal - stall_at, 2),
        "unready_after_s": None if unready is None else round(unready - stall_at, 2),
        "ready_after_end_s": None if ready_again is None else round(ready_again - stall_end, 2),
        "readyz_timeline": tl.ready,
        "per_second": _per_second(answers),
        "refused_by_reason": {k.split('"')[1]: v for k, v in tl.metrics.items() if "reason=" in k},
    }


async def run(
    url: str, token: str, pid: int, *, rate: float, before_s: float, stall_s: float, after_s: float, cap: int,
    stall: Callable[[], None], resume: Callable[[], None], events: int = 1,
) -> dict[str, Any]:
    """Load ``url`` for ``before_s + stall_s + after_s`` with ``stall()`` called after
    ``before_s`` and ``resume()`` after the stall; the summary."""
    headers = {"authorization": f"Bearer {token}", "content-type": "application/json"}
    async with aiohttp.ClientSession(headers=headers) as http:
        async with http.post(f"{url}/v1/icrc72_register_publication",
                             data=json.dumps([{"namespace": "bench.stall", "config": []}])) as r:
            await r.read()
    event = {"namespace": "bench.stall", "data": {"Map": [["n", {"Nat": 1}], ["text", {"Text": "x" * 80}]]}}
    body = json.dumps([event] * events).encode()
    t0 = time.monotonic()
    stop = asyncio.Event()
    watcher = asyncio.create_task(watch(url, pid, t0, cap, stop))
    loader = asyncio.create_task(open_loop(f"{url}/v1/icrc72_publish", body, headers, rate=rate,
                                           seconds=before_s + stall_s + after_s, t0=t0))
    await _at(t0 + before_s)
    stall()
    await _at(t0 + before_s + stall_s)
    resume()
    answers = await loader
    await asyncio.sleep(1.0)
    stop.set()
    tl = await watcher
    return summary(answers, tl, before_s, before_s + stall_s)


async def _at(when: float) -> None:
    await asyncio.sleep(max(0.0, when - time.monotonic()))


def _serve(data: Path, env: dict[str, str]) -> tuple[subprocess.Popen[bytes], str]:
    from bench._harness import free_port

    port = free_port()
    log = open(data / "server.log", "ab")
    proc = subprocess.Popen(
        [sys.executable, "-m", "tidings", "serve", "--port", str(port), "--data-dir", str(data)],
        stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **env},
    )
    deadline = time.monotonic() + 60
    while b"listening on" not in (data / "server.log").read_bytes() or not (data / "admin.token").exists():
        if time.monotonic() > deadline or proc.poll() is not None:
            proc.kill()
            raise RuntimeError(f"server did not start: {(data / 'server.log').read_text()[-2000:]}")
        time.sleep(0.05)
    return proc, f"http://127.0.0.1:{port}"


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


async def sqlite_stall(args: argparse.Namespace, env: dict[str, str]) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="tidings-stall-") as d:
        folder = Path(d)
        shim = build_shim(folder)
        control = folder / "stall"
        data = folder / "data"
        data.mkdir()
        proc, url = _serve(data, {**env, "LD_PRELOAD": str(shim), STALL_FILE_ENV: str(control)})
        try:
            out = await run(url, (data / "admin.token").read_text().strip(), proc.pid, rate=args.rate,
                            before_s=args.before, stall_s=args.stall, after_s=args.after, cap=args.cap,
                            stall=control.touch, resume=lambda: control.unlink(missing_ok=True))
        finally:
            control.unlink(missing_ok=True)
            _stop(proc)
            out_log = (data / "server.log").read_text(errors="replace")
        out["log"] = _told(out_log)
        out["server_log"] = _keep(out_log, "sqlite")
        return out


async def postgresql_pause(args: argparse.Namespace, env: dict[str, str]) -> dict[str, Any]:
    import psutil

    from bench.chaos._pg import PgNode, base_dir

    root = base_dir("tidings-stall-pg-")
    node = PgNode(root / "primary")
    node.init()
    node.start()
    try:
        pid = int((node.data / "postmaster.pid").read_text().split()[0])
        procs = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]

        def pause() -> None:
            for p in [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]:
                with contextlib.suppress(psutil.Error):
                    p.send_signal(signal.SIGSTOP)
                    procs.append(p)

        def go_on() -> None:
            for p in procs:
                with contextlib.suppress(psutil.Error):
                    p.send_signal(signal.SIGCONT)

        with tempfile.TemporaryDirectory(prefix="tidings-stall-") as d:
            data = Path(d)
            proc, url = _serve(data, {**env, "TIDINGS_STORE": node.dsn})
            try:
                out = await run(url, (data / "admin.token").read_text().strip(), proc.pid, rate=args.rate,
                                before_s=args.before, stall_s=args.stall, after_s=args.after, cap=args.cap,
                                stall=pause, resume=go_on)
            finally:
                go_on()
                _stop(proc)
                out_log = (data / "server.log").read_text(errors="replace")
            out["log"] = _told(out_log)
            out["server_log"] = _keep(out_log, "postgresql")
            return out
    finally:
        node.destroy()


def _keep(log: str, name: str) -> str:
    """The server's whole log, kept past the run's temporary folder; its path."""
    path = Path(tempfile.gettempdir()) / f"tidings-bench-stall-{name}.log"
    path.write_text(log)
    return str(path)


def _told(log: str) -> list[str]:
    """The server's lines about the stall and the fronts' retries."""
    keys = ("tidings.overload", "sent once more", "exited", "ERROR", "Traceback")
    return [line for line in log.splitlines() if any(k in line for k in keys)][:20]


SCENARIOS: dict[str, Callable[[argparse.Namespace, dict[str, str]], Awaitable[dict[str, Any]]]] = {
    "sqlite": sqlite_stall, "postgresql": postgresql_pause,
}


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.stall", description=__doc__.split("\n\n")[0])
    ap.add_argument("--store", choices=[*SCENARIOS, "both"], default="both")
    ap.add_argument("--rate", type=float, default=250.0, help="publishes a second (open loop)")
    ap.add_argument("--before", type=float, default=5.0, help="seconds of load before the stall")
    ap.add_argument("--stall", type=float, default=20.0, help="seconds the store does not commit")
    ap.add_argument("--after", type=float, default=5.0, help="seconds of load after it")
    ap.add_argument("--cap", type=int, default=1000, help="TIDINGS_MAX_WAITING_REQUESTS")
    ap.add_argument("--workers", type=int, default=2, help="TIDINGS_WORKERS (the broker and fronts)")
    ap.add_argument("--json", help="write the figures here")
    args = ap.parse_args()
    env = {"TIDINGS_MAX_WAITING_REQUESTS": str(args.cap), "TIDINGS_WORKERS": str(args.workers),
           "TIDINGS_LOG_LEVEL": "warning"}
    results: dict[str, Any] = {"settings": vars(args)}
    for name in SCENARIOS if args.store == "both" else [args.store]:
        results[name] = asyncio.run(SCENARIOS[name](args, env))
        print(f"== {name}")
        print(json.dumps(results[name], indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1, default=lambda o: asdict(o)))


if __name__ == "__main__":
    main()
