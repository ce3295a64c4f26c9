"""/metrics naming: one `ql_bridge_` prefix, Prometheus units and `_total`, process metrics on the app's own
registry, and the help text saying whose numbers these are (one process's)."""

from __future__ import annotations

import re

from bridge.metrics import BridgeMetrics
from tests.web.asgi_client import AsgiTestClient, bridge_client
from tests.web.conftest import FakeUpstream, make_container

TYPE_LINE = re.compile(r"^# TYPE (\S+) (\S+)$", re.MULTILINE)
UNITLESS_GAUGE_SUFFIXES = ("_rows", "_ratio", "_info", "_mismatches", "_executions", "_success", "_fds")


def scrape(client: AsgiTestClient) -> str:
    client.get("/api/crons")  # one forward, so the histogram has a sample
    response = client.get("/metrics")
    assert response.status_code == 200
    return response.get_data(as_text=True)


STANDARD_PREFIXES = ("process_", "python_")  # prometheus_client's default collectors, as stock dashboards expect


def test_every_metric_of_the_bridges_own_carries_the_ql_bridge_prefix(client: AsgiTestClient) -> None:
    families = dict(TYPE_LINE.findall(scrape(client)))

    assert families, "no metric at all"
    assert [name for name in families if not name.startswith(("ql_bridge_", *STANDARD_PREFIXES))] == []


def test_counters_end_in_total_and_timings_are_in_seconds(client: AsgiTestClient) -> None:
    families = dict(TYPE_LINE.findall(scrape(client)))

    assert [n for n, t in families.items() if t == "counter" and not n.endswith("_total")] == []
    assert [n for n, t in families.items() if t == "histogram" and not n.endswith("_seconds")] == []
    assert "ql_bridge_forward_seconds" in families and "ql_bridge_shadow_write_seconds" in families


def test_process_metrics_keep_their_standard_names_on_the_apps_own_registry(client: AsgiTestClient) -> None:
    text = scrape(client)

    for name in ("process_resident_memory_bytes", "process_cpu_seconds_total",
                 "process_open_fds", "process_max_fds", "process_start_time_seconds"):
        assert re.search(rf"^{name} \d", text, re.MULTILINE), name
    assert re.search(r'^python_info\{.*version="\d+\.\d+', text, re.MULTILINE)
    assert "ql_bridge_process_" not in text and "ql_bridge_python_" not in text


def test_two_apps_never_share_a_registry() -> None:
    one, two = BridgeMetrics(), BridgeMetrics()
    one.reconcile("ok")

    assert one.value("ql_bridge_reconcile_total", result="ok") == 1
    assert two.value("ql_bridge_reconcile_total", result="ok") == 0
    assert two.registry.get_sample_value("process_open_fds") is not None


def test_the_help_text_says_the_numbers_are_this_one_process(upstream: FakeUpstream) -> None:
    container = make_container(upstream)
    text = scrape(bridge_client(container))
    container.http.close()

    help_line = next(line for line in text.splitlines() if line.startswith("# HELP ql_bridge_info "))
    assert "one process" in help_line and "process_start_time_seconds" in help_line
    assert re.search(r'^ql_bridge_info\{version="[^"]+"\} 1\.0$', text, re.MULTILINE)


def test_known_results_are_exported_as_zero_before_the_first_event(client: AsgiTestClient) -> None:
    # rate() and absent-free alert rules need the series before anything happened.
    text = scrape(client)

    for result in ("ok", "failed", "locked"):
        assert f'ql_bridge_reconcile_total{{result="{result}"}} 0.0' in text
    for result in ("applied", "retried", "parked", "failed"):
        assert f'ql_bridge_projection_retry_total{{result="{result}"}} 0.0' in text


def test_gauges_name_their_unit_or_say_they_count_rows(client: AsgiTestClient) -> None:
    families = dict(TYPE_LINE.findall(scrape(client)))
    gauges = [n for n, t in families.items() if t == "gauge"]

    assert [n for n in gauges if not n.endswith(("_seconds", "_bytes", *UNITLESS_GAUGE_SUFFIXES))] == []
