"""`ql-bridge doctor`'s checks judged on given evidence: each verdict and its fix. The task-shell check runs real
bash over a real config.sh, as a task shell sources it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from bridge.cli.doctor import Check, Evidence, check_coverage, check_process_identity, check_shell_port, check_time_zone
from bridge.config import Settings
from bridge.service.seam import OriginCoverage
from legacy_adapters.install import BackendProcess, log_name_offset_s

OK = Check("x", "ok", "fine")


def evidence(tmp_path: Path, *, tz: str = "UTC", backends: list[BackendProcess] | None = None,
             instances: list[tuple[str | None, float | None]] | None = None,
             coverage: list[OriginCoverage] | None = None, passes_ran: bool = True) -> Evidence:
    settings = Settings.from_env({"BRIDGE_LISTEN": "0.0.0.0:5700", "BRIDGE_LEGACY_URL": "http://127.0.0.1:5701",
                                  "BRIDGE_LEGACY_DATA_DIR": str(tmp_path), "BRIDGE_LEGACY_TZ": tz})
    return Evidence(settings, OK, OK, OK, backends if backends is not None else [], instances or [], coverage or [],
                    passes_ran)


def backend(qlport: str | None = "5701", **environ: str) -> BackendProcess:
    return BackendProcess(4242, {"BACK_PORT": "5701", **({"QlPort": qlport} if qlport else {}), **environ})


def write_config(tmp_path: Path, text: str) -> None:
    (tmp_path / "config").mkdir(exist_ok=True)
    (tmp_path / "config" / "config.sh").write_text(text)


def test_shells_inheriting_the_backends_port_bypass_the_bridge_and_the_fix_is_config_sh(tmp_path: Path) -> None:
    write_config(tmp_path, "## user config\nexport TZ=Asia/Shanghai\n")

    check = check_shell_port(evidence(tmp_path, backends=[backend()]))

    assert check.verdict == "fail" and "5701" in check.detail and "bypass the bridge" in check.detail
    assert check.fix is not None and "ql-bridge seam install" in check.fix and "config.sh" in check.fix


@pytest.mark.parametrize("line", ["export QlPort=5700", "QlPort=5700", 'export QlPort="5700"  # the bridge'])
def test_config_sh_pointing_at_the_bridge_passes(tmp_path: Path, line: str) -> None:
    write_config(tmp_path, f"# comment QlPort=1\n{line}\n")

    assert check_shell_port(evidence(tmp_path, backends=[backend()])).verdict == "ok"


def test_an_unreadable_backend_without_config_sh_is_a_warning_not_a_guess(tmp_path: Path) -> None:
    check = check_shell_port(evidence(tmp_path, backends=[BackendProcess(1, None)]))
    assert check.verdict == "warn"


def test_a_qlport_set_through_a_variable_is_evaluated_by_bash_with_the_backends_environment(tmp_path: Path) -> None:
    write_config(tmp_path, 'export QlPort="${SHELL_PORT:-5700}"\n')

    default = check_shell_port(evidence(tmp_path, backends=[backend()]))
    moved = check_shell_port(evidence(tmp_path, backends=[backend(SHELL_PORT="5702")]))

    assert default.verdict == "ok" and "localhost:5700" in default.detail
    assert moved.verdict == "fail" and "localhost:5702" in moved.detail and "bypass the bridge" in moved.detail


def test_a_config_sh_that_ends_the_shell_is_a_warning_that_says_so(tmp_path: Path) -> None:
    write_config(tmp_path, "exit 3\n")

    check = check_shell_port(evidence(tmp_path, backends=[backend()]))

    assert check.verdict == "warn" and "ended the shell" in check.detail


def shanghai_log(moment: datetime) -> tuple[str, float]:
    """A log name written at UTC+08:00 for an execution that began at ``moment``."""
    wall = (moment + timedelta(hours=8)).strftime("%Y-%m-%d-%H-%M-%S-123")
    return f"job_1/{wall}.log", moment.timestamp()


def test_the_offset_2x_names_its_logs_in_is_read_from_evidence(tmp_path: Path) -> None:
    moment = datetime(2026, 12, 4, 9, 0, 0, tzinfo=UTC)
    path, started = shanghai_log(moment)
    assert log_name_offset_s(path, started) == 8 * 3600
    assert log_name_offset_s("/dev/null", started) is None
    assert log_name_offset_s(path, None) is None

    wrong = check_time_zone(evidence(tmp_path, tz="UTC", instances=[shanghai_log(moment)] * 3))
    right = check_time_zone(evidence(tmp_path, tz="Asia/Shanghai", instances=[shanghai_log(moment)] * 3))

    assert wrong.verdict == "fail" and "+08:00" in wrong.detail and "BRIDGE_LEGACY_TZ" in (wrong.fix or "")
    assert right.verdict == "ok"


def test_coverage_fails_when_an_origins_executions_bypass_the_bridge(tmp_path: Path) -> None:
    bypassed = check_coverage(evidence(tmp_path, coverage=[OriginCoverage("manual", 8, 0),
                                                           OriginCoverage("scheduled_system", 0, 30)]))
    healthy = check_coverage(evidence(tmp_path, coverage=[OriginCoverage("scheduled_system", 0, 30)]))
    unknown = check_coverage(evidence(tmp_path, passes_ran=False))

    assert bypassed.verdict == "fail" and "callbacks are bypassing the bridge" in bypassed.detail
    assert healthy.verdict == "ok" and unknown.verdict == "warn"


def test_process_identity_needs_2xs_processes_in_sight(tmp_path: Path) -> None:
    assert check_process_identity(evidence(tmp_path, backends=[])).verdict == "warn"
    assert check_process_identity(evidence(tmp_path, backends=[backend()])).verdict == "ok"
