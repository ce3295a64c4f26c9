from __future__ import annotations

import base64
import re
import time

import httpx
import pytest

from legacy_adapters.callbacks import render_status_body
from legacy_adapters.testing.datadir import LegacyDataDir
from legacy_adapters.testing.double import Legacy2xDouble, static_asset

from .conftest import PANEL_JWT

LOG = "ql_sample_{id}/2026-07-18-10-00-00-123.log"
BEGIN = 1784340000
ON_DISK_STAMP = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} \+00:00$")


@pytest.fixture
def cron_id(legacy_dir: LegacyDataDir) -> int:
    return legacy_dir.add_cron("sample", "task ql_sample.js", "0 * * * *")


def put_status(client: httpx.Client, headers: dict[str, str], body: bytes) -> httpx.Response:
    return client.put(f"/open/crons/status?t={int(time.time())}", content=body, headers=headers)


def start(
    client: httpx.Client, headers: dict[str, str], cron: int, pid: int = 4321, log: str | None = None
) -> httpx.Response:
    body = render_status_body(cron, 0, pid, log or LOG.format(id=cron), BEGIN)
    return put_status(client, headers, body)


def end(
    client: httpx.Client,
    headers: dict[str, str],
    cron: int,
    pid: int | str = 4321,
    log: str | None = None,
    exit_code: int | None = 0,
    runtime: int = 7,
) -> httpx.Response:
    body = render_status_body(cron, 1, pid, log or LOG.format(id=cron), BEGIN, runtime, exit_code)
    return put_status(client, headers, body)


def test_start_and_end_callbacks_open_and_close_a_running_instance_like_2x(
    client: httpx.Client, shell_headers: dict[str, str], legacy_dir: LegacyDataDir, cron_id: int
) -> None:
    response = start(client, shell_headers, cron_id)
    assert (response.status_code, response.content) == (200, b'{"code":200}')
    assert response.headers["content-type"] == "application/json; charset=utf-8"
    [row] = legacy_dir.instance_rows(cron_id)
    assert (row["pid"], row["log_path"], row["started_at"], row["status"]) == (4321, LOG.format(id=cron_id), BEGIN, 0)
    assert row["finished_at"] is None and row["exit_code"] is None
    cron = legacy_dir.cron_row(cron_id)
    assert cron is not None and (cron["status"], cron["pid"]) == (0, 4321)
    assert ON_DISK_STAMP.match(cron["updatedAt"])

    before = int(time.time())
    assert end(client, shell_headers, cron_id).content == b'{"code":200}'
    [row] = legacy_dir.instance_rows(cron_id)
    assert (row["status"], row["exit_code"]) == (1, 0)
    assert before <= row["finished_at"] <= int(time.time())
    cron = legacy_dir.cron_row(cron_id)
    assert cron is not None
    assert (cron["status"], cron["last_running_time"], cron["last_execution_time"]) == (1, 7, BEGIN)


def test_a_non_zero_exit_code_closes_the_instance_as_error(
    client: httpx.Client, shell_headers: dict[str, str], legacy_dir: LegacyDataDir, cron_id: int
) -> None:
    start(client, shell_headers, cron_id)
    end(client, shell_headers, cron_id, exit_code=3)
    [row] = legacy_dir.instance_rows(cron_id)
    assert (row["status"], row["exit_code"]) == (3, 3)


def test_an_update_sh_end_without_exit_code_finishes_and_keeps_the_old_runtime(
    client: httpx.Client, shell_headers: dict[str, str], legacy_dir: LegacyDataDir, cron_id: int
) -> None:
    start(client, shell_headers, cron_id)
    end(client, shell_headers, cron_id, exit_code=7)  # an earlier run left runtime 7
    start(client, shell_headers, cron_id, pid=99)
    end(client, shell_headers, cron_id, pid=99, exit_code=None, runtime=0)
    rows = legacy_dir.instance_rows(cron_id)
    assert (rows[1]["status"], rows[1]["exit_code"]) == (1, None)
    cron = legacy_dir.cron_row(cron_id)
    assert cron is not None and cron["last_running_time"] == 7


def test_an_end_with_another_log_path_closes_the_instance_but_leaves_the_cron_running(
    client: httpx.Client, shell_headers: dict[str, str], legacy_dir: LegacyDataDir, cron_id: int
) -> None:
    start(client, shell_headers, cron_id, log="new/run.log")
    assert end(client, shell_headers, cron_id, log="old/run.log").content == b'{"code":200}'
    cron = legacy_dir.cron_row(cron_id)
    assert cron is not None
    assert (cron["status"], cron["log_path"], cron["last_running_time"]) == (0, "new/run.log", 7)
    assert legacy_dir.instance_rows(cron_id)[0]["status"] == 1  # closed regardless of log_path


def test_the_mismatch_rule_leaks_into_later_ids_of_the_same_request(
    client: httpx.Client, shell_headers: dict[str, str], legacy_dir: LegacyDataDir
) -> None:
    first = legacy_dir.add_cron("a", "task a.js", "0 * * * *", log_path="a/old.log", status=0)
    second = legacy_dir.add_cron("b", "task b.js", "0 * * * *", log_path="b/x.log", status=0)
    body = (
        f'{{"ids":["{first}","{second}"],"status":"1","pid":"5","log_path":"b/x.log",'
        f'"last_execution_time":{BEGIN},"last_running_time":3}}'
    ).encode()
    assert put_status(client, shell_headers, body).content == b'{"code":200}'
    row = legacy_dir.cron_row(second)
    # b's log_path matches, but a's mismatch already dropped status/pid/log_path.
    assert row is not None and (row["status"], row["last_running_time"]) == (0, 3)


def test_duplicate_start_callbacks_create_two_rows_and_one_end_closes_both(
    client: httpx.Client, shell_headers: dict[str, str], legacy_dir: LegacyDataDir, cron_id: int
) -> None:
    start(client, shell_headers, cron_id)
    start(client, shell_headers, cron_id)
    assert [r["status"] for r in legacy_dir.instance_rows(cron_id)] == [0, 0]
    end(client, shell_headers, cron_id)
    assert [r["status"] for r in legacy_dir.instance_rows(cron_id)] == [1, 1]


def test_an_unknown_cron_id_answers_200_and_changes_nothing(
    client: httpx.Client, shell_headers: dict[str, str], legacy_dir: LegacyDataDir
) -> None:
    assert start(client, shell_headers, 999).content == b'{"code":200}'
    assert end(client, shell_headers, 999, pid="").content == b'{"code":200}'
    assert legacy_dir.query("SELECT * FROM RunningInstances") == []


def test_an_end_with_the_empty_pid_placeholder_fails_500_before_touching_crontabs(
    client: httpx.Client, shell_headers: dict[str, str], legacy_dir: LegacyDataDir, cron_id: int
) -> None:
    start(client, shell_headers, cron_id)
    response = end(client, shell_headers, cron_id, pid="")
    assert response.status_code == 500
    assert response.content == (b'{"code":500,"message":"WHERE parameter \\"pid\\" has invalid \\"undefined\\" value"}')
    cron = legacy_dir.cron_row(cron_id)
    assert cron is not None and cron["status"] == 0
    assert legacy_dir.instance_rows(cron_id)[0]["status"] == 0


def test_missing_ids_fail_500_with_ids_is_not_iterable(client: httpx.Client, shell_headers: dict[str, str]) -> None:
    response = put_status(client, shell_headers, b'{"status":"0"}')
    assert (response.status_code, response.content) == (500, b'{"code":500,"message":"ids is not iterable"}')


def test_a_callback_without_last_execution_time_writes_zero_and_starts_at_now(
    client: httpx.Client, shell_headers: dict[str, str], legacy_dir: LegacyDataDir, cron_id: int
) -> None:
    before = int(time.time())
    body = f'{{"ids":["{cron_id}"],"status":"0","pid":"8","log_path":"x.log"}}'.encode()
    put_status(client, shell_headers, body)
    cron = legacy_dir.cron_row(cron_id)
    assert cron is not None and cron["last_execution_time"] == 0
    assert before <= legacy_dir.instance_rows(cron_id)[0]["started_at"] <= int(time.time())


def test_validation_and_malformed_json_answer_2x_400_bytes(
    client: httpx.Client, shell_headers: dict[str, str], cron_id: int
) -> None:
    response = put_status(client, shell_headers, b'{"ids":["1"],"status":0}')
    assert (response.status_code, response.content) == (
        400,
        (
            b'{"statusCode":400,"error":"Bad Request","message":"Validation failed","validation":'
            b'{"body":{"source":"body","keys":["status"],"message":"\\"status\\" must be a string"}}}'
        ),
    )
    extra = put_status(client, shell_headers, b'{"status":"0","execution_id":"x"}')
    assert b'\\"execution_id\\" is not allowed' in extra.content
    malformed = client.put(
        "/open/crons/status", content=b'{"ids":', headers={"Content-Type": "application/json"}
    )  # body-parser runs before authentication
    assert (malformed.status_code, malformed.content) == (400, b'{"code":400,"message":"Unexpected end of JSON input"}')


@pytest.mark.parametrize(
    ("path", "token", "message"),
    [
        ("/open/crons/status", None, "请先登录"),
        ("/open/crons/status", "expired", "Token 已失效"),
        ("/open/crons/status", "limited", "暂无权限"),
        ("/api/crons/status", None, "No authorization token was found"),
        ("/api/crons/status", "system", "jwt malformed"),
    ],
)
def test_unauthorized_calls_get_the_2x_401_bodies(
    client: httpx.Client, legacy_dir: LegacyDataDir, path: str, token: str | None, message: str
) -> None:
    tokens = {
        "expired": legacy_dir.expired_token,
        "limited": legacy_dir.limited_token,
        "system": legacy_dir.system_token,
    }
    headers = {"Authorization": f"Bearer {tokens[token]}"} if token else {}
    response = client.put(path, content=b'{"ids":[],"status":"0"}', headers=headers)
    assert response.status_code == 401
    assert response.content == ('{"code":401,"message":"' + message + '"}').encode()


def test_the_api_route_accepts_the_panel_jwt(client: httpx.Client, legacy_dir: LegacyDataDir, cron_id: int) -> None:
    response = client.put(
        "/api/crons/status",
        content=render_status_body(cron_id, 0, 1, "l", 1),
        headers={"Authorization": f"Bearer {PANEL_JWT}", "Content-Type": "application/json"},
    )
    assert response.content == b'{"code":200}' and len(legacy_dir.instance_rows(cron_id)) == 1


def test_a_mixed_case_prefix_answers_invalid_path_format(client: httpx.Client) -> None:
    response = client.put("/Open/crons/status", content=b"{}")
    assert (response.status_code, response.content) == (400, b'{"code":400,"message":"Invalid path format"}')


def test_run_queues_then_run_single_sets_running_pid_and_log_path(
    client: httpx.Client, shell_headers: dict[str, str], double: Legacy2xDouble, legacy_dir: LegacyDataDir, cron_id: int
) -> None:
    assert (
        client.put(
            "/open/crons/run", json=[str(cron_id)], headers={"Authorization": shell_headers["Authorization"]}
        ).content
        == b'{"code":200}'
    )
    assert legacy_dir.cron_row(cron_id)["status"] == 3  # type: ignore[index]
    assert double.simulate_run_single(cron_id, 4321, "ql_sample_1/run.log")
    row = legacy_dir.cron_row(cron_id)
    assert row is not None and (row["status"], row["pid"], row["log_path"]) == (0, 4321, "ql_sample_1/run.log")
    assert not double.simulate_run_single(cron_id, 1, "again.log")  # no longer queued
    assert legacy_dir.instance_rows(cron_id) == []  # only the shell's callback creates one


def test_stop_marks_running_instances_stopped_and_the_cron_idle_keeping_pid(
    client: httpx.Client, shell_headers: dict[str, str], legacy_dir: LegacyDataDir, cron_id: int
) -> None:
    start(client, shell_headers, cron_id)
    client.put("/open/crons/stop", json=[cron_id], headers={"Authorization": shell_headers["Authorization"]})
    [row] = legacy_dir.instance_rows(cron_id)
    assert row["status"] == 2 and row["finished_at"] is not None and row["exit_code"] is None
    cron = legacy_dir.cron_row(cron_id)
    assert cron is not None and (cron["status"], cron["pid"]) == (1, 4321)
    end(client, shell_headers, cron_id, exit_code=143)  # the trap's late end matches nothing
    assert legacy_dir.instance_rows(cron_id)[0]["status"] == 2


def test_dashboard_record_upserts_the_daily_row_in_milliseconds(
    client: httpx.Client, shell_headers: dict[str, str], legacy_dir: LegacyDataDir
) -> None:
    auth = {"Authorization": shell_headers["Authorization"]}
    for code, elapsed in ((0, 2), (1, 5)):
        response = client.post(
            "/open/dashboard/record", headers=auth, json={"ref_id": 1, "code": code, "elapsed": elapsed}
        )
        assert response.content == b'{"code":200}'
    [stats] = legacy_dir.query("SELECT * FROM CrontabStats")
    assert (stats["run_count"], stats["success_count"], stats["fail_count"]) == (2, 1, 1)
    assert (stats["total_time"], stats["max_time"]) == (7000, 5000)
    missing = client.post("/open/dashboard/record", headers=auth, json={"code": 0})
    assert (missing.status_code, missing.content) == (200, b'{"code":400,"message":"ref_id required"}')


def test_injected_failures_answer_500_like_sequelize_then_recover(
    client: httpx.Client, shell_headers: dict[str, str], double: Legacy2xDouble, legacy_dir: LegacyDataDir, cron_id: int
) -> None:
    double.fail_next_status_calls(1)
    failed = start(client, shell_headers, cron_id)
    assert failed.status_code == 500 and failed.json()["code"] == 400
    assert legacy_dir.instance_rows(cron_id) == []
    assert start(client, shell_headers, cron_id).content == b'{"code":200}'


def test_other_paths_echo_the_request_and_static_assets_are_byte_exact(
    client: httpx.Client, double: Legacy2xDouble
) -> None:
    body = bytes(range(256))
    response = client.post("/api/envs?searchValue=a%20b&t=1", content=body, headers={"X-Request-Id": "r-1"})
    echoed = response.json()
    assert (echoed["method"], echoed["path"], echoed["query"]) == ("POST", "/api/envs", "searchValue=a%20b&t=1")
    assert ["X-Request-Id", "r-1"] in echoed["headers"]
    assert base64.b64decode(echoed["body_b64"]) == body
    asset = client.get("/static/build/app.js")
    assert asset.content == static_asset("build/app.js")
    assert not asset.headers["content-type"].startswith("application/json")
    assert client.get("/api/health").content == b'{"code":200,"data":{"status":"ok"}}'
    recorded = double.requests()[0]
    assert (recorded.method, recorded.raw_query, recorded.body) == ("POST", "searchValue=a%20b&t=1", body)
    assert recorded.header("x-request-id") == "r-1"


def test_concurrent_status_callbacks_write_one_at_a_time_as_2xs_single_connection_does(
    double: Legacy2xDouble, shell_headers: dict[str, str], legacy_dir: LegacyDataDir,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Sequelize's SQLite connection manager runs every query outside a transaction on one 'default' connection,
    and CronService.status opens none: 2.x applies concurrent callbacks one after another and never meets its own
    lock. A double that gave each request a connection of its own made them wait on each other's locks."""
    import threading

    from legacy_adapters.testing import double as double_module

    crons = [legacy_dir.add_cron(f"c{i}", f"task c{i}.js", "0 * * * *") for i in range(8)]
    open_now, most = [0], [0]
    counting = threading.Lock()
    plain_connect = double_module.connect

    class Counted:
        def __init__(self, path: object) -> None:
            self._conn = plain_connect(path)  # type: ignore[arg-type]
            with counting:
                open_now[0] += 1
                most[0] = max(most[0], open_now[0])
            time.sleep(0.02)  # long enough for the other requests to arrive while this one writes

        def __getattr__(self, name: str) -> object:
            return getattr(self._conn, name)

        def close(self) -> None:
            with counting:
                open_now[0] -= 1
            self._conn.close()

    monkeypatch.setattr(double_module, "connect", Counted)
    answers: list[int] = []

    def send(cron: int) -> None:
        with httpx.Client(base_url=double.url, timeout=10.0) as http:
            answers.append(start(http, shell_headers, cron, pid=5000 + cron).status_code)

    senders = [threading.Thread(target=send, args=(cron,)) for cron in crons]
    for sender in senders:
        sender.start()
    for sender in senders:
        sender.join()

    assert answers == [200] * len(crons)
    assert most[0] == 1
    assert all(len(legacy_dir.instance_rows(cron)) == 1 for cron in crons)
