"""The Grafana dashboard in docs/grafana/tidings.json queries only what ``/metrics`` serves."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tidings.broker.metrics import ClusterView, Metrics

from .conftest import ServerProcess, admin_api, eventually
from .pg_support import schema_address

DASHBOARD = Path(__file__).parent.parent / "docs" / "grafana" / "tidings.json"

_GROUPING = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "offset", "and", "or", "unless",
             "inf", "nan"}


def _panels(panels: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for p in panels:
        out.append(p)
        out.extend(_panels(p.get("panels", [])))
    return out


def queries(dashboard: dict[str, Any]) -> list[str]:
    """Every PromQL expression of the dashboard: its panels' targets and its variables."""
    found = [t["expr"] for p in _panels(dashboard["panels"]) for t in p.get("targets", [])]
    for var in dashboard["templating"]["list"]:
        q = var.get("query")
        if isinstance(q, dict):
            q = q.get("query")
        if var["type"] == "query" and q:
            found.append(re.sub(r"^label_values\((.*),\s*\w+\)$", r"\1", q))
    return found


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression reads (label matchers, ranges, strings,
    grouping clauses, functions and keywords taken out)."""
    expr = re.sub(r'"(?:[^"\\]|\\.)*"', "", expr)
    expr = re.sub(r"\{[^}]*\}|\[[^\]]*\]", " ", expr)
    expr = _GROUPING.sub(" ", expr)
    names = set()
    for m in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", expr):
        rest = expr[m.end():].lstrip()
        if rest.startswith("(") or m.group() in _KEYWORDS or expr[m.start() - 1 : m.start()] == "$":
            continue
        names.add(m.group())
    return names


def served(text: str) -> dict[str, set[str]]:
    """Each sample name in a /metrics text, with the label names its samples carry."""
    out: dict[str, set[str]] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, labels = line.split(" ")[0].partition("{")
            out.setdefault(name, set()).update(re.findall(r'(\w+)="', labels))
    return out


def test_the_dashboard_covers_what_operators_watch() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["uid"] and dashboard["title"]
    names = set().union(*map(metric_names, queries(dashboard)))
    for watched in ("tidings_events_published_total", "tidings_delivery_latency_seconds_bucket",
                    "tidings_notifications_pending", "tidings_notifications_retried_total",
                    "tidings_notifications_dead_lettered_total", "tidings_leases_held"):
        assert watched in names
    for p in _panels(dashboard["panels"]):
        for t in p.get("targets", []):
            assert t["datasource"]["uid"] == "${datasource}"  # works with any Prometheus data source


@pytest.mark.e2e
async def test_every_metric_the_dashboard_queries_is_served(server: ServerProcess, http: aiohttp.ClientSession) -> None:
    # A subscription with a notification pending, so that the per-subscription gauge has a sample.
    await admin_api(http, server, "icrc72_register_publication", [{"namespace": "com.example.dash"}])
    await admin_api(http, server, "icrc72_register_subscription",
                    [{"namespace": "com.example.dash", "endpoint": "http://127.0.0.1:9/"}])
    await admin_api(http, server, "icrc72_publish", [{"namespace": "com.example.dash", "data": {"Nat": 1}}])
    samples: dict[str, set[str]] = {}

    async def scraped() -> bool:
        async with http.get(f"{server.url}/metrics") as resp:
            assert resp.status == 200
            samples.update(served(await resp.text()))
        return "tidings_notifications_pending" in samples

    await eventually(scraped)
    dashboard = json.loads(DASHBOARD.read_text())
    for expr in queries(dashboard):
        names = metric_names(expr)
        assert names, expr
        missing = names - set(samples)
        assert not missing, f"{expr!r} queries {sorted(missing)}, which /metrics does not serve"
        # The labels it groups or filters by (but Prometheus's own ``instance``) are there too.
        for label in set(re.findall(r"\b(?:by|without)\s*\(([^)]*)\)", expr)) | set(
            re.findall(r"\{\{(\w+)\}\}", json.dumps(dashboard))
        ):
            for lab in (x.strip() for x in label.split(",")):
                if lab and lab != "instance":
                    assert any(lab in samples[n] for n in samples if n.startswith("tidings_")), lab


def test_a_broadcaster_id_is_escaped_in_its_label() -> None:
    text = Metrics().render({}, 0, ClusterView('b"1\\\n', 3, 2))
    assert 'tidings_leases_held{broadcaster="b\\"1\\\\\\n"} 3' in text
    assert 'tidings_broadcasters_alive{broadcaster="b\\"1\\\\\\n"} 2' in text


@pytest.mark.e2e
async def test_leases_per_broadcaster_add_up_to_the_subscriptions(
    server_factory: Any, pg_database: str, http: aiohttp.ClientSession, tmp_path: Path
) -> None:
    """Two broadcasters on PostgreSQL: each serves its own lease count, and they add up."""
    store = schema_address(pg_database)
    a = server_factory(store=store, broadcaster_id="dash-a")
    (tmp_path / "b").mkdir()
    shutil.copy(a.data_dir / "admin.token", tmp_path / "b" / "admin.token")
    b = ServerProcess(tmp_path / "b", env={**a.env, "TIDINGS_BROADCASTER_ID": "dash-b"})
    b.start(new_port_if_taken=True)
    try:
        await admin_api(http, a, "icrc72_register_publication", [{"namespace": "com.example.leases"}])
        await admin_api(http, a, "icrc72_register_subscription",
                        [{"namespace": "com.example.leases", "endpoint": "http://127.0.0.1:9/"}] * 8)
        held: dict[str, int] = {}

        async def settled() -> bool:
            for s, me in ((a, "dash-a"), (b, "dash-b")):
                async with http.get(f"{s.url}/metrics") as resp:
                    text = await resp.text()
                held[me] = int(re.search(rf'^tidings_leases_held{{broadcaster="{me}"}} (\d+)$', text, re.M)[1])
                assert f'tidings_broadcasters_alive{{broadcaster="{me}"}}' in text
            return sum(held.values()) == 8 and all(held.values())

        await eventually(settled, timeout=20, interval=0.2)
    finally:
        b.stop()
