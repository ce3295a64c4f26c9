"""`ql-bridge doctor` on the releases before v2.21: the HTTP check asks what that release's backend serves, the
time zone is read from the Crontabs rows, and the backend check picks the install the bridge fronts on a host
with two, proposing the backend's own port (never nginx's QlPort)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests.integration.old_releases import (
    PreV219BackendDouble,
    backend_process,
    line_of,
    make_install,
    run_doctor,
    shell_log_name,
)


def test_on_v2_18_the_http_check_asks_the_backend_what_it_serves_not_public_js_health(tmp_path: Path) -> None:
    install = make_install(tmp_path / "ql", "v2.18.3")
    with PreV219BackendDouble("2.18.3") as backend:
        result = run_doctor(tmp_path, install, backend.url)

    line = line_of(result, "2.x over HTTP")
    assert line.startswith("ok") and "/api/system answers 200" in line, result.stdout
    assert "public.js" in line and "/api/health" in line  # says why it is not /api/health
    assert backend.paths == ["/api/system"]


def test_on_v2_19_the_http_check_stays_the_backends_own_health_route(tmp_path: Path) -> None:
    install = make_install(tmp_path / "ql", "v2.19.2")
    with PreV219BackendDouble("2.19.2") as backend:  # answers /api/health 401: the check must have asked it
        result = run_doctor(tmp_path, install, backend.url)

    assert backend.paths == ["/api/health"]
    assert line_of(result, "2.x over HTTP").startswith("fail")


@pytest.mark.parametrize("tag", ["v2.17.8", "v2.17.13", "v2.18.1", "v2.18.3", "v2.19.2", "v2.20.2"])
def test_before_v2_21_the_time_zone_is_read_from_the_crontabs_log_path_and_begin(tmp_path: Path, tag: str) -> None:
    install = make_install(tmp_path / "ql", tag)
    for cron in range(3):  # as the start callback leaves each row: its log_path and the same begin in unix s
        name, begin = shell_log_name(tag, "Asia/Shanghai")
        install.data.add_cron(f"job {cron}", f"task job_{cron}.js", "0 * * * *", log_path=f"job_{cron}_1/{name}",
                              last_execution_time=begin, last_running_time=2)
    install.data.add_cron("never ran", "task idle.js", "0 * * * *")

    wrong = run_doctor(tmp_path, install, "http://127.0.0.1:9", BRIDGE_LEGACY_TZ="UTC")
    right = run_doctor(tmp_path, install, "http://127.0.0.1:9", BRIDGE_LEGACY_TZ="Asia/Shanghai")

    assert line_of(wrong, "time zone").startswith("fail") and "UTC+08:00" in line_of(wrong, "time zone")
    assert line_of(right, "time zone").startswith("ok"), right.stdout


def test_two_installs_on_one_host_the_backend_check_takes_the_one_serving_the_data_dir(tmp_path: Path) -> None:
    ours = make_install(tmp_path / "ql", "v2.18.3")
    other = make_install(tmp_path / "other", "v2.18.3")
    with PreV219BackendDouble("2.18.3") as backend:
        # Ours: pm2's relative `static/build/app.js` from the install's cwd, no QL_DIR (2.x takes it from the
        # script's place), QlPort 5700 (nginx's), BACK_PORT from the install's .env, as the image copies it.
        (ours.root / ".env").write_text(f"UPDATE_PORT=5300\nPUBLIC_PORT=5400\nBACK_PORT={backend.port}\nPORT=5700\n")
        # The other install: its own data directory through QL_DATA_DIR and another backend port.
        with backend_process("static/build/app.js", {"QlPort": "5700"}, ours.root) as our_pid, \
                backend_process(str(other.root / "static" / "build" / "app.js"),
                                {"QlPort": "5800", "BACK_PORT": "5801", "QL_DATA_DIR": str(other.data.root)},
                                tmp_path) as other_pid:
            result = run_doctor(tmp_path, ours, backend.url)

    line = line_of(result, "seam: 2.x's backend")
    assert line.startswith("ok") and f"listens on {backend.port}" in line, result.stdout
    assert f"pid {other_pid}" in line and "5801" in line and "another 2.x install" in line
    assert f"pid {our_pid}" not in line


def test_before_v2_20_the_proposed_url_is_the_backends_port_not_nginxs_qlport(tmp_path: Path) -> None:
    install = make_install(tmp_path / "ql", "v2.18.3")
    with PreV219BackendDouble("2.18.3") as backend, \
            backend_process(str(install.root / "static" / "build" / "app.js"),
                            {"QlPort": "5700", "QL_DIR": str(install.root)}, tmp_path):
        result = run_doctor(tmp_path, install, backend.url)  # no .env here: the backend's default, 5600

    lines = result.stdout.splitlines()
    line = line_of(result, "seam: 2.x's backend")
    assert line.startswith("fail") and "listens on 5600" in line, result.stdout
    assert lines[lines.index(line) + 1].strip() == "fix: set BRIDGE_LEGACY_URL=http://127.0.0.1:5600"


def test_the_log_names_the_shells_make_carry_the_zones_offset() -> None:
    """The evidence the time-zone test stands on: the tag's own functions name the log in local time and send the
    same moment in unix seconds."""
    name, begin = shell_log_name("v2.18.3", "Asia/Shanghai")
    local = datetime.strptime(name.removesuffix(".log")[:19], "%Y-%m-%d-%H-%M-%S").replace(tzinfo=UTC)
    assert (local - datetime.fromtimestamp(begin, UTC)).total_seconds() == 8 * 3600
