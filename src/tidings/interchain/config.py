"""The distributor's config file (TOML, or JSON by its ``.json`` suffix).

::

    host = "127.0.0.1"                    # listen address
    port = 8073                           # listen port
    public_url = "http://10.0.0.5:8073"   # how networks reach the push endpoints (default http://host:port)
    redis = "redis://127.0.0.1:6379/0"    # state in Redis; without it, in SQLite at `sqlite`
    redis_prefix = "tidings:ied:"
    sqlite = "var/interchain.db"          # relative paths are relative to the config file

    [[networks]]
    name = "hashnet"
    kind = "dlt"                          # dlt | tidings | jetstream | redis (adapters.KINDS)
    url = "http://127.0.0.1:8081"         # the rest are the adapter's parameters
"""

from __future__ import annotations

import json
import os
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core.addresses import DEFAULT_CONNECT_TIMEOUT_S, connect_timeout_s
from ..core.netpolicy import AddressPolicy
from ..errors import ConfigError
from .adapters import KINDS, Network, NetworkContext
from .state import RedisState, SQLiteState, State

__all__ = ["DistributorConfig", "NetworkConfig", "load"]

_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


@dataclass(frozen=True, kw_only=True)
class NetworkConfig:
    name: str
    """Unique; it is the value of the ``network`` parameter and part of set and key names."""
    kind: str
    """Which adapter: a key of :data:`tidings.interchain.adapters.KINDS`."""
    params: dict[str, Any] = field(default_factory=dict)
    """The adapter's own parameters (see each adapter's module)."""


@dataclass(frozen=True, kw_only=True)
class DistributorConfig:
    host: str = "127.0.0.1"
    """Listen address of the DLT Adapter API and the push endpoints."""
    port: int = 8073
    """Listen port."""
    public_url: str | None = None
    """The distributor's URL as the networks reach it; default ``http://host:port``."""
    redis: str | None = None
    """Redis URL for the state (sets, outboxes, subscriptions); None: SQLite."""
    redis_prefix: str = "tidings:ied:"
    """Prefix of every Redis key the state uses."""
    sqlite: Path = Path("var/interchain.db")
    """SQLite file of the embedded state, when ``redis`` is not set."""
    networks: tuple[NetworkConfig, ...] = ()
    """The networks, in the order their events are listed."""
    connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S
    """How long a connection to Redis, NATS or a network's service may take
    (``TIDINGS_CONNECT_TIMEOUT_S``; not a config key: one setting for every command)."""
    outbound_allow: str = ""
    """Ranges and hosts consumers' notification endpoints may use despite the outbound
    policy (docs/security.md): comma-separated CIDRs and host names."""

    def address_policy(self) -> AddressPolicy:
        """The outbound policy for consumers' endpoints: restricted when listening on a
        non-loopback address, as for the broker."""
        try:
            return AddressPolicy.for_server(self.host, self.port, self.outbound_allow)
        except ValueError as e:
            raise ConfigError(f"outbound_allow: {e}") from None

    @property
    def url(self) -> str:
        return (self.public_url or f"http://{self.host}:{self.port}").rstrip("/")

    def make_state(self) -> State:
        if self.redis:
            return RedisState(self.redis, self.redis_prefix, connect_timeout_s=self.connect_timeout_s)
        return SQLiteState(self.sqlite)

    def make_networks(self, state: State) -> list[Network]:
        ctx = NetworkContext(public_url=self.url, state=state, connect_timeout_s=self.connect_timeout_s)
        return [KINDS[n.kind](n.name, n.params, ctx) for n in self.networks]


def _parse(raw: dict[str, Any], base: Path) -> DistributorConfig:
    nets: list[NetworkConfig] = []
    seen: set[str] = set()
    entries = raw.pop("networks", [])
    if not isinstance(entries, list) or not entries:
        raise ConfigError("the config lists no [[networks]]")
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise ConfigError(f"networks[{i}] is not a table")
        params = dict(entry)
        name, kind = params.pop("name", None), params.pop("kind", None)
        if not isinstance(name, str) or not _NAME.match(name):
            raise ConfigError(f"networks[{i}]: name must be 1-64 of A-Z a-z 0-9 _ . -, got {name!r}")
        if name in seen:
            raise ConfigError(f"networks[{i}]: duplicate name {name!r}")
        if kind not in KINDS:
            raise ConfigError(f"network {name!r}: kind must be one of {sorted(KINDS)}, got {kind!r}")
        seen.add(name)
        nets.append(NetworkConfig(name=name, kind=kind, params=params))
    known = {"host", "port", "public_url", "redis", "redis_prefix", "sqlite", "outbound_allow"}
    unknown = set(raw) - known
    if unknown:
        raise ConfigError(f"unknown config keys: {sorted(unknown)}")
    sqlite = Path(raw.pop("sqlite", "var/interchain.db"))
    try:
        return DistributorConfig(
            host=str(raw.get("host", "127.0.0.1")), port=int(raw.get("port", 8073)),
            public_url=raw.get("public_url"), redis=raw.get("redis"),
            redis_prefix=str(raw.get("redis_prefix", "tidings:ied:")),
            sqlite=sqlite if sqlite.is_absolute() else base / sqlite, networks=tuple(nets),
            outbound_allow=str(raw.get("outbound_allow", "")),
            connect_timeout_s=connect_timeout_s(os.environ),
        )
    except (TypeError, ValueError) as e:
        raise ConfigError(f"invalid config: {e}") from e


def load(path: str | Path, *, port: int | None = None, redis: str | None = None) -> DistributorConfig:
    """Read and check a config file; ``port`` and ``redis`` override the file's."""
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as e:
        raise ConfigError(f"cannot read the config {p}: {e}") from e
    try:
        raw = json.loads(text) if p.suffix == ".json" else tomllib.loads(text)
    except (ValueError, tomllib.TOMLDecodeError) as e:
        raise ConfigError(f"{p}: {e}") from e
    if not isinstance(raw, dict):
        raise ConfigError(f"{p}: not a table of settings")
    if port is not None:
        raw["port"] = port
    if redis is not None:
        raw["redis"] = redis
    return _parse(raw, p.parent)
