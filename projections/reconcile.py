"""Pure reconciliation rules: a 2.x row and a shadow Run in, findings (with a DeepDiff diff) out.

2.x keeps whole seconds, so times compare within a tolerance; volatile bookkeeping fields (updatedAt,
the bridge's receipt time) never count as a difference.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from deepdiff import DeepDiff

from bridge.domain.model import RUN_ACTIVE
from legacy_adapters.reader import LegacyInstance
from legacy_adapters.schema import InstanceStatus
from legacy_adapters.timeconv import ms_to_epoch_seconds

# 2.x instance status → the shadow Run status it should sit beside (legacy-2x.md 2.8).
EXPECTED_RUN_STATUS = {InstanceStatus.FINISHED: "succeeded", InstanceStatus.ERROR: "failed",
                       InstanceStatus.STOPPED: "cancelled"}
ACTIVE_RUN_STATUSES = frozenset(status.value for status in RUN_ACTIVE)  # the domain's list, as stored
VOLATILE = ["root['updated_at']", "root['received_at_ms']"]


@dataclass(frozen=True, slots=True)
class Finding:
    kind: str
    cron_id: int | None
    run_id: str | None = None
    instance_id: int | None = None
    origin: str | None = None
    diff: dict[str, Any] = field(default_factory=dict)

    @property
    def dedupe_key(self) -> str:
        subject = f"i{self.instance_id}" if self.instance_id is not None else f"r{self.run_id}"
        return f"{self.kind}:{self.cron_id}:{subject}"


def structured_diff(legacy: dict[str, Any], shadow: dict[str, Any], *, epsilon: float = 0.0) -> dict[str, Any]:
    """DeepDiff of two views as plain JSON data; empty when they agree.

    Agreement is checked first with plain comparisons: almost every pair agrees, and building a DeepDiff
    per field was most of a reconcile pass (tests/bench/bench_reconcile.py).
    """
    if _agree(legacy, shadow, epsilon):
        return {}
    diff = DeepDiff(legacy, shadow, exclude_paths=VOLATILE, math_epsilon=epsilon or None, verbose_level=2)
    return json.loads(diff.to_json()) if diff else {}


def compare_ended(instance: LegacyInstance, run: dict[str, Any], tolerance_s: int) -> list[Finding]:
    """An ended 2.x instance against its shadow Run: status, exit code, start and finish times."""
    status = _instance_status(instance.status)
    expected = EXPECTED_RUN_STATUS.get(status) if status is not None else None

    def finding(kind: str, legacy: dict[str, Any], shadow: dict[str, Any], epsilon: float = 0.0) -> list[Finding]:
        diff = structured_diff(legacy, shadow, epsilon=epsilon)
        return [Finding(kind, instance.cron_id, run["id"], instance.id, run.get("origin"), diff)] if diff else []

    found = finding("terminal_status", {"status": expected}, {"status": run["status"]})
    if status is not InstanceStatus.STOPPED:  # a stopped row's 143 (or nothing, at boot) pairs with cancelled
        legacy_exit = int(instance.exit_code) if instance.exit_code is not None else None
        found += finding("exit_code", {"exit_code": legacy_exit}, {"exit_code": run.get("exit_code")})
    found += finding("start_time", {"started_s": instance.started_at},
                     {"started_s": _seconds(run.get("started_at_ms"))}, tolerance_s)
    if instance.finished_at is not None and run["status"] not in ACTIVE_RUN_STATUSES:
        found += finding("finish_time", {"finished_s": instance.finished_at},
                         {"finished_s": _seconds(run.get("finished_at_ms"))}, tolerance_s)
    return found


def compare_running(instance: LegacyInstance, run: dict[str, Any], process_alive: bool | None) -> list[Finding]:
    """A 2.x instance still marked running: stuck when its process is provably gone, or ended in the shadow."""
    if process_alive is False:
        return [Finding("stuck", instance.cron_id, run["id"], instance.id, run.get("origin"),
                        {"legacy": "running", "process": "gone", "pid": instance.pid})]
    if run["status"] not in ACTIVE_RUN_STATUSES:
        return [Finding("terminal_status", instance.cron_id, run["id"], instance.id, run.get("origin"),
                        structured_diff({"status": "running"}, {"status": run["status"]}))]
    return []


def compare_cron(cron_id: int, legacy_status: int | None, legacy_pid: int | None,
                 active_runs: list[dict[str, Any]]) -> list[Finding]:
    """Crontabs.status / pid against the cron's active shadow Runs (running > queued > idle)."""
    running = [r for r in active_runs if r["status"] == "running"]
    shadow_state = "running" if running else ("queued" if any(r["status"] == "queued" for r in active_runs)
                                              else "idle")
    legacy_state = {0: "running", 3: "queued"}.get(legacy_status if legacy_status is not None else -1, "idle")
    run_id = active_runs[0]["id"] if active_runs else None
    found = []
    diff = structured_diff({"state": legacy_state}, {"state": shadow_state})
    if diff:
        found.append(Finding("active_state", cron_id, run_id, None, active_runs[0].get("origin") if active_runs
                             else None, diff))
    if legacy_state == "running" and running and running[0].get("pid") is not None \
            and legacy_pid is not None and running[0]["pid"] != legacy_pid:
        found.append(Finding("pid", cron_id, running[0]["id"], None, running[0].get("origin"),
                             structured_diff({"pid": legacy_pid}, {"pid": running[0]["pid"]})))
    return found


def _agree(legacy: dict[str, Any], shadow: dict[str, Any], epsilon: float) -> bool:
    if legacy == shadow:
        return True
    if not epsilon or legacy.keys() != shadow.keys():
        return False
    numbers = (int, float)
    return all(isinstance(a, numbers) and isinstance(b, numbers) and not isinstance(a, bool)
               and abs(a - b) <= epsilon for a, b in ((legacy[k], shadow[k]) for k in legacy))


def _instance_status(value: int | None) -> InstanceStatus | None:
    try:
        return InstanceStatus(value) if value is not None else None
    except ValueError:
        return None


def _seconds(ms: int | None) -> int | None:
    return ms_to_epoch_seconds(ms) if ms is not None else None
