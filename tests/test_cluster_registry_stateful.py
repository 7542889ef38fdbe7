"""Random registry operations, each through a random one of three broadcasters on one
PostgreSQL database (hypothesis's stateful testing): after the bound on stale state
(docs/scaling.md, "Shared state") every member answers every read the same, as one
server would, and a publish through any member obeys the latest schema and config."""

from __future__ import annotations

import itertools
import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule, run_state_machine_as_test

from .conftest import ServerProcess
from .test_cluster import nodes

pytestmark = pytest.mark.e2e

SCHEMA = "tidings:publication:schema"
MEMBERS = st.integers(0, 2)
_BOUND_S = 10.0
"""How long the checks wait for the members to agree: well above the documented bound
(two heartbeats, 0.5 s here), for a loaded machine; the usual case agrees at once."""


def _post(server: ServerProcess, method: str, arg: Any, token: str | None = None) -> tuple[int, Any]:
    req = urllib.request.Request(
        f"{server.url}/v1/{method}", data=json.dumps(arg).encode(), method="POST",
        headers={"authorization": f"Bearer {token or server.admin_token}", "content-type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


def _call(server: ServerProcess, method: str, arg: Any) -> Any:
    status, body = _post(server, method, arg)
    assert status == 200, (server.url, method, arg, status, body)
    return body


def _until(check: Callable[[], Any]) -> None:
    """``check`` (which asserts) passes within the bound; the last failure if it never does."""
    deadline = time.monotonic() + _BOUND_S
    while True:
        try:
            check()
            return
        except AssertionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def _model(prefix: str, variant: int, k: int) -> str:
    """Variant 0 takes ``{amount}``; variant 1 also requires ``currency``. ``k`` makes
    distinct models of one variant (and the same ``k`` a duplicate)."""
    return json.dumps({
        "$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object", "description": f"{prefix}-{k}",
        "properties": {"amount": {"type": "integer"}, "currency": {"type": "string"}},
        "required": ["amount", "currency"] if variant else ["amount"],
    })


def test_every_member_answers_as_one_server(
    server_factory: Callable[..., ServerProcess], pg_database: str,
) -> None:
    with nodes(server_factory, pg_database, n=3) as servers:
        examples = itertools.count()

        class Registry(RuleBasedStateMachine):
            def __init__(self) -> None:
                super().__init__()
                self.prefix = f"ex{next(examples)}"
                self.name = f"{self.prefix}.order"
                self.by_model: dict[tuple[int, int], int] = {}  # live schemas: (variant, k) -> id
                self.variant: dict[int, int] = {}
                self.retracted: set[int] = set()
                self.deleted: set[int] = set()
                self.versions: dict[int, int] = {}  # version of self.name -> schema id
                self.retention: dict[int, int | None] = {}
                self.compat = "BACKWARD"
                self.pubs: dict[str, dict[str, Any]] = {}  # namespace -> config key -> value
                self.tokens: dict[str, bool] = {}  # token -> revoked

            def live(self) -> list[int]:
                return sorted(set(self.variant) - self.deleted)

            def bound(self) -> set[int]:
                return {c[SCHEMA]["Nat"] for c in self.pubs.values() if SCHEMA in c}

            # -- schemas ----------------------------------------------------------------

            @rule(m=MEMBERS, variant=st.integers(0, 1), k=st.integers(0, 2), named=st.booleans())
            def register(self, m: int, variant: int, k: int, named: bool) -> None:
                item: dict[str, Any] = {"model": _model(self.prefix, variant, k)}
                if named:
                    item["name"] = self.name
                (r,) = _call(servers[m], "register_schema", [item])
                if "Err" in r:
                    assert list(r["Err"]) == ["IncompatibleSchema"], r
                    assert named and self.compat != "NONE"
                    return
                got = r["Ok"]
                known = self.by_model.get((variant, k))
                if known is not None:  # a duplicate is known through any member, by the same id
                    assert got["id"] == known, (got, known)
                else:
                    assert got["id"] not in self.variant, (got, "an id given twice")
                    self.by_model[(variant, k)] = got["id"]
                    self.variant[got["id"]] = variant
                if named and got["version"] is not None and got["version"] not in self.versions:
                    # A version number is given once, above every one given before.
                    assert got["version"] > max(self.versions, default=0), (got, self.versions)
                    self.versions[got["version"]] = got["id"]
                elif named:
                    assert self.versions.get(got["version"]) == got["id"], (got, self.versions)

            @rule(m=MEMBERS, mode=st.sampled_from(["NONE", "BACKWARD"]))
            def set_compatibility(self, m: int, mode: str) -> None:
                (r,) = _call(servers[m], "tidings_set_schema_compatibility", [
                    {"name": self.name, "compatibility": mode}])
                assert "Ok" in r, r
                self.compat = mode

            @precondition(lambda self: bool(self.live()))
            @rule(m=MEMBERS, pick=st.integers(0, 99))
            def retract(self, m: int, pick: int) -> None:
                sid = self.live()[pick % len(self.live())]
                (r,) = _call(servers[m], "update_schema_state", [{"id": sid, "state": "Retracted"}])
                if sid in self.retracted:
                    assert "Err" in r, r
                else:
                    assert "Ok" in r, r
                    self.retracted.add(sid)

            @precondition(lambda self: bool(self.live()))
            @rule(m=MEMBERS, pick=st.integers(0, 99), seconds=st.sampled_from([None, 60, 3600]))
            def set_retention(self, m: int, pick: int, seconds: int | None) -> None:
                sid = self.live()[pick % len(self.live())]
                (r,) = _call(servers[m], "update_schema_retention", [{"id": sid, "retention_s": seconds}])
                assert "Ok" in r, r
                self.retention[sid] = seconds

            @precondition(lambda self: bool(self.live()))
            @rule(m=MEMBERS, pick=st.integers(0, 99))
            def delete_schema(self, m: int, pick: int) -> None:
                sid = self.live()[pick % len(self.live())]
                (r,) = _call(servers[m], "delete_schema", [sid])
                if sid in self.bound():  # bound through any member: refused
                    assert list(r.get("Err", {})) == ["InvalidState"], r
                    return
                assert "Ok" in r, r
                self.deleted.add(sid)
                self.by_model = {key: i for key, i in self.by_model.items() if i != sid}
                self.versions = {v: i for v, i in self.versions.items() if i != sid}

            # -- publications -----------------------------------------------------------

            def _binding(self, pick: int | None) -> tuple[list[Any], bool]:
                """A config binding one of the schemas (or none), and whether binding it is taken."""
                ids = sorted(self.variant)
                if pick is None or not ids:
                    return [], True
                sid = ids[pick % len(ids)]
                return [[SCHEMA, {"Nat": sid}]], sid not in self.deleted and sid not in self.retracted

            @rule(m=MEMBERS, n=st.integers(0, 2), pick=st.none() | st.integers(0, 99))
            def register_publication(self, m: int, n: int, pick: int | None) -> None:
                ns = f"{self.prefix}.p{n}"
                if ns in self.pubs:
                    return
                config, takes = self._binding(pick)
                (r,) = _call(servers[m], "icrc72_register_publication", [{"namespace": ns, "config": config}])
                assert ("Ok" in r) == takes, (r, config)
                if takes:
                    self.pubs[ns] = {k: v for k, v in config}

            @precondition(lambda self: bool(self.pubs))
            @rule(m=MEMBERS, pick=st.integers(0, 99), schema=st.integers(0, 99))
            def rebind(self, m: int, pick: int, schema: int) -> None:
                ns = sorted(self.pubs)[pick % len(self.pubs)]
                config, takes = self._binding(schema)
                if not config:
                    return
                (r,) = _call(servers[m], "icrc72_update_publication", [{"namespace": ns, "config": config}])
                assert ("Ok" in r) == takes, (r, config)
                if takes:
                    self.pubs[ns][SCHEMA] = config[0][1]

            @precondition(lambda self: bool(self.pubs))
            @rule(ms=st.tuples(MEMBERS, MEMBERS), pick=st.integers(0, 99),
                  keys=st.tuples(st.integers(0, 3), st.integers(0, 3)), value=st.integers(0, 9))
            def update_at_once(self, ms: tuple[int, int], pick: int, keys: tuple[int, int], value: int) -> None:
                """Two updates of one publication, setting different keys, through two members at once."""
                ns = sorted(self.pubs)[pick % len(self.pubs)]
                names = [f"com.example:k{keys[0]}", f"com.example:k{(keys[1] if keys[1] != keys[0] else keys[0] + 1)}"]
                with ThreadPoolExecutor(2) as pool:
                    answers = list(pool.map(
                        lambda i: _call(servers[ms[i]], "icrc72_update_publication", [
                            {"namespace": ns, "config": [[names[i], {"Nat": value}]]}]),
                        range(2),
                    ))
                assert all("Ok" in r for (r,) in answers), answers
                for key in names:
                    self.pubs[ns][key] = {"Nat": value}

            @precondition(lambda self: bool(self.pubs))
            @rule(m=MEMBERS, pick=st.integers(0, 99))
            def delete_publication(self, m: int, pick: int) -> None:
                ns = sorted(self.pubs)[pick % len(self.pubs)]
                (r,) = _call(servers[m], "icrc72_delete_publication", [ns])
                assert "Ok" in r, r
                del self.pubs[ns]

            @precondition(lambda self: bool(self.pubs))
            @rule(m=MEMBERS, pick=st.integers(0, 99), currency=st.booleans())
            def publish(self, m: int, pick: int, currency: bool) -> None:
                """A publish through any member obeys the latest schema bound (within the bound)."""
                ns = sorted(self.pubs)[pick % len(self.pubs)]
                data = {"Map": [["amount", {"Nat": 5}], *([["currency", {"Text": "EUR"}]] if currency else [])]}
                sid = self.pubs[ns].get(SCHEMA, {}).get("Nat")
                takes = sid is None or (sid not in self.retracted and (currency or self.variant[sid] == 0))

                def check() -> None:
                    (r,) = _call(servers[m], "icrc72_publish", [{"namespace": ns, "data": data}])
                    assert ("Ok" in r) == takes, (r, ns, sid, currency)

                _until(check)

            # -- principals -------------------------------------------------------------

            @rule(made=MEMBERS, revoked=st.none() | MEMBERS)
            def principal(self, made: int, revoked: int | None) -> None:
                name = f"{self.prefix}-p{len(self.tokens)}"
                token = _call(servers[made], "tidings_create_principal", {"name": name})["token"]
                self.tokens[token] = False
                if revoked is not None:
                    _call(servers[revoked], "tidings_revoke_tokens", {"principal": name})
                    self.tokens[token] = True

            # -- what every member answers ----------------------------------------------

            def reads(self, s: ServerProcess) -> Any:
                ids = sorted(self.variant)
                schemas = [
                    None if i is None else (i["id"], i["validity"]["state"], i["policy"]["retention_s"],
                                            sorted((v["name"], v["version"]) for v in i["versions"]))
                    for i in _call(s, "get_schema", ids)
                ]
                pubs = {
                    p["namespace"]: sorted(map(json.dumps, p["config"]))
                    for p in _call(s, "icrc72_get_publications", {}) if p["namespace"].startswith(self.prefix + ".")
                }
                return (schemas, pubs, _call(s, "tidings_get_schema_versions", [self.name]),
                        _call(s, "tidings_get_schema_compatibility", [self.name]))

            @invariant()
            def members_agree(self) -> None:
                def check() -> None:
                    first = self.reads(servers[0])
                    for s in servers[1:]:
                        assert self.reads(s) == first, "members disagree"
                    schemas, pubs, _, compat = first
                    # ... and agree with one server's answers.
                    assert compat == [self.compat]
                    for sid, got in zip(sorted(self.variant), schemas, strict=True):
                        if sid in self.deleted:
                            assert got is None, (sid, got)
                        else:
                            assert got is not None and got[1] == ("Retracted" if sid in self.retracted else "Active")
                            assert got[2] == self.retention.get(sid), (sid, got)
                    assert set(pubs) == set(self.pubs)
                    for ns, config in self.pubs.items():
                        assert set(map(json.dumps, ([k, v] for k, v in config.items()))) <= set(pubs[ns]), ns
                    for token, revoked in self.tokens.items():
                        for s in servers:
                            status, _ = _post(s, "tidings_whoami", None, token)
                            assert status == (401 if revoked else 200), (s.url, status, revoked)

                _until(check)

        run_state_machine_as_test(Registry, settings=settings(
            max_examples=6, stateful_step_count=14, deadline=None,
            suppress_health_check=list(HealthCheck),
        ))
