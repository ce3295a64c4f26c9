"""The v2.17–v2.20 2.x double follows the older backend's rules (docs/legacy-2x.md#older-releases), per release."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from legacy_adapters.callbacks import render_status_body
from legacy_adapters.releases import profile_for
from legacy_adapters.testing.datadir import LegacyDataDir, create_legacy_data_dir
from legacy_adapters.testing.older_double import OlderLegacy2xDouble

OLDER = ["2.17.13", "2.18.3", "2.19.2", "2.20.2"]
BEGIN = 1_796_216_401


@pytest.fixture(params=OLDER)
def older(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[OlderLegacy2xDouble, httpx.Client]]:
    data = create_legacy_data_dir(tmp_path / "ql")
    with OlderLegacy2xDouble(data, profile_for(request.param, "test")).start() as double, \
            httpx.Client(base_url=double.url, timeout=10) as client:
        yield double, client


def put(client: httpx.Client, data: LegacyDataDir, path: str, body: bytes) -> httpx.Response:
    return client.put(path, content=body, headers={"Authorization": f"Bearer {data.system_token}",
                                                   "Content-Type": "application/json"})


def status(double: OlderLegacy2xDouble, client: httpx.Client, body: bytes) -> httpx.Response:
    return put(client, double.data_dir, "/open/crons/status", body)


def columns(double: OlderLegacy2xDouble, cron: int) -> tuple[object, ...]:
    row = double.data_dir.cron_row(cron)
    assert row is not None
    return row["status"], row["pid"], row["log_path"], row["last_execution_time"], row["last_running_time"]


def test_only_crontabs_exists_and_the_record_route_is_expresss_404(older) -> None:  # type: ignore[no-untyped-def]
    double, client = older
    tables = {r["name"] for r in double.data_dir.query("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert "Crontabs" in tables and not tables & {"RunningInstances", "CrontabStats"}
    reply = client.post("/open/dashboard/record", json={"ref_id": 1, "code": 0},
                        headers={"Authorization": f"Bearer {double.data_dir.system_token}"})
    assert reply.status_code == 404 and "Cannot POST /open/dashboard/record" in reply.text


def test_a_start_then_a_pidless_end_write_only_crontabs_and_keep_the_starts_pid(older) -> None:  # type: ignore[no-untyped-def]
    double, client = older
    cron = double.data_dir.add_cron("job", "task job.sh", "0 * * * *")
    assert status(double, client, render_status_body(cron, 0, 4321, "job_1/a.log", BEGIN)).content == b'{"code":200}'
    assert columns(double, cron) == (0, 4321, "job_1/a.log", BEGIN, None)
    # status 1 with pid '' (NaN after parseInt) is a 200 that never writes the pid
    assert status(double, client, render_status_body(cron, 1, "", "job_1/a.log", BEGIN, 7)).status_code == 200
    assert columns(double, cron) == (1, 4321, "job_1/a.log", BEGIN, 7)


def test_an_end_of_another_log_path_leaves_status_pid_and_log_path(older) -> None:  # type: ignore[no-untyped-def]
    double, client = older
    cron = double.data_dir.add_cron("job", "task job.sh", "0 * * * *")
    status(double, client, render_status_body(cron, 0, 1, "job_1/new.log", BEGIN + 60))
    status(double, client, render_status_body(cron, 1, 2, "job_1/old.log", BEGIN, 9))
    assert columns(double, cron) == (0, 1, "job_1/new.log", BEGIN, 9)


def test_a_body_with_exit_code_is_refused_and_writes_nothing(older) -> None:  # type: ignore[no-untyped-def]
    double, client = older
    cron = double.data_dir.add_cron("job", "task job.sh", "0 * * * *")
    before = columns(double, cron)
    reply = status(double, client, render_status_body(cron, 1, 5, "job_1/a.log", BEGIN, 3, 0))
    assert reply.status_code == 400
    assert reply.json()["validation"]["body"]["message"] == '"exit_code" is not allowed'
    assert columns(double, cron) == before


def test_unknown_ids_are_skipped(older) -> None:  # type: ignore[no-untyped-def]
    double, client = older
    cron = double.data_dir.add_cron("job", "task job.sh", "0 * * * *")
    body = f'{{"ids":["99999","{cron}"],"status":"0","pid":"8","log_path":"x/y.log"}}'.encode()
    assert status(double, client, body).status_code == 200
    assert columns(double, cron)[:3] == (0, 8, "x/y.log")


def test_run_queues_at_one_half_then_runs_the_child_which_idles_the_row_on_exit(older) -> None:  # type: ignore[no-untyped-def]
    double, client = older
    cron = double.data_dir.add_cron("job", "task job.sh", "0 * * * *")
    assert put(client, double.data_dir, "/open/crons/run", f"[{cron}]".encode()).status_code == 200
    pid, log_path = double.spawned(cron)
    assert columns(double, cron)[:3] == (0, pid, log_path) and log_path.startswith("job_")
    status(double, client, render_status_body(cron, 0, 77, "job_1/other.log", BEGIN))  # another shell of it
    double.child_exited(pid)
    assert columns(double, cron)[:2] == (1, 77)  # idle whatever the log path; pid undefined is not written


def test_a_queued_row_stores_one_half(tmp_path: Path) -> None:
    data = create_legacy_data_dir(tmp_path / "ql")
    double = OlderLegacy2xDouble(data, profile_for("2.19.2", "test"))
    cron = data.add_cron("job", "task job.sh", "0 * * * *")
    double._set_status([cron], double.release.queued_status)
    assert data.cron_row(cron)["status"] == 0.5  # type: ignore[index]


@pytest.mark.parametrize("release, kills", [
    ("2.19.2", [4321]),  # killTask(doc.pid) only: the other shell runs on
    ("2.20.0", [4321, 5555]),  # killAllTasks(command) only: both shells (the row's is among them)
    ("2.20.2", [4321, 5555]),  # killTask(doc.pid), then killAllTasks: each once
])
def test_stop_kills_as_the_release_does_then_idles_the_row(tmp_path: Path, release: str, kills: list[int]) -> None:
    data = create_legacy_data_dir(tmp_path / "ql")
    killed: list[int] = []
    with OlderLegacy2xDouble(data, profile_for(release, "test")).start() as double, \
            httpx.Client(base_url=double.url, timeout=10) as client:
        double.on_kill(lambda _cron, pid: killed.append(pid))
        cron = data.add_cron("job", "task job.sh", "0 * * * *")
        status(double, client, render_status_body(cron, 0, 5555, "job_1/a.log", BEGIN))
        status(double, client, render_status_body(cron, 0, 4321, "job_1/b.log", BEGIN + 1))
        assert put(client, data, "/open/crons/stop", f"[{cron}]".encode()).status_code == 200
    assert sorted(killed) == sorted(kills)
    assert columns(double, cron)[:2] == (1, 4321)


@pytest.mark.parametrize("release, kills", [("2.19.2", False), ("2.20.2", True)])
def test_a_single_instance_fire_kills_the_running_pid_only_from_v2_20(tmp_path: Path, release: str,
                                                                      kills: bool) -> None:
    data = create_legacy_data_dir(tmp_path / "ql")
    double = OlderLegacy2xDouble(data, profile_for(release, "test"))
    killed: list[int] = []
    double.on_kill(lambda _cron, pid: killed.append(pid))
    cron = data.add_cron("job", "task job.sh", "* * * * *", allow_multiple_instances=0, status=0, pid=42)
    assert double.simulate_run_cron(cron) is kills
    assert (killed, data.cron_row(cron)["status"]) == (([42], 1) if kills else ([], 0))  # type: ignore[index]


def test_boot_reset_sets_every_row_idle_and_nothing_else(tmp_path: Path) -> None:
    data = create_legacy_data_dir(tmp_path / "ql")
    double = OlderLegacy2xDouble(data, profile_for("2.18.3", "test"))
    cron = data.add_cron("job", "task job.sh", "0 * * * *", status=0, pid=9, log_path="a/b.log")
    double.simulate_boot_reset()
    assert data.cron_row(cron)["status"] == 1 and data.cron_row(cron)["pid"] == 9  # type: ignore[index]


def test_the_v2_21_release_is_not_this_doubles(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        OlderLegacy2xDouble(create_legacy_data_dir(tmp_path / "ql"), profile_for("2.21.0", "test"))


def test_v2_17_reads_open_tokens_from_the_apps_table_and_answers_in_english(tmp_path: Path) -> None:
    """v2.17 has no keyv cache and no i18n (back/loaders/express.ts, back/services/open.ts at v2.17.13)."""
    data = create_legacy_data_dir(tmp_path / "ql", release="v2.17.13")
    assert not data.keyv_path.exists()
    with OlderLegacy2xDouble(data, profile_for("2.17.13", "test")).start() as double, \
            httpx.Client(base_url=double.url, timeout=10) as client:
        cron = data.add_cron("a", "task a.sh", "0 * * * *")
        assert status(double, client, render_status_body(cron, 0, 7, "a_1/x.log", BEGIN)).status_code == 200
        body = render_status_body(cron, 1, 7, "a_1/x.log", BEGIN, 3)
        expired = client.put("/open/crons/status", content=body,
                             headers={"Authorization": f"Bearer {data.expired_token}"})
        missing = client.put("/open/crons/status", content=body)
        assert (expired.status_code, expired.json()) == (401, {"code": 401, "message": "jwt malformed"})
        assert (missing.status_code, missing.json()) == (
            401, {"code": 401, "message": "No authorization token was found"})
        assert not data.keyv_path.exists()
