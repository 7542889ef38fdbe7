"""Service settings: one typed dataclass, read from a TOML file and ``TIDINGS_*`` environment variables.

Every field can be set as ``TIDINGS_<FIELD NAME IN CAPITALS>``, or as ``<field name> = value``
in the file given to ``--config``; the environment overrides the file and the CLI's flags
override both (``Settings.load``, which also says where each value came from).
docs/operations.md lists them with their defaults.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from .errors import ConfigError
from .settings_file import read_config

__all__ = ["Settings"]


@dataclass(frozen=True, kw_only=True, slots=True)
class Settings:
    host: str = "127.0.0.1"
    """Address the HTTP API listens on."""

    port: int = 8072
    """Port the HTTP API listens on."""

    data_dir: Path = Path("var")
    """Folder of the embedded store (``tidings.db``) and the first admin token."""

    workers: int = 0
    """Processes serving the API: the broker and ``workers - 1`` front processes that parse,
    check and stamp requests for it (docs/scaling.md). 0: one per core; 1: the broker alone."""

    store: str = dataclasses.field(default="", repr=False)
    """Where the store lives: empty for the embedded SQLite file under ``data_dir``, or a
    PostgreSQL address (``postgresql://user:password@host:port/database``; never printed,
    it may hold a password). Needs ``pip install 'tidings[postgresql]'``."""

    broadcaster_id: str = "tidings-broadcaster-1"
    """This broadcaster's principal, the ``source`` of notifications it sends. Several
    broadcasters sharing a PostgreSQL store need distinct ids: left at this default there,
    it becomes ``<host name>:<port>`` (docs/scaling.md)."""

    advertise_url: str = ""
    """The URL other broadcasters and the SDK reach this one at, shown by
    ``icrc72_get_broadcasters``; empty: ``http://<host>:<port>``."""

    lease_s: float = 5.0
    """Several broadcasters: how long a broadcaster holds a subscription's delivery without
    renewing it; one that dies loses its subscriptions to the others after this long."""

    heartbeat_s: float = 1.0
    """Several broadcasters: how often each records itself alive and renews its leases."""

    max_clock_offset_s: float = 0.5
    """How far this process's wall clock may be from the cluster's clock (the database's
    with several broadcasters; alone, the wall clock at start carried on by the monotonic
    clock) before it is reported: one log line naming both clocks, the metric
    ``tidings_clock_offset_seconds`` and, with several broadcasters, ``/readyz``. Nothing
    is stamped or compared by the wall clock, so an offset beyond it misdates nothing.
    500 ms is CockroachDB's ``--max-offset``: NTP keeps hosts within a few milliseconds,
    so more than this is a clock that is wrong, not one that drifts (docs/operations.md,
    "Clocks")."""

    forward_timeout_s: float = 1.0
    """Several broadcasters: a broadcaster that receives events of a publication another
    owns forwards them there (``icrc72_publish_relay``) and waits this long for the owner's
    answer, then makes sure the owner will not store them and stores them itself (or
    answers with the ids the owner stored them under); 0 stores them where they arrive
    instead (docs/scaling.md)."""

    store_timeout_s: float = 10.0
    """Longest wait of a publish for its commit, on every store: past it the publish is
    answered 503 ``commit_timeout`` with ``Retry-After`` (the events may have been stored:
    retry with the same key). PostgreSQL store: also the longest wait to connect, to get
    a pooled connection, and for one statement's answer, and the server's
    ``lock_timeout`` (docs/operations.md, "PostgreSQL: timeouts")."""

    store_stall_s: float = 1.0
    """Commits are stalled once the oldest in progress has waited this long: ``/readyz``
    answers 503 until one succeeds, and the stall is logged when it starts and ends
    (docs/operations.md, "Overload and a stalling store")."""

    max_waiting_bytes: int = 32 * 1024 * 1024
    """Bytes of publish bodies read (or arriving) and not yet answered by the store, in
    the broker and in each front process, beyond which new publishes are refused at once
    with 503 ``overloaded`` and ``Retry-After`` (a stream publisher gets no new credit)."""

    max_waiting_requests: int = 1000
    """Publishes waiting for the store, in the broker and in each front process, beyond
    which new ones are refused as for ``max_waiting_bytes``."""

    max_body_bytes: int = 4 * 1024 * 1024
    """Largest request body accepted; larger ones get 413 ``payload_too_large``."""

    max_batch_items: int = 10_000
    """Most items in one batch call; more make every item ``GenericBatchError``."""

    max_pending_events: int = 200_000
    """Events accepted but not yet committed beyond which publishes answer ``Busy``."""

    delivery_batch_size: int = 100
    """Most notifications in one push."""

    delivery_linger_ms: float = 0.0
    """How long a push waits for more events to fill a batch (0: send what is there)."""

    commit_fsync: bool = True
    """A publish is answered once its commit is fsynced (SQLite ``synchronous=FULL``):
    an acknowledged event survives a power failure. false: once the commit is written
    to the operating system (``synchronous=NORMAL``): a process crash still loses
    nothing acknowledged, a power failure may take the last commits back (NATS
    JetStream's default durability). The embedded store only (docs/semantics.md)."""

    push_before_record: bool = True
    """A ``trusted`` subscription's live batches are pushed first and recorded once
    confirmed, without pending rows (docs/delivery.md); false records every batch as
    pending before its push."""

    drain_s: float = 10.0
    """On SIGTERM: how long pushes in flight, and the records of what they delivered, may
    take to finish before the process stops anyway (docs/operations.md, "Stopping and
    rolling restarts"). ``/readyz`` turns unready at once."""

    push_timeout_s: float = 10.0
    """Deadline for a subscriber endpoint to answer one push."""

    retry_initial_s: float = 0.5
    """First delay before a failed push is tried again; doubles up to ``retry_max_s``."""

    retry_max_s: float = 30.0
    """Longest delay between two tries of a failed push."""

    retry_after_max_s: float = 600.0
    """Longest wait a subscriber's ``Retry-After`` (on ``429``/``503``) may ask for; a
    longer one, or an HTTP date further ahead, waits this long."""

    ack_deadline_s: float = 30.0
    """In ``oneshot`` mode, how long a pushed notification may stay unconfirmed before it is sent again."""

    max_attempts: int = 20
    """Tries of a notification to a reliable subscription before it is dead-lettered."""

    max_age_s: float = 86_400.0
    """Age after which an unconfirmed notification is dead-lettered (counted from its first push)."""

    tail_capacity: int = 20_000
    """Recent events kept in memory so live delivery need not read the store. About 0.7 KB
    each for small events; a worker further behind reads the store (indexed) instead."""

    secret_overlap_s: int = 86_400
    """After ``tidings_rotate_subscription_secret``, how long the old secrets keep signing
    pushes (unless the call says otherwise)."""

    key_reclaim_interval_s: float = 30.0
    """How often publishers' idempotency keys past their publication's deduplication
    window are deleted, at most 10,000 per round and member (0: never; an expired key is
    ignored either way, this only gives its space back)."""

    retention_interval_s: float = 60.0
    """How often events past their schema's retention are trimmed from the log (0: never on
    a timer; ``tidings_apply_retention`` still does it on demand)."""

    archive_dir: str = ""
    """The Parquet archive (``tidings pipeline archive --archive-dir``) replays read through
    Spark for ids at or below its mark; empty: ``<data_dir>/archive`` if it has a manifest."""

    spark_master: str = ""
    """Where the replay's Spark session runs (empty: ``local[*]``, started on first use)."""

    replay_max_range: int = 1_000_000
    """Most events one replay request may span; more answer ``RangeTooLarge``."""

    replay_max_per_principal: int = 4
    """Most pending or running replays of one requester (beyond: GenericError 7701)."""

    replay_max_concurrent: int = 8
    """Most pending or running replays in all (beyond: GenericError 7702)."""

    replay_read_size: int = 5_000
    """Events a replay reads from the hot log at a time (the archive: 10 times as many)."""

    replay_batch_size: int = 500
    """Most replayed notifications in one push (live pushes: ``delivery_batch_size``).
    A replay has one push in flight, so its rate is about this many per round trip."""

    replay_yield_ms: float = 20.0
    """Most a replay's batch (or a redriven batch of dead letters) waits, each, while live
    pushes are under way (``broker.delivery.LiveFirst``, docs/replay.md "Live work first"); 0: no wait."""

    replay_max_rate: float = 0.0
    """Most notifications a second the replays and redrives of a process send together; 0: no cap."""

    replay_process: bool = True
    """Replays to ``trusted`` subscriptions with no price are read, filtered and pushed by
    a process of their own (docs/replay.md, "Where a replay runs"), so that they do not
    take the live path's interpreter; off: in the broker's. Replays of a memory store,
    and with tracing on, always run in the broker."""

    replay_step_slack_s: float = 30.0
    """Beyond a push's deadline, how long the broker waits for the replay process to answer
    one batch (a slow read included) before it takes the process for hung, stops it and
    pushes that batch itself."""

    replay_nice: int = 10
    """The replay process's CPU priority below the broker's (``nice``; 0 to 19): on a busy
    host the kernel gives the live path a core first."""

    replay_idle_class: bool = True
    """The replay process runs in the kernel's idle scheduling class (``SCHED_IDLE``, Linux):
    any other process that wants a core takes it from the replay at once, where a niced
    process keeps it for the rest of its time slice. On a host busy with other work
    replays slow down, and one waiting past its step's deadline and slack is pushed by
    the broker (docs/replay.md, "Where a replay runs"). False: ``replay_nice`` alone."""

    max_publications_per_principal: int = 1_000
    """Most publications one principal may own (admins are not limited)."""

    max_subscriptions_per_principal: int = 10_000
    """Most subscriptions one principal may hold (admins are not limited)."""

    max_unconfirmed_per_subscription: int = 10_000
    """Most notifications of one subscription pushed and awaiting confirmation (``oneshot``)
    or routed and not yet pushed; at the cap its delivery waits (JetStream's MaxAckPending)."""

    outbound_policy: str = "auto"
    """Which addresses the broker may call (docs/security.md): ``auto`` refuses loopback,
    private, link-local, multicast and other non-global ranges when the server listens on
    a non-loopback address, and allows them when it listens on loopback only;
    ``restricted`` always refuses them; ``open`` never does."""

    outbound_allow: str = ""
    """Ranges and hosts opened despite the policy: comma-separated CIDRs, addresses and host
    names (``*.example.org`` for subdomains), e.g. ``10.1.0.0/16,hooks.internal``."""

    outbound_per_host: int = 16
    """Most concurrent connections to one target host (port included)."""

    outbound_max_connections: int = 1024
    """Most outbound connections in all: bounds the file descriptors pushes can take."""

    answer_max_bytes: int = 16_384
    """Most bytes of a push's answer that are read; the rest is dropped with the connection."""

    schema_format_assertion: bool = False
    """JSON Schema ``format`` is an assertion in every draft (docs/schemas.md). Off, it
    follows the draft: asserted up to draft-07, an annotation in 2019-09 and 2020-12 unless
    the schema's ``$vocabulary`` asks for format assertion."""

    stream_window: int = 1_024
    """Most publishes a stream connection (``/v1/stream``) may have unanswered; when full
    the server stops reading that connection until some are answered."""

    stream_max_frame_bytes: int = 1024 * 1024
    """Largest WebSocket message a stream connection may send; a larger one closes the
    connection with code 1009."""

    stream_max_connections_per_principal: int = 16
    """Most stream connections one principal may hold open; more are refused (HTTP 429)."""

    log_level: str = "info"
    """Least severe log records written: ``debug``, ``info``, ``warning`` or ``error``."""

    log_format: str = "text"
    """``text``: lines for people; ``json``: one JSON object per line, with the stable
    fields of ``tidings.logs`` (docs/operations.md, "Logs")."""

    tracing: str = "auto"
    """OpenTelemetry spans exported over OTLP/HTTP (the ``otel`` extra; docs/operations.md,
    "Tracing"): ``auto`` when ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or ``..._TRACES_ENDPOINT``)
    is set, ``otlp`` always (refused at start without the extra), ``off`` never. The
    ``OTEL_*`` environment configures the exporter, the sampler and the resource."""

    xmpp_component: str = ""
    """The XMPP component's domain (e.g. ``tidings.example.org``); empty: no XMPP face
    (docs/xmpp.md). Needs the ``xmpp`` extra."""

    xmpp_host: str = "127.0.0.1"
    """The XMPP server the component connects to (XEP-0114)."""

    xmpp_port: int = 5347
    """The XMPP server's component port."""

    xmpp_secret: str = dataclasses.field(default="", repr=False)
    """The component's shared secret (never printed)."""

    xmpp_request_timeout_s: float = 10.0
    """How long the component waits for a publisher's authorisation answer."""

    connect_timeout_s: float = 10.0
    """How long any outbound connection (PostgreSQL, the XMPP server, webhook endpoints;
    Redis, NATS and Spark Connect from the distributor and the pipeline) may take to be
    made before it fails with a message naming the address and this setting. The same
variable as ``tidings.core.addresses.CONNECT_TIMEOUT_ENV`` (default and bounds agree;
a test holds them together), which the commands without Settings read."""

    def __post_init__(self) -> None:
        # Every number an operator sets has bounds too: a typo (an extra zero, a negative
        # sign, "inf") fails at start with the setting's name, never later in a timer.
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, int | float):
                continue
            low, high = _BOUNDS.get(f.name, (0, 1e9 if isinstance(value, float) else 2**31 - 1))
            if not (low <= value <= high) or value != value:  # value != value: NaN
                raise ConfigError(f"TIDINGS_{f.name.upper()}={value!r} is out of range [{low}, {high}]")

        for name, choices in _CHOICES.items():
            if getattr(self, name) not in choices:
                raise ConfigError(
                    f"TIDINGS_{name.upper()}={getattr(self, name)!r}: use {', '.join(choices)}"
                )

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
        """Settings from ``TIDINGS_*`` variables, then ``overrides`` (``None`` values ignored)."""
        return cls.load(None, env, **overrides)[0]

    @classmethod
    def load(
        cls, config: Path | None = None, env: Mapping[str, str] | None = None, **overrides: Any
    ) -> tuple[Settings, dict[str, str]]:
        """Settings from the TOML file ``config``, then ``TIDINGS_*`` variables, then
        ``overrides`` (``None`` values ignored); and where each value came from (a setting
        left out is at its default)."""
        env = os.environ if env is None else env
        values: dict[str, Any] = {}
        sources: dict[str, str] = {}
        if config is not None:
            for name, value in read_config(config, {f.name: f.type for f in fields(cls)}).items():
                values[name], sources[name] = value, f"file {config}"
        for f in fields(cls):
            raw = env.get(f"TIDINGS_{f.name.upper()}")
            if raw is not None:
                values[f.name], sources[f.name] = _parse(f.name, f.type, raw), f"env TIDINGS_{f.name.upper()}"
        for k, v in overrides.items():
            if v is not None:
                values[k], sources[k] = v, "command line"
        try:
            return cls(**values), sources
        except ConfigError as e:
            # Say where the value refused was set: the message names the setting.
            where = next((src for name, src in sources.items() if f"TIDINGS_{name.upper()}=" in str(e)), None)
            if where is None or where.startswith("env "):
                raise
            raise ConfigError(f"{e} (set in {where})") from None

    @classmethod
    def secret_fields(cls) -> frozenset[str]:
        """The settings never printed (they may hold a password or a shared secret)."""
        return frozenset(f.name for f in fields(cls) if not f.repr)

    @property
    def db_path(self) -> Path:
        return self.data_dir / "tidings.db"

    def front_processes(self) -> int:
        """How many front processes to start beside the broker."""
        return (self.workers or os.cpu_count() or 1) - 1

    def replace(self, **changes: Any) -> Settings:
        return dataclasses.replace(self, **changes)


# Settings whose sensible range is narrower than "a non-negative number".
_BOUNDS: dict[str, tuple[float, float]] = {
    "workers": (0, 256),
    "lease_s": (1, 600),
    "heartbeat_s": (0.05, 60),
    "max_clock_offset_s": (0.001, 86_400),
    "forward_timeout_s": (0, 120),
    "store_timeout_s": (0.5, 600),
    "store_stall_s": (0.05, 600),
    "max_waiting_bytes": (64 * 1024, 1 << 40),
    "max_waiting_requests": (1, 10_000_000),
    "drain_s": (0, 3_600),
    "port": (0, 65_535),
    "push_timeout_s": (0.001, 3_600),
    "ack_deadline_s": (0.001, 3_600),
    "retry_initial_s": (0.001, 3_600),
    "retry_max_s": (0.001, 86_400),
    "max_age_s": (1, 365 * 86_400),
    "max_attempts": (1, 1_000_000),
    "delivery_batch_size": (1, 10_000),
    "replay_batch_size": (1, 100_000),
    "replay_yield_ms": (0, 10_000),
    "replay_max_rate": (0, 1e9),
    "replay_nice": (0, 19),
    "replay_step_slack_s": (0.1, 600.0),
    "max_batch_items": (1, 1_000_000),
    "max_body_bytes": (1, 1 << 30),
    "tail_capacity": (1, 10_000_000),
    "stream_window": (1, 1_000_000),
    "stream_max_frame_bytes": (64, 1 << 30),
    "stream_max_connections_per_principal": (1, 100_000),
    "connect_timeout_s": (0.1, 600.0),
}


_CHOICES: dict[str, tuple[str, ...]] = {
    "log_level": ("debug", "info", "warning", "error"),
    "log_format": ("text", "json"),
    "tracing": ("auto", "otlp", "off"),
}

def _parse(name: str, typ: Any, raw: str) -> Any:
    kind = typ if isinstance(typ, str) else getattr(typ, "__name__", str(typ))
    try:
        if kind == "int":
            return int(raw)
        if kind == "float":
            return float(raw)
        if kind == "Path":
            return Path(raw)
        if kind == "bool":
            return _BOOLS[raw.strip().lower()]
        return raw
    except (ValueError, KeyError):
        raise ConfigError(f"TIDINGS_{name.upper()}={raw!r} is not a valid {kind}") from None


_BOOLS = {"1": True, "true": True, "yes": True, "on": True, "0": False, "false": False, "no": False, "off": False}
