"""What the commands print: times in the operator's zone, whole lines off a terminal, reconcile without
--once, and a report folder that cannot be written said in one line."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from bridge.service.flags import FlagService
from bridge.storage.engine import make_engine
from bridge.storage.flags import SqlFlagStore
from tests.cli.conftest import Cli, one_line_failure, read_only_mount

# 2026-12-04 09:03:12.345 UTC
AT_MS = int(datetime(2026, 12, 4, 9, 3, 12, 345_000, tzinfo=UTC).timestamp() * 1000)


def set_flag(store: Path, at_ms: int, *, actor: str = "alice", reason: str = "measure") -> None:
    engine = make_engine(f"sqlite:///{store}")
    try:
        FlagService(SqlFlagStore(engine), lambda: at_ms).set_mode("manual", "shadow", actor=actor, reason=reason)
    finally:
        engine.dispose()


@pytest.mark.parametrize(("zone_env", "shown"), [
    ({"BRIDGE_LEGACY_TZ": "Asia/Shanghai"}, "2026-12-04 17:03:12 +08:00"),
    ({"TZ": "America/New_York"}, "2026-12-04 04:03:12 -05:00"),  # no BRIDGE_LEGACY_TZ: the host's zone
])
def test_flags_show_gives_audit_times_in_the_operators_zone_with_the_offset(
        cli: Cli, store: Path, zone_env: dict[str, str], shown: str) -> None:
    set_flag(store, AT_MS)

    result = cli("flags", "show", **zone_env)

    assert result.returncode == 0, result.stderr
    assert shown in result.stdout
    assert str(AT_MS) not in result.stdout and "UTC ms" not in result.stdout


def test_output_off_a_terminal_is_never_wrapped_or_cut(cli: Cli, store: Path) -> None:
    actor = "operator-" + "a" * 110  # the audit keeps 128 characters of an actor and 500 of a reason
    reason = "rollout of the scheduled origin, ticket OPS-1234: " + " ".join(["measure"] * 40)
    markup_like = " [bold]kept as typed[/bold] [/nope]"
    set_flag(store, AT_MS, actor=actor, reason=reason + markup_like)

    shown = cli("flags", "show", COLUMNS="80")  # stdout is a pipe, as under `docker logs`
    status = cli("status", COLUMNS="80")

    assert shown.returncode == 0, shown.stderr
    row = [line for line in shown.stdout.splitlines() if actor in line]
    assert len(row) == 1 and reason + markup_like in row[0], shown.stdout
    assert f"store    sqlite:///{store} (sqlite)" in status.stdout.splitlines()


def test_reconcile_runs_one_pass_without_once_and_still_accepts_it(cli: Cli, store: Path, legacy_dir: Path) -> None:
    plain = cli("reconcile")
    old_script = cli("reconcile", "--once")

    for result in (plain, old_script):
        assert result.returncode == 0, result.stderr
        assert result.stdout.startswith("reconcile: "), result.stdout


@pytest.mark.parametrize("where", ["a file", "under a file", "read-only folder"])
def test_a_report_folder_that_cannot_be_written_is_one_line(cli: Cli, store: Path, legacy_dir: Path,
                                                             tmp_path: Path, where: str) -> None:
    prefix: list[str] = []
    if where == "a file":
        out = tmp_path / "reports.txt"
        out.write_text("keep me")
    elif where == "under a file":
        (tmp_path / "reports.txt").write_text("keep me")
        out = tmp_path / "reports.txt" / "r"
    else:
        folder = tmp_path / "shared"
        folder.mkdir()
        prefix = read_only_mount(folder)
        out = folder / "reports"

    line = one_line_failure(cli("report", "--out", str(out), prefix=prefix))

    assert line.startswith(f"ql-bridge: --out: cannot write the report into {out}: "), line
    if where != "read-only folder":
        assert (tmp_path / "reports.txt").read_text() == "keep me"
