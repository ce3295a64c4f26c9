"""Primary mode on the callback path: the bridge answers what it owns, exactly as 2.x would, fail-closed."""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from sqlalchemy import func, select, text

from bridge.callbacks.answers import LocalAnswer
from bridge.callbacks.interception import ShadowInterceptor
from bridge.domain.model import Mode
from bridge.metrics import BridgeMetrics
from bridge.storage.schema import projection_outbox_table, runs_table
from legacy_adapters.callbacks import render_status_body
from legacy_adapters.testing.datadir import LegacyDataDir, create_legacy_data_dir
from legacy_adapters.testing.double import Legacy2xDouble
from tests.conftest import Backend
from tests.support import wiring
from tests.support.routes import SHELL_STATUS

NOW = int(time.time())
BEGIN = NOW - 3600 - NOW % 3600 + 1  # matches "0 * * * *": scheduled_system


@dataclass
class Modes:
    """A ModeSource the test can flip."""

    modes: dict[str, Mode] = field(default_factory=dict)

    def mode_for(self, origin: str) -> Mode:
        return self.modes.get(origin, Mode.OFF)

    def any_enabled(self) -> bool:
        return any(m is not Mode.OFF for m in self.modes.values())


@dataclass
class Site:
    data: LegacyDataDir
    double: Legacy2xDouble
    modes: Modes
    interceptor: ShadowInterceptor
    backend: Backend
    http: httpx.Client
    commits: list[int]
    metrics: BridgeMetrics

    def send(self, body: bytes, token: str | None = "system") -> tuple[int, bytes]:
        """What the proxy does: ask the interceptor, answer locally or forward and report back."""
        auth = f"Bearer {self.data.system_token}" if token == "system" else (f"Bearer {token}" if token else None)
        headers = {"Content-Type": "application/json;charset=UTF-8", **({"Authorization": auth} if auth else {})}
        prepared = self.interceptor.before_forward(SHELL_STATUS, body, headers)
        if isinstance(prepared, LocalAnswer):
            return prepared.status, prepared.body
        reply = self.http.put("/open/crons/status", content=body, headers=headers)
        self.interceptor.after_forward(prepared, reply.status_code)
        return reply.status_code, reply.content

    def count(self, table) -> int:  # type: ignore[no-untyped-def]
        with self.backend.engine.connect() as conn:
            return int(conn.execute(select(func.count()).select_from(table)).scalar_one())

    def runs(self) -> list[dict[str, object]]:
        with self.backend.engine.connect() as conn:
            return [dict(r._mapping) for r in conn.execute(select(runs_table).order_by(runs_table.c.created_at_ms))]

    def reached_2x(self) -> int:
        return len([r for r in self.double.requests() if r.path.startswith("/open/crons/status")])


@contextmanager
def locked_store(backend: Backend) -> Iterator[None]:
    if backend.has_file_lock:
        assert backend.url is not None
        holder = sqlite3.connect(backend.url.removeprefix("sqlite:///"), isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")
        try:
            yield
        finally:
            holder.execute("ROLLBACK")
            holder.close()
        return
    with backend.engine.connect() as conn:
        conn.execute(text("LOCK TABLE runs IN ACCESS EXCLUSIVE MODE"))
        try:
            yield
        finally:
            conn.rollback()


@pytest.fixture
def site(sql_backend: Backend, tmp_path: Path) -> Iterator[Site]:
    data = create_legacy_data_dir(tmp_path / "ql")
    store = wiring.store_on(sql_backend.engine, sql_backend.uow)  # type: ignore[arg-type]
    modes = Modes({"scheduled_system": Mode.PRIMARY})
    commits: list[int] = []
    metrics = BridgeMetrics()
    interceptor = wiring.interceptor(wiring.legacy_settings(data.root), store, modes, metrics=metrics,
                                     keep_ends=False, on_primary_commit=lambda: commits.append(1))
    with Legacy2xDouble(data).start() as double, httpx.Client(base_url=double.url, timeout=10) as http:
        yield Site(data, double, modes, interceptor, sql_backend, http, commits, metrics)
    interceptor.close()


def test_a_primary_start_is_answered_by_the_bridge_and_never_reaches_2x(site: Site) -> None:
    cron = site.data.add_cron("hourly", "task h.sh", "0 * * * *")
    assert site.send(render_status_body(cron, 0, 41, "h/1.log", BEGIN)) == (200, b'{"code":200}')
    assert site.reached_2x() == 0 and site.data.instance_rows(cron) == []
    (run,) = site.runs()
    assert (run["owner"], run["mode"], run["status"], run["origin"]) == ("bridge", "primary", "running",
                                                                        "scheduled_system")
    assert site.count(projection_outbox_table) == 1 and site.commits == [1]


@pytest.mark.parametrize("token, body", [
    (None, '{"code":401,"message":"请先登录"}'),
    ("7f1d9c58-0000-4a53-9a51-1f7b6c3c2e11", '{"code":401,"message":"Token 已失效"}'),
    ("limited", '{"code":401,"message":"暂无权限"}'),
])
def test_a_primary_callback_with_a_bad_token_gets_2xs_own_401_and_changes_nothing(site: Site, token: str | None,
                                                                                body: str) -> None:
    cron = site.data.add_cron("hourly", "task h.sh", "0 * * * *")
    token = site.data.limited_token if token == "limited" else token
    assert site.send(render_status_body(cron, 0, 42, "h/2.log", BEGIN), token=token) == (401, body.encode())
    assert site.runs() == [] and site.count(projection_outbox_table) == 0 and site.reached_2x() == 0


@contextmanager
def locked_keyv(data: LegacyDataDir, hold_s: float) -> Iterator[None]:
    """2.x's Keyv writer holding keyv.sqlite's lock for ``hold_s`` (rollback-journal mode: readers wait, then give
    up); released in the background, so 2.x's own read, which waits longer than the bridge's, gets through."""
    holder = sqlite3.connect(data.keyv_path, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN EXCLUSIVE")
    release = threading.Timer(hold_s, lambda: (holder.execute("ROLLBACK"), holder.close()))
    release.start()
    try:
        yield
    finally:
        release.join()


@pytest.mark.parametrize("fault", ["locked", "hot_journal"])
def test_an_unreadable_keyv_sends_the_primary_callback_on_to_2x_counted_by_its_state(site: Site, fault: str) -> None:
    cron = site.data.add_cron("hourly", "task h.sh", "0 * * * *")
    body = render_status_body(cron, 0, 44, "h/4.log", BEGIN)
    if fault == "locked":
        with locked_keyv(site.data, hold_s=0.6):  # the bridge's read gives up after 0.3 s
            answer = site.send(body)
    else:
        site.data.leave_hot_keyv_journal()
        answer = site.send(body)

    assert answer == (200, b'{"code":200}')  # 2.x's own answer: it checked the token and recorded the start
    assert site.reached_2x() == 1 and len(site.data.instance_rows(cron)) == 1
    # The bridge records it beside 2.x as 2.x's own, saying why; nothing is projected.
    (run,) = site.runs()
    assert (run["owner"], run["mode"]) == ("legacy", "shadow")
    assert str(run["origin_evidence"]).endswith("primary start answered by 2.x (keyv_unreadable)")
    assert site.count(projection_outbox_table) == 0
    assert site.metrics.value("ql_bridge_legacy_database_unavailable_total", state=fault, use="auth") == 1
    assert site.metrics.value("ql_bridge_primary_fallback_total", reason="keyv_unreadable") == 1


def test_a_store_that_does_not_take_the_start_hands_it_to_2x_and_leaves_nothing_half_written(site: Site) -> None:
    cron = site.data.add_cron("hourly", "task h.sh", "0 * * * *")
    with locked_store(site.backend):  # past the busy budget (SQLite) or the lock timeout (PostgreSQL)
        status, body = site.send(render_status_body(cron, 0, 43, "h/3.log", BEGIN))
    # The bridge cannot be the record in time, so 2.x is: the shell gets 2.x's answer, 2.x applied the start.
    assert (status, body) == (200, b'{"code":200}')
    assert site.reached_2x() == 1 and len(site.data.instance_rows(cron)) == 1
    assert site.count(projection_outbox_table) == 0
    assert site.metrics.value("ql_bridge_primary_fallback_total", reason="store_busy") == 1


def test_owners_are_fixed_at_acceptance_across_promotion_and_demotion(site: Site) -> None:
    cron = site.data.add_cron("hourly", "task h.sh", "0 * * * *")
    site.modes.modes["scheduled_system"] = Mode.SHADOW
    site.send(render_status_body(cron, 0, 50, "h/shadow.log", BEGIN))  # accepted under shadow: 2.x owns it
    site.modes.modes["scheduled_system"] = Mode.PRIMARY
    site.send(render_status_body(cron, 0, 51, "h/primary.log", BEGIN))  # accepted under primary: ours
    site.send(render_status_body(cron, 1, 50, "h/shadow.log", BEGIN, 3, 0))  # still forwarded after promotion
    assert site.reached_2x() == 2
    site.modes.modes["scheduled_system"] = Mode.OFF  # demotion (rollback)
    time.sleep(1.1)  # the owned-run cache is a second old at most
    assert site.send(render_status_body(cron, 1, 51, "h/primary.log", BEGIN, 4, 2)) == (200, b'{"code":200}')
    assert site.reached_2x() == 2  # the bridge still answered its own execution
    site.send(render_status_body(cron, 0, 52, "h/after.log", BEGIN))  # new executions go back to 2.x
    assert site.reached_2x() == 3
    by_pid = {r["legacy_pid"]: r for r in site.runs()}
    assert (by_pid[50]["owner"], by_pid[50]["status"]) == ("legacy", "succeeded")
    assert (by_pid[51]["owner"], by_pid[51]["status"], by_pid[51]["mode"]) == ("bridge", "failed", "primary")
    assert 52 not in by_pid  # off: nothing recorded
    with site.backend.engine.connect() as conn:
        events = [r.event for r in conn.execute(select(projection_outbox_table.c.event)
                                                .order_by(projection_outbox_table.c.id))]
    assert events == ["start", "end"]


def test_concurrent_primary_callbacks_of_one_cron_each_get_their_own_run(site: Site) -> None:
    cron = site.data.add_cron("hourly", "task h.sh", "0 * * * *")
    answers: list[tuple[int, bytes]] = []
    threads = [threading.Thread(target=lambda p=p: answers.append(site.send(render_status_body(
        cron, 0, p, f"h/{p}.log", BEGIN)))) for p in range(60, 64)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert answers == [(200, b'{"code":200}')] * 4
    assert sorted(r["legacy_pid"] for r in site.runs()) == [60, 61, 62, 63]
