"""Which tests are slow, and why: the one table the ``slow`` marker is applied from.

The fast loop is ``.venv/bin/python -m pytest -m "not slow"``: under three minutes on two
cores, and it still touches every package of ``src/tidings`` (tests/test_fast_loop.py holds
that, and that every entry here names a file and test that exist). CI runs the whole suite,
slow tests included.

An entry is a test file (``test_x.py``: every test in it) or one test function in an
otherwise fast file (``test_x.py::test_name``: all its parameters). Its reason starts with
the kind of slowness:

- ``servers``: starts real tidings processes (or several, or restarts them), a few seconds
  each here, for many tests;
- ``spark``: needs the SparkSession, 20 to 40 s to start on a worker here (so no Spark test
  stays in the loop: the pipeline's tests without Spark keep it touched);
- ``browser``: Playwright driving Chromium;
- ``prosody``: a real Prosody XMPP server;
- ``chaos``: fault injection: kills, cut connections, throwaway PostgreSQL clusters;
- ``soak``: long runs: fuzzing, many-example property runs, thousands of endpoints;
- ``waits``: waits out real timeouts or deadlines.

The seconds are each file's total (setup, call and teardown) in the full suite with
``--durations=0`` on this two-core machine while it was shared (load about 5), so they err
on the slow side. A new test file is fast until it is listed here; list it when it takes
more than about ten seconds, and keep one fast test of each package.
"""

from __future__ import annotations

from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent

KINDS = ("servers", "spark", "browser", "prosody", "chaos", "soak", "waits")

SLOW: dict[str, str] = {
    # Real servers started as processes.
    "test_overload.py::test_a_stalled_disk_is_shed_told_and_recovered": "servers: two servers on a disk held "
    "by an fsync shim, each waiting out the store's timeout (35 s)",
    "test_overload.py::test_a_paused_postgresql_is_shed_told_and_recovered": "chaos: a throwaway PostgreSQL "
    "cluster, paused with SIGSTOP while a server waits out its timeouts (25 s)",
    "test_e2e_stream.py": "servers: a server per test (36), with hypothesis over the stream face (198 s)",
    "test_e2e_hostile_input.py": "servers: a server per test (27) (159 s)",
    "test_e2e_subscriptions.py": "servers: a server and an endpoint per test (118 s)",
    "test_e2e_replay.py": "servers: a server per test, restarts and a large replay (107 s)",
    "test_replay_process.py": "servers: a server per test, the replay process killed, stopped and restarted (45 s)",
    "test_e2e_schemas.py": "servers: a server per test, the SDK and the CLI as processes (72 s)",
    "test_e2e_publish.py": "servers: a server per test, principals made by the CLI (59 s)",
    "test_e2e_guarantees.py": "servers: a server per test with retries waited out (54 s)",
    "test_e2e_delivery_rules.py": "servers: a server per test, back-pressure and re-pushes (48 s)",
    "test_e2e_restart.py": "servers: servers killed and restarted (46 s)",
    "test_e2e_signing.py": "servers: a server per test, secrets rotated (39 s)",
    "test_e2e_postgresql.py": "servers: servers on PostgreSQL (25 s)",
    "test_e2e_outbound.py": "servers: a server per outbound policy (21 s)",
    "test_cli_commands.py": "servers: a server per test, the CLI as processes, restarts and a lease waited out (149 s)",
    "test_examples.py": "servers: a server per example, each example a process; Spark for spark_read (75 s)",
    "test_cli_profiles.py": "servers: a server per test and some 40 runs of the CLI as processes (83 s)",
    "test_cli_hostile.py": "servers: a server per test, a 100 MB line and a million lines published (98 s)",
    "test_cluster.py": "servers: several broadcasters on PostgreSQL, one killed for failover (71 s)",
    "test_cluster_registry.py": "servers: two broadcasters on PostgreSQL per test, and a server per test (52 s)",
    "test_cluster_registry_stateful.py": (
        "servers: three broadcasters on PostgreSQL driven by hypothesis's stateful testing (35 s)"
    ),
    "test_clock_e2e.py": "servers: two broadcasters on PostgreSQL, one under libfaketime stepped under load (30 s)",
    "test_graceful_stop.py": "servers: SIGTERM and a rolling restart of a cluster under load (60 s)",
    "test_credentials.py": "servers: a server per test, revocation on a running one (36 s)",
    "test_fronts.py": "servers: servers of several processes, with hypothesis (34 s)",
    "test_backup_restore.py": "servers: backup under load, kill, restore, restart (31 s)",
    "test_fixture_stores.py": "servers: a server on each stored store version (25 s)",
    "test_confluent_deletes.py": "servers: a server per test on the Confluent face (22 s)",
    "test_grafana_dashboard.py": "servers: a server under load for its /metrics (39 s)",
    "test_bench_floor.py": "servers: the benchmark's servers, tidings' and granian (42 s)",
    "test_bench_hops.py::test_the_hops_command_runs_briefly_and_prints_every_hop":
        "servers: python -m bench.profile hops end to end, HTTP and stream, three servers each (33 s)",
    "test_interchain_e2e.py": "servers: the distributor and a broker as processes, Redis and NATS (37 s)",
    "test_console_feeds.py": "servers: a server per test, event streams resumed and ended (29 s)",
    "test_http_layer.py::test_what_the_http_layer_refuses_speaks_the_documented_shape":
        "servers: a server (alone or with fronts) per refused request, 30 cases (about 115 s)",
    "test_http_layer.py::test_any_verb_or_request_line_gets_the_documented_shape":
        "servers: hypothesis against a server and one with fronts (10 s)",
    "test_config.py::test_a_bad_config_file_is_refused_at_start_with_one_line_and_nothing_made":
        "servers: a tidings serve process per bad file, 11 cases (21 s)",
    "test_replay_yield.py::test_a_live_push_under_way_holds_back_a_replays_batches":
        "servers: a server holding a live push open while a replay waits (15 s)",
    "test_replay_yield.py::test_a_redrive_of_dead_letters_waits_for_another_subscriptions_live_push":
        "servers: a server holding a live push open while a redrive waits (16 s)",
    "test_e2e_bad_input.py": "servers: bad input to a server, then its events checked, 40 tests (17 s)",
    "test_cloudevents_publish.py": "servers: CloudEvents published to a server in every mode (14 s)",
    "test_trace_propagation.py": "servers: trace context on pushes from a server, stream pushes too (15 s)",
    "test_asyncapi.py": "servers: the CLI's document from a running server, with hypothesis (11 s)",
    "test_rights_matrix.py::test_without_a_valid_token_every_method_is_401": "servers: a server per test (5 s)",
    "test_rights_matrix.py::test_another_principal_is_refused_on_alices_resources": "servers: a server per test (4 s)",
    "test_rights_matrix.py::test_scoped_listings_show_another_principal_nothing_of_alices":
        "servers: a server per test (4 s)",
    "test_rights_matrix.py::test_admin_only_methods_refuse_others_in_one_shape": "servers: a server per test (5 s)",
    "test_rights_matrix.py::test_the_admin_may_do_what_admins_may": "servers: a server per test (7 s)",
    "test_tracing.py::test_one_trace_runs_from_the_publisher_through_tidings_to_the_subscriber":
        "servers: a server exporting to a collector in the test (6 s)",
    "test_tracing.py::test_a_failed_push_and_a_refused_event_have_error_spans":
        "servers: a server exporting to a collector in the test (4 s)",
    "test_tracing.py::test_a_collector_that_is_down_does_not_hold_a_stop_up":
        "servers: a server stopped while its collector is down (6 s)",
    "test_tracing.py::test_serve_refuses_otlp_without_the_extra_in_one_line": "servers: a tidings serve process (2 s)",
    "test_limits.py::test_a_subscription_waits_at_its_cap_of_unconfirmed_notifications_and_loses_nothing":
        "servers: a server and a subscriber held at its cap (5 s)",
    "test_limits.py::test_publications_and_subscriptions_per_principal_are_limited": "servers: a server (7 s)",
    "test_config.py::test_a_start_that_fails_says_why_in_a_json_line": "servers: tidings serve processes (4 s)",
    "test_config.py::test_serve_with_a_config_file_in_json_logs_writes_only_json_lines":
        "servers: a tidings serve process, its log read (6 s)",
    "test_upgrades.py::test_a_rolling_upgrade_across_schema_versions_is_refused_until_the_old_members_stop":
        "servers: members of two schema versions on PostgreSQL (8 s)",
    "test_long_ints.py::test_every_face_takes_integers_to_the_bound_and_refuses_beyond_naming_it":
        "servers: a server alone and one with fronts (9 s)",
    "test_cloudevents_push.py::test_an_icrc72_publish_keeps_the_requests_trace_context":
        "servers: a server of three processes (12 s)",
    "test_backup_hostile.py": "servers: tidings backup and restore as processes, on full and read-only mounts (18 s)",
    "test_bench_replay.py": "soak: the benchmark's replay scenario over 20,000 events (8 s)",
    # Waits out real timeouts.
    "test_connect_timeouts.py": "waits: the CLI and the service wait out connect and read timeouts (80 s)",
    "test_direct_push.py::test_a_push_unanswered_at_shutdown_is_pushed_again_after_the_restart":
        "waits: an unanswered push held across a restart, 10 s per case (20 s)",
    # Spark: the session takes 20 to 40 s to start on a worker here, more than the loop can
    # spend; the fast loop reaches tidings.pipeline through its tests without Spark.
    "test_interchain_reconcile.py": "spark: the reconciliation job over two networks (144 s)",
    "test_pipeline_stats.py": "spark: the statistics job over a store a server wrote (101 s)",
    "test_filters_spark.py": "spark: filters compiled to Spark columns (93 s)",
    "test_pipeline_sink.py": "spark: batch and streaming writes through a real broker (72 s)",
    "test_pipeline_archive.py": "spark: the archive job read back through Spark SQL, after kills (71 s)",
    "test_pipeline_postgresql.py": "spark: the pipeline on a PostgreSQL store (38 s)",
    "test_pipeline_spark_archive.py": "spark: tidings archive --master, local[N] jobs killed and failed in "
                                      "subprocesses, a throwaway PostgreSQL stopped mid-job (10 min on a busy host)",
    "test_pipeline_connect.py": "spark: a Spark Connect server started from PySpark (37 s)",
    "test_pipeline_stream.py": "spark: readStream with restarts from a checkpoint (18 s)",
    "test_pipeline_source.py": "spark: the data source's reads and pushdown (13 s plus the session)",
    "test_pipeline_live.py": "spark: the archive job against a live server (11 s plus the session)",
    "test_global_id_spark.py": "spark: the session's start, then a Spark job per example (26 s alone)",
    "test_e2e_replay_archive.py": "spark: archives in the session, then replays (4 s plus the session)",
    "test_pipeline_variant.py::test_native_encoder_gives_the_same_bytes":
        "soak: hypothesis, the C encoder against the Python one (15 s)",
    "test_pipeline_variant.py::test_native_encoder_never_takes_what_python_refuses":
        "soak: hypothesis, the C encoder against the Python one (13 s)",
    # Browsers, Prosody.
    "test_console.py": "browser: the console driven from Chromium by Playwright",
    "test_xmpp.py": "prosody: the XMPP face against a real Prosody",
    # Chaos and fault injection.
    "test_cluster_faults.py": "chaos: a throwaway PostgreSQL primary and standby, one fault of each kind (186 s)",
    "test_crash_safety.py": "chaos: the server SIGKILLed again and again under load (50 s)",
    "test_interchain_crash.py": "chaos: the distributor SIGKILLed again and again (32 s)",
    "test_failed_writes.py": "chaos: the store's connection cut through a proxy while pushes go on (39 s)",
    "test_publish_retries.py": "chaos: answers dropped by a proxy, a server SIGKILLed mid-publish (61 s)",
    "test_publish_db_restart.py": "chaos: a throwaway PostgreSQL cluster restarted under keyed publishes",
    # Long soak and property runs.
    "test_fuzz_openapi.py": "soak: schemathesis over every operation of a real server (154 s)",
    "test_e2e_hostile_endpoints.py": "soak: a thousand subscriptions at endpoints that never answer (15 s)",
}


def _key(item: pytest.Item) -> tuple[str, str]:
    """The item's file, relative to tests/, and its test's name without parameters."""
    path = Path(str(item.path)).resolve()
    try:
        rel = path.relative_to(TESTS).as_posix()
    except ValueError:
        rel = path.name
    return rel, item.nodeid.split("::", 1)[-1].split("[", 1)[0]


def mark_slow(items: list[pytest.Item]) -> None:
    """Mark ``slow`` every test the table names (its file, or the test itself)."""
    for item in items:
        rel, name = _key(item)
        reason = SLOW.get(rel) or SLOW.get(f"{rel}::{name}")
        if reason is not None:
            item.add_marker(pytest.mark.slow(reason=reason))
