"""docker/prometheus/ql-bridge-alerts.yml: every rule is complete, and every metric it names is exposed by a
real `ql-bridge serve` after some traffic (a renamed metric would otherwise leave an alert that never fires).

PyYAML is not a dependency: a small line reader takes the rule keys this file uses (`alert`, `expr` on one
line or as a `|` block, `for`, `severity`, `summary`).
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from bridge.cli.demo import CURL_HEADERS, migrated, serving_bridge
from legacy_adapters.callbacks import render_status_body
from legacy_adapters.testing.datadir import create_legacy_data_dir
from legacy_adapters.testing.double import Legacy2xDouble

RULES = Path(__file__).parents[2] / "docker" / "prometheus" / "ql-bridge-alerts.yml"
PROMQL_WORDS = frozenset({"and", "or", "unless", "by", "without", "on", "ignoring", "group_left", "group_right",
                          "bool", "offset"})
NOT_OURS = frozenset({"up"})  # Prometheus's own series for the target


@dataclass
class Rule:
    alert: str
    expr: str = ""
    fields: dict[str, str] = field(default_factory=dict)


def read_rules(text: str) -> list[Rule]:
    """The rules of a Prometheus rule file written as this one is (two-space indents, `- alert:` items)."""
    rules: list[Rule] = []
    block_indent: int | None = None
    for line in text.splitlines():
        stripped = line.strip()
        indent = len(line) - len(line.lstrip())
        if block_indent is not None:
            if stripped and indent >= block_indent:
                rules[-1].expr = f"{rules[-1].expr} {stripped}".strip()
                continue
            block_indent = None
        if not stripped or stripped.startswith("#"):
            continue
        if stripped.startswith("- alert:"):
            rules.append(Rule(stripped.removeprefix("- alert:").strip()))
        elif rules and stripped.startswith("expr:"):
            value = stripped.removeprefix("expr:").strip()
            if value in ("|", "|-", ">", ">-"):
                block_indent = indent + 2
            else:
                rules[-1].expr = value
        elif rules and ":" in stripped:
            key, _, value = stripped.partition(":")
            rules[-1].fields[key.strip()] = value.strip().strip('"')
    return rules


def metric_names(expr: str) -> set[str]:
    """Every series name in a PromQL expression: identifiers that are not functions, keywords, label names,
    label values, durations or numbers."""
    bare = re.sub(r'"[^"]*"', "", expr)  # label values and strings
    bare = re.sub(r"\{[^}]*\}", "", bare)  # label matchers
    bare = re.sub(r"\[[^\]]*\]", "", bare)  # range selectors
    bare = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", bare)  # label lists
    names = set(re.findall(r"\b([a-zA-Z_:][a-zA-Z0-9_:]*)\b(?!\s*\()", bare))
    return names - PROMQL_WORDS


def test_the_line_reader_reads_the_file_as_yaml_does() -> None:
    rules = read_rules(RULES.read_text())
    import yaml  # the test extra installs PyYAML: the cross-check runs everywhere the suite does

    parsed = yaml.safe_load(RULES.read_text())["groups"][0]["rules"]
    assert [(r.alert, r.expr) for r in rules] == [(r["alert"], " ".join(r["expr"].split())) for r in parsed]


def test_every_rule_has_an_expression_a_severity_and_a_summary() -> None:
    rules = read_rules(RULES.read_text())

    assert len(rules) >= 10
    assert len({r.alert for r in rules}) == len(rules)
    for rule in rules:
        assert rule.alert.startswith("QlBridge") and rule.expr, rule
        assert rule.fields.get("severity") in ("critical", "warning", "info"), rule
        assert rule.fields.get("summary"), rule


def test_every_series_a_rule_names_is_ours_the_process_collectors_or_prometheus_up() -> None:
    names = {name for rule in read_rules(RULES.read_text()) for name in metric_names(rule.expr)}

    assert names - NOT_OURS and all(n.startswith(("ql_bridge_", "process_")) for n in names - NOT_OURS), names


def test_the_name_reader_finds_series_and_leaves_out_functions_labels_and_keywords() -> None:
    expr = ('sum by (instance, le) (rate(ql_bridge_a_bucket{mode!="off"}[5m])) / on(instance) ql_bridge_b '
            "> 3 * ql_bridge_c and (time() - up) > 0.8")

    assert metric_names(expr) == {"ql_bridge_a_bucket", "ql_bridge_b", "ql_bridge_c", "up"}


# -- against a real bridge -------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def scraped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """/metrics of `ql-bridge serve` after a shadowed execution, one that went around the bridge, and a
    reconcile pass that found it missing."""
    root = tmp_path_factory.mktemp("alerts")
    data = create_legacy_data_dir(root / "ql")
    cron = data.add_cron("alerts", "task alerts.sh", "* * * * *")
    store = migrated(f"sqlite:///{root / 'bridge.sqlite'}")
    headers = {**CURL_HEADERS, "Authorization": f"Bearer {data.system_token}"}
    with Legacy2xDouble(data).start() as double:
        with serving_bridge(double.url, data.root, store, BRIDGE_DATA_DIR=str(root),
                            BRIDGE_RECONCILE_INTERVAL_S="5", BRIDGE_RECONCILE_GRACE_S="0") as url:
            time.sleep(1.01 - time.time() % 1)  # begun in a second after the flags were seeded, so judged
            begin = int(time.time())
            for target, pid in ((url, 501), (double.url, 502)):  # through the bridge, then around it
                for status in (0, 1):
                    body = render_status_body(cron, status, pid, f"alerts_{pid}/a.log", begin, 1, 0 if status else None)
                    assert httpx.put(f"{target}/open/crons/status?t=1", content=body, headers=headers,
                                     timeout=10).status_code == 200
            yield _after_a_reconcile_pass(url)


def _after_a_reconcile_pass(url: str) -> str:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        text = httpx.get(f"{url}/metrics", timeout=10).text
        if re.search(r'^ql_bridge_open_mismatches\{kind="missing"', text, re.MULTILINE) \
                and re.search(r"^ql_bridge_reconcile_last_success_age_seconds \d", text, re.MULTILINE):
            return text
        time.sleep(0.5)
    raise AssertionError("no reconcile pass found the execution that went around the bridge within 30 s")


def test_every_metric_a_rule_names_is_exposed_by_a_real_bridge(scraped: str) -> None:
    declared = set(re.findall(r"^# TYPE (\S+) ", scraped, re.MULTILINE))
    sampled = set(re.findall(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)[{ ]", scraped, re.MULTILINE))
    names = {name for rule in read_rules(RULES.read_text()) for name in metric_names(rule.expr)} - NOT_OURS

    # A counter with labels shows its samples only once something happened; its family is declared at once.
    families = {re.sub(r"_(bucket|count|sum)$", "", name) for name in names}
    assert sorted(f for f in families if f not in declared) == []
    gauges = {n for n in names if re.search(rf"^# TYPE {n} gauge$", scraped, re.MULTILINE)}
    assert sorted(g for g in gauges if g not in sampled) == []
    assert "ql_bridge_shadow_write_failed_total" in names and "ql_bridge_forward_seconds_bucket" in sampled
