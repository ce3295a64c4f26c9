"""Operating a live bridge: flags flipped with an execution in flight, the admin endpoint, the CLI's
answers to bad input, restart recovery after a crash, and metrics labels that never carry ids."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

import httpx
import pytest

from bridge.cli.demo import CURL_HEADERS, bridge_process, free_port, serve_env
from bridge.storage.engine import make_engine
from bridge.storage.migrate import upgrade
from bridge.storage.reconcile_queries import SqlReconcileStore
from legacy_adapters.callbacks import log_path_digest, render_status_body
from legacy_adapters.testing.datadir import LegacyDataDir, create_legacy_data_dir
from legacy_adapters.testing.double import Legacy2xDouble
from tests.integration.legacy_world import BEGIN, live_shell  # BEGIN matches "0 * * * *": scheduled_system


@dataclass
class Site:
    env: dict[str, str]
    url: str
    data: LegacyDataDir
    store: SqlReconcileStore

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "bridge.cli", *args], env=self.env, capture_output=True,
                              text=True, timeout=60)

    def status(self, body: bytes, url: str | None = None) -> httpx.Response:
        headers = {**CURL_HEADERS, "Authorization": f"Bearer {self.data.system_token}"}
        return httpx.put(f"{url or self.url}/open/crons/status?t=1", content=body, headers=headers, timeout=10)

    def run(self, cron: int, pid: int, log: str) -> dict[str, object] | None:
        key = f"legacy:{cron}:{pid}:{log_path_digest(log)}:{BEGIN * 1000}"
        return next((asdict(row) for row in self.store.runs_by_keys([key]).values()), None)


@pytest.fixture
def site(tmp_path: Path) -> Iterator[tuple[Site, Legacy2xDouble]]:
    data = create_legacy_data_dir(tmp_path / "ql")
    store_url = f"sqlite:///{tmp_path / 'bridge.sqlite'}"
    engine = make_engine(store_url)
    upgrade(engine)
    port = free_port()
    with Legacy2xDouble(data).start() as double:
        env = serve_env(port, double.url, data.root, store_url, origins="scheduled_system,manual",
                        BRIDGE_SHADOW_BUDGET_MS="2000", BRIDGE_DATA_DIR=str(tmp_path))
        yield Site(env, f"http://127.0.0.1:{port}", data, SqlReconcileStore(engine)), double
    engine.dispose()


def test_flipping_a_flag_affects_only_new_executions(site: tuple[Site, Legacy2xDouble]) -> None:
    s, _ = site
    cron = s.data.add_cron("hourly", "task h.sh", "0 * * * *")
    with bridge_process(s.env, s.url):
        s.status(render_status_body(cron, 0, 101, "in-flight.log", BEGIN))
        flipped = s.cli("flags", "set", "scheduled_system", "off", "--actor", "ops", "--reason", "rollback drill")
        assert flipped.returncode == 0, flipped.stderr
        time.sleep(1.2)  # the bridge re-reads flags at most once a second
        s.status(render_status_body(cron, 1, 101, "in-flight.log", BEGIN, 3, 0))
        s.status(render_status_body(cron, 0, 102, "after-flip.log", BEGIN))
    in_flight = s.run(cron, 101, "in-flight.log")
    assert in_flight is not None and (in_flight["status"], in_flight["mode"]) == ("succeeded", "shadow")
    assert s.run(cron, 102, "after-flip.log") is None  # accepted under off: not recorded


def test_the_admin_endpoint_needs_the_admin_token_and_audits_changes(site: tuple[Site, Legacy2xDouble]) -> None:
    s, double = site
    with bridge_process(s.env, s.url):
        assert httpx.get(f"{s.url}/bridge/flags").json()["error"]["code"] == "ADMIN_DISABLED"
        token = s.cli("flags", "admin-token").stdout.strip()
        assert len(token) >= 32
        assert httpx.get(f"{s.url}/bridge/flags", headers={"Authorization": "Bearer nope"}).status_code == 401
        auth = {"Authorization": f"Bearer {token}"}
        shown = httpx.get(f"{s.url}/bridge/flags", headers=auth).json()
        assert shown["modes"]["scheduled_system"] == "shadow"  # seeded from BRIDGE_SHADOW_ORIGINS
        changed = httpx.put(f"{s.url}/bridge/flags/boot", headers=auth,
                            json={"mode": "shadow", "actor": "alice", "reason": "measure boot runs"})
        assert changed.status_code == 200 and changed.json()["new"] == "shadow"
        refused = httpx.put(f"{s.url}/bridge/flags/boot", headers=auth,
                            json={"mode": "primary", "actor": "alice", "reason": "go"})
        assert refused.status_code == 409 and refused.json()["error"]["code"] == "PROMOTION_REFUSED"
        assert httpx.get(f"{s.url}/bridge/flags", headers=auth).json()["audit"][0]["actor"] == "alice"
    assert not [r for r in double.requests() if r.path.startswith("/bridge")]  # never forwarded to 2.x


@pytest.mark.parametrize("args, needle", [
    (["flags", "set", "nightly", "shadow", "--actor", "a", "--reason", "r"], "unknown origin"),
    (["flags", "set", "manual", "sideways", "--actor", "a", "--reason", "r"], "unknown mode"),
    (["flags", "set", "manual", "shadow", "--reason", "r"], "actor and a reason"),
    (["flags", "set", "manual", "shadow", "--actor", "a"], "actor and a reason"),
])
def test_bad_flag_commands_answer_one_line_and_change_nothing(site: tuple[Site, Legacy2xDouble], args: list[str],
                                                              needle: str) -> None:
    s, _ = site
    result = s.cli(*args)
    assert result.returncode != 0 and needle in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert "manual" in s.cli("flags", "show").stdout and "→" not in s.cli("flags", "show").stdout


@contextmanager
def legacy_backend_in_sight(visible: bool) -> Iterator[None]:
    """2.x's Node backend as `ql-bridge serve` finds it in /proc when it shares 2.x's pid namespace (a stand-in
    whose command line ends in 2.x's app.js), or nothing of 2.x, as from another pid namespace."""
    if not visible:
        yield
        return
    stand_in = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", "/ql/static/build/app.js"])
    try:
        yield
    finally:
        stand_in.kill()
        stand_in.wait()


@pytest.mark.parametrize(("legacy_visible", "unprovable_after"), [(True, "lost"), (False, "running")],
                         ids=["shared_pid_namespace", "own_pid_namespace"])
def test_a_crashed_bridge_checks_every_unfinished_run_on_restart(site: tuple[Site, Legacy2xDouble],
                                                                 legacy_visible: bool, unprovable_after: str) -> None:
    s, double = site
    cron = s.data.add_cron("hourly", "task h.sh", "0 * * * *")
    with live_shell() as shell, legacy_backend_in_sight(legacy_visible):
        with bridge_process(s.env, s.url) as proc:
            s.status(render_status_body(cron, 0, shell.pid, "alive.log", BEGIN))
            s.status(render_status_body(cron, 0, 4_000_001, "unprovable.log", BEGIN))
            s.status(render_status_body(cron, 0, 202, "ended.log", BEGIN))
            os.killpg(proc.pid, signal.SIGKILL)  # crash: master and workers, no shutdown of any kind
            proc.wait()
        s.status(render_status_body(cron, 1, 202, "ended.log", BEGIN, 3, 0), url=double.url)  # went around it
        with bridge_process(s.env, s.url):
            alive, unprovable, ended = (s.run(cron, shell.pid, "alive.log"), s.run(cron, 4_000_001, "unprovable.log"),
                                        s.run(cron, 202, "ended.log"))
    assert alive is not None and alive["status"] == "running"
    # 2.x's row says running: only where 2.x's processes are visible can the shell be found unprovable.
    assert unprovable is not None and unprovable["status"] == unprovable_after
    assert ended is not None and ended["status"] == "succeeded"


def test_metrics_labels_never_carry_ids_or_commands(site: tuple[Site, Legacy2xDouble]) -> None:
    s, _ = site
    cron = s.data.add_cron("secret", "task secret_job_54321.sh", "0 * * * *")
    with bridge_process(s.env, s.url):
        s.status(render_status_body(cron, 0, 777, "secret_job_54321/x.log", BEGIN))
        s.status(render_status_body(cron, 1, 777, "secret_job_54321/x.log", BEGIN, 2, 3))
        s.status(render_status_body(99999, 0, 1, "ghost.log", BEGIN))
        body = httpx.get(f"{s.url}/metrics").text
    run = s.run(cron, 777, "secret_job_54321/x.log")
    assert run is not None
    labels = " ".join(re.findall(r"\{([^}]*)\}", body))
    for forbidden in (str(run["id"]), "secret_job", "99999", "777", s.data.system_token):
        assert forbidden not in labels
    assert 'ql_bridge_shadow_run_create_total{origin="scheduled_system"} 1.0' in body


def wait_for(check, timeout_s: float = 10.0):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError("condition not met in time")


def test_rollback_drill_promote_run_demote_with_one_in_flight(site: tuple[Site, Legacy2xDouble]) -> None:
    s, double = site
    s.env["BRIDGE_GATE_MIN_EXECUTIONS"] = "5"
    cron = s.data.add_cron("hourly", "task h.sh", "0 * * * *")
    statuses = lambda: len([r for r in double.requests() if r.path == "/open/crons/status"])  # noqa: E731
    with bridge_process(s.env, s.url):
        for pid in range(300, 306):  # measured in shadow first
            s.status(render_status_body(cron, 0, pid, f"h/{pid}.log", BEGIN))
            s.status(render_status_body(cron, 1, pid, f"h/{pid}.log", BEGIN, 2, 0))
        report = s.cli("report", "--origin", "scheduled_system", "--out", str(Path(s.env["BRIDGE_DATA_DIR"]) / "r"))
        assert report.returncode == 0, report.stderr
        promoted = s.cli("flags", "set", "scheduled_system", "primary", "--actor", "ops", "--reason", "drill")
        assert promoted.returncode == 0, promoted.stderr
        time.sleep(1.2)
        before = statuses()
        assert s.status(render_status_body(cron, 0, 400, "h/400.log", BEGIN)).content == b'{"code":200}'
        assert statuses() == before  # answered by the bridge; 2.x only sees the projection
        wait_for(lambda: [r for r in s.data.instance_rows(cron) if r["pid"] == 400])
        assert s.data.cron_row(cron)["status"] == 0 and s.data.cron_row(cron)["pid"] == 400  # type: ignore[index]
        demoted = s.cli("flags", "set", "scheduled_system", "off", "--actor", "ops", "--reason", "rollback")
        assert demoted.returncode == 0, demoted.stderr
        time.sleep(1.2)
        assert s.status(render_status_body(cron, 1, 400, "h/400.log", BEGIN, 5, 0)).content == b'{"code":200}'
        assert statuses() == before  # the in-flight execution stays the bridge's to the end
        (row,) = wait_for(lambda: [r for r in s.data.instance_rows(cron) if r["pid"] == 400 and r["status"] == 1])
        assert row["exit_code"] == 0 and row["finished_at"] is not None
        assert wait_for(lambda: s.data.cron_row(cron)["status"] == 1)  # type: ignore[index]
        s.status(render_status_body(cron, 0, 401, "h/401.log", BEGIN))
        assert statuses() == before + 1  # new executions go back to 2.x
    primary = s.run(cron, 400, "h/400.log")
    assert primary is not None and (primary["mode"], primary["status"]) == ("primary", "succeeded")
    assert s.run(cron, 401, "h/401.log") is None
