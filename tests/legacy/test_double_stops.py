"""The double's stops as 2.x's code does them (back/services/cron.ts stop / stopInstance, back/shared/runCron.ts,
back/loaders/initData.ts): kill first (a hook, the double has no processes), then the rows, then the answer."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from legacy_adapters.callbacks import render_status_body
from legacy_adapters.testing.datadir import LegacyDataDir
from legacy_adapters.testing.double import Legacy2xDouble
from tests.legacy.conftest import PANEL_JWT

BEGIN = 1_796_216_401


def status(client: httpx.Client, headers: dict[str, str], cron: int, state: int, pid: int, log: str,
           exit_code: int | None = None) -> None:
    body = render_status_body(cron, state, pid, log, BEGIN, 3 if state else 0, exit_code)
    assert client.put("/open/crons/status", content=body, headers=headers).content == b'{"code":200}'


def new_cron(legacy_dir: LegacyDataDir, **cols: Any) -> int:
    return legacy_dir.add_cron(f"job {len(legacy_dir.query('SELECT id FROM Crontabs'))}", "task job.sh",
                               "*/5 * * * * *", **cols)


def test_stop_kills_the_crons_pid_then_each_running_instance_then_marks_the_rows_then_answers(
        client: httpx.Client, double: Legacy2xDouble, legacy_dir: LegacyDataDir, shell_headers: dict[str, str]
) -> None:
    cron = new_cron(legacy_dir)
    status(client, shell_headers, cron, 0, 11, "a.log")
    status(client, shell_headers, cron, 0, 12, "b.log")  # Crontabs.pid is now 12
    seen: list[Any] = []
    double.on_kill(lambda c, pid: seen.append(("kill", c, pid, [r["status"] for r in legacy_dir.instance_rows(c)])))
    double.on_stop_answer(lambda: seen.append(("answer", [r["status"] for r in legacy_dir.instance_rows(cron)])))

    reply = client.put("/open/crons/stop", json=[cron], headers={"Authorization": shell_headers["Authorization"]})

    assert reply.content == b'{"code":200}'
    assert seen == [("kill", cron, 12, [0, 0]), ("kill", cron, 11, [0, 0]), ("answer", [2, 2])]


def test_an_end_sent_from_the_kill_closes_the_row_as_error_and_the_stop_passes_it_by(
        client: httpx.Client, double: Legacy2xDouble, legacy_dir: LegacyDataDir, shell_headers: dict[str, str]
) -> None:
    cron = new_cron(legacy_dir)
    status(client, shell_headers, cron, 0, 21, "a.log")
    double.on_kill(lambda c, pid: status(client, shell_headers, c, 1, pid, "a.log", 143))  # the trap, at once

    client.put("/api/crons/stop", json=[cron], headers={"Authorization": f"Bearer {PANEL_JWT}"})

    (row,) = legacy_dir.instance_rows(cron)
    assert (row["status"], row["exit_code"]) == (3, 143)  # error: the stop's update matched nothing
    assert legacy_dir.cron_row(cron)["status"] == 1  # type: ignore[index]


@pytest.mark.parametrize("prefix", ["/open", "/api"])
def test_stop_instance_answers_200_either_way_with_2xs_bodies(
        client: httpx.Client, double: Legacy2xDouble, legacy_dir: LegacyDataDir, shell_headers: dict[str, str],
        prefix: str) -> None:
    cron = new_cron(legacy_dir, allow_multiple_instances=1)
    status(client, shell_headers, cron, 0, 31, "a.log")
    status(client, shell_headers, cron, 0, 32, "b.log")
    first, second = (row["id"] for row in legacy_dir.instance_rows(cron))
    killed: list[int] = []
    double.on_kill(lambda _c, pid: killed.append(pid))
    auth = {"Authorization": f"Bearer {PANEL_JWT if prefix == '/api' else legacy_dir.system_token}"}

    stopped = client.post(f"{prefix}/crons/999/instances/{first}/stop", headers=auth)  # :id is never checked

    assert (stopped.status_code, stopped.content) == (200, '{"code":200,"message":"实例已停止"}'.encode())
    assert killed == [31]
    rows = legacy_dir.instance_rows(cron)
    assert [(r["status"], r["exit_code"]) for r in rows] == [(2, 143), (0, None)] and rows[0]["finished_at"]
    assert legacy_dir.cron_row(cron)["status"] == 0  # type: ignore[index]  # another instance still runs
    client.post(f"{prefix}/crons/{cron}/instances/{second}/stop", headers=auth)
    assert legacy_dir.cron_row(cron)["status"] == 1  # type: ignore[index]  # the last one: idle

    again = client.post(f"{prefix}/crons/{cron}/instances/{second}/stop", headers=auth)
    assert (again.status_code, again.content) == (200, '{"code":400,"message":"实例不存在或已停止"}'.encode())
    assert killed == [31, 32]


def test_stop_instance_overwrites_the_error_the_trap_wrote_first(
        client: httpx.Client, double: Legacy2xDouble, legacy_dir: LegacyDataDir, shell_headers: dict[str, str]
) -> None:
    cron = new_cron(legacy_dir)
    status(client, shell_headers, cron, 0, 41, "a.log")
    (row,) = legacy_dir.instance_rows(cron)
    double.on_kill(lambda c, pid: status(client, shell_headers, c, 1, pid, "a.log", 143))

    client.post(f"/open/crons/{cron}/instances/{row['id']}/stop",
                headers={"Authorization": shell_headers["Authorization"]})

    (row,) = legacy_dir.instance_rows(cron)
    assert (row["status"], row["exit_code"]) == (2, 143)  # update where {id}: whatever the end wrote


def test_stop_instance_params_go_through_joi_number(client: httpx.Client, legacy_dir: LegacyDataDir) -> None:
    auth = {"Authorization": f"Bearer {legacy_dir.system_token}"}
    reply = client.post("/open/crons/1/instances/abc/stop", headers=auth)
    assert reply.status_code == 400
    assert reply.json()["validation"] == {"params": {"source": "params", "keys": ["instanceId"],
                                                     "message": '"instanceId" must be a number'}}


def test_run_cron_replaces_only_a_single_instance_cron_that_runs(
        client: httpx.Client, double: Legacy2xDouble, legacy_dir: LegacyDataDir, shell_headers: dict[str, str]
) -> None:
    single, multi, upgraded = (new_cron(legacy_dir, allow_multiple_instances=0),
                               new_cron(legacy_dir, allow_multiple_instances=1), new_cron(legacy_dir))
    killed: list[tuple[int, int]] = []
    double.on_kill(lambda c, pid: killed.append((c, pid)))
    assert not double.simulate_run_cron(single)  # idle, no pid: nothing to kill
    for cron, pid in ((single, 51), (multi, 52), (upgraded, 53)):
        status(client, shell_headers, cron, 0, pid, f"{pid}.log")

    assert double.simulate_run_cron(single)
    assert not double.simulate_run_cron(multi) and not double.simulate_run_cron(upgraded)  # NULL acts as multi

    assert killed == [(single, 51)]
    (row,) = legacy_dir.instance_rows(single)
    assert (row["status"], row["exit_code"]) == (2, None) and row["finished_at"] is not None
    cron = legacy_dir.cron_row(single)
    assert cron is not None and (cron["status"], cron["pid"]) == (1, 51)  # pid: undefined is a no-op
    assert [r["status"] for r in legacy_dir.instance_rows(multi)] == [0]


def test_boot_reset_stops_running_instances_without_finish_time_or_exit_code(
        client: httpx.Client, double: Legacy2xDouble, legacy_dir: LegacyDataDir, shell_headers: dict[str, str]
) -> None:
    cron = new_cron(legacy_dir)
    status(client, shell_headers, cron, 0, 61, "a.log")
    status(client, shell_headers, cron, 1, 61, "a.log", 0)
    status(client, shell_headers, cron, 0, 62, "b.log")

    double.simulate_boot_reset()

    assert [(r["status"], r["finished_at"] is None, r["exit_code"]) for r in legacy_dir.instance_rows(cron)] == [
        (1, False, 0), (2, True, None)]
    assert legacy_dir.cron_row(cron)["status"] == 1  # type: ignore[index]


def test_stop_instance_answers_in_the_installs_language_as_2xs_t_does(legacy_dir: LegacyDataDir) -> None:
    with Legacy2xDouble(legacy_dir, panel_token=PANEL_JWT, lang="en") as english, \
            httpx.Client(base_url=english.url, timeout=10) as client:
        headers = {"Authorization": f"Bearer {PANEL_JWT}"}
        missing = client.post("/api/crons/1/instances/999999/stop", headers=headers)

        assert (missing.status_code, missing.json()) == (200, {"code": 400,
                                                               "message": "Instance does not exist or stopped"})
