"""A real bridge process in front of the 2.x double: faithful forwarding and every shadow case, over HTTP."""

from __future__ import annotations

import sqlite3
import threading
import time
from typing import Any

import httpx
from sqlalchemy import select, text

from bridge.storage.schema import mismatches_table, run_attempts_table, run_events_table, runs_table
from legacy_adapters.callbacks import render_status_body
from tests.integration.conftest import LiveBridge
from tests.support.waiting import wait_for

CURL = {"Content-Type": "application/json;charset=UTF-8", "User-Agent": "curl/8.5.0", "Accept": "*/*",
        "Accept-Encoding": "deflate, gzip, br, zstd"}


def runs_of(live: LiveBridge, cron_id: int) -> list[dict[str, Any]]:
    engine = live.engine()
    try:
        with engine.connect() as conn:
            rows = conn.execute(select(runs_table).where(runs_table.c.legacy_cron_id == cron_id)
                                .order_by(runs_table.c.created_at_ms, runs_table.c.legacy_pid)).mappings().all()
            out = []
            for row in rows:
                run = dict(row)
                run["attempts"] = [dict(a) for a in conn.execute(
                    select(run_attempts_table).where(run_attempts_table.c.run_id == row["id"])).mappings()]
                run["events"] = [e.type for e in conn.execute(
                    select(run_events_table.c.type).where(run_events_table.c.run_id == row["id"])
                    .order_by(run_events_table.c.sequence))]
                out.append(run)
            return out
    finally:
        engine.dispose()


def put_status(live: LiveBridge, body: bytes, token: str | None = None, base: str | None = None,
               path: str = "/open/crons/status") -> httpx.Response:
    headers = dict(CURL)
    if token is not False:
        headers["Authorization"] = f"Bearer {token or live.data.system_token}"
    with httpx.Client(base_url=base or live.url, timeout=10) as client:
        return client.put(f"{path}?t=1796216497", content=body, headers=headers)


def new_cron(live: LiveBridge, schedule: str = "0 * * * *", command: str = "task job.sh") -> int:
    return live.data.add_cron(f"job-{time.monotonic_ns()}", command, schedule)


HOUR = 1_796_216_400  # a whole hour (UTC), so "0 * * * *" matches a begin one second later


def test_the_status_callback_answer_is_byte_identical_to_2x(live: LiveBridge) -> None:
    cron = new_cron(live)
    direct = put_status(live, render_status_body(cron, 3, 1, "a.log", HOUR + 1), base=live.double.url)
    through = put_status(live, render_status_body(cron, 3, 1, "a.log", HOUR + 1))
    assert (through.status_code, through.content) == (direct.status_code, direct.content) == (200, b'{"code":200}')
    assert through.headers["content-type"] == direct.headers["content-type"]


def test_other_paths_pass_through_with_method_query_body_and_headers_intact(live: LiveBridge) -> None:
    live.double.clear_requests()
    with httpx.Client(base_url=live.url, timeout=10) as client:
        reply = client.post("/open/envs?t=12&x=%2F", content=b"\x00raw-bytes", headers={
            "Authorization": "Bearer abc", "Content-Type": "application/octet-stream", "Accept-Encoding": "br"})
        static = client.get("/static/app.js")
    (seen,) = [r for r in live.double.requests() if r.path.startswith("/open/envs")]
    assert (seen.method, seen.raw_query, seen.body) == ("POST", "t=12&x=%2F", b"\x00raw-bytes")
    assert seen.header("Authorization") == "Bearer abc" and seen.header("Accept-Encoding") == "br"
    assert reply.status_code == 200
    with httpx.Client(base_url=live.double.url, timeout=10) as direct:
        original = direct.get("/static/app.js")
    assert (static.status_code, static.content, static.headers["content-type"]) == (
        original.status_code, original.content, original.headers["content-type"])


def test_a_scheduled_run_is_recorded_from_start_to_success(live: LiveBridge) -> None:
    cron = new_cron(live)
    assert put_status(live, render_status_body(cron, 0, 10325, "job/1.log", HOUR + 1)).content == b'{"code":200}'
    (run,) = runs_of(live, cron)
    assert (run["status"], run["origin"], run["started_at_ms"]) == ("running", "scheduled_system", (HOUR + 1) * 1000)
    put_status(live, render_status_body(cron, 1, 10325, "job/1.log", HOUR + 1, 2, 0))
    (run,) = runs_of(live, cron)
    assert run["status"] == "succeeded" and run["duration_ms"] == 2000
    assert run["attempts"][0]["exit_code"] == 0 and len(run["events"]) == 9
    assert run["task_id"] == f"legacy-cron:{cron}" and run["received_at_ms"] is not None


def test_a_failing_run_and_an_update_run_without_exit_code(live: LiveBridge) -> None:
    cron = new_cron(live)
    put_status(live, render_status_body(cron, 0, 11, "job/f.log", HOUR + 1))
    put_status(live, render_status_body(cron, 1, 11, "job/f.log", HOUR + 1, 3, 3))
    upd = new_cron(live, "30 3 * * *", "ql update")
    put_status(live, render_status_body(upd, 0, 12, "update/x.log", HOUR + 1))
    put_status(live, render_status_body(upd, 1, 12, "update/x.log", HOUR + 1, 0))
    (failed,) = runs_of(live, cron)
    (updated,) = runs_of(live, upd)
    assert (failed["status"], failed["error_code"], failed["attempts"][0]["exit_code"]) == (
        "failed", "process_exit_error", 3)
    # update.sh's end carries no exit code (docs/legacy-2x.md#updatesh-sends-no-exit-code): it ended, how is unknown.
    assert (updated["status"], updated["error_code"]) == ("ended", None)
    assert (updated["attempts"][0]["status"], updated["attempts"][0]["exit_code"]) == ("ended", None)
    assert updated["origin"] == "script"  # 03:30 does not match the begin time: not a scheduler run


# (exit_code as the shell or a script sends it, what 2.x keeps, the Run's status by 2.x's rule: anything but 0,
# null or absent is an error, fractions included)
EXIT_CODES = [("0", 0, "succeeded"), ("0.0", 0, "succeeded"), ("0.5", 0.5, "failed"), ("-1", -1, "failed"),
              ("1e3", 1000, "failed"), ("2", 2, "failed"), ("9007199254740991", 2**53 - 1, "failed"),
              ("-0.25", -0.25, "failed")]


def test_exit_codes_follow_2xs_rule_and_are_kept_as_2x_keeps_them(live: LiveBridge) -> None:
    for sent, kept, status in EXIT_CODES:
        cron = new_cron(live)
        put_status(live, render_status_body(cron, 0, 71, "job/x.log", HOUR + 1))
        with_exit = f',"exit_code":{sent}}}'.encode()
        body = render_status_body(cron, 1, 71, "job/x.log", HOUR + 1, 2).replace(b"}", with_exit)
        assert put_status(live, body).status_code == 200, sent
        (instance,) = live.data.instance_rows(cron)
        (run,) = runs_of(live, cron)
        assert instance["exit_code"] == kept and instance["status"] == (3 if status == "failed" else 1), sent
        assert (run["status"], run["attempts"][0]["exit_code"]) == (status, kept), sent
        assert type(run["attempts"][0]["exit_code"]) is type(kept), sent


def test_duplicate_late_and_finish_only_callbacks(live: LiveBridge) -> None:
    cron = new_cron(live)
    start = render_status_body(cron, 0, 21, "job/d.log", HOUR + 1)
    end = render_status_body(cron, 1, 21, "job/d.log", HOUR + 1, 2, 0)
    for body in (start, start, end, end):
        put_status(live, body)
    put_status(live, render_status_body(cron, 1, 21, "job/d.log", HOUR + 1, 2, 1))  # late, different exit
    put_status(live, render_status_body(cron, 1, 22, "job/e.log", HOUR + 3601, 5, 0))  # finish only
    first, backfilled = runs_of(live, cron)
    assert first["events"].count("attempt.late_callback_ignored") == 1 and first["status"] == "succeeded"
    assert len(first["events"]) == 10
    assert backfilled["synthesized"] and backfilled["status"] == "succeeded"
    assert len(live.data.instance_rows(cron)) == 2  # 2.x itself made a duplicate instance; we did not


def test_two_concurrent_runs_of_a_seconds_level_cron_never_cross(live: LiveBridge) -> None:
    cron = new_cron(live, "*/5 * * * * *", "task tick.js")
    put_status(live, render_status_body(cron, 0, 31, "tick/a.log", HOUR + 5))
    put_status(live, render_status_body(cron, 0, 32, "tick/b.log", HOUR + 10))
    put_status(live, render_status_body(cron, 1, 32, "tick/b.log", HOUR + 10, 1, 4))
    put_status(live, render_status_body(cron, 1, 31, "tick/a.log", HOUR + 5, 9, 0))
    by_pid = {r["legacy_pid"]: r for r in runs_of(live, cron)}
    assert (by_pid[31]["status"], by_pid[32]["status"]) == ("succeeded", "failed")
    assert by_pid[31]["origin"] == "scheduled_node"  # six fields: node-schedule runs it in any mode


def test_a_panel_run_is_recognised_as_manual(live: LiveBridge) -> None:
    cron = new_cron(live, "0 0 1 1 *")
    with httpx.Client(base_url=live.url, timeout=10) as client:
        assert client.put("/open/crons/run", content=f"[{cron}]".encode(),
                          headers={**CURL, "Authorization": f"Bearer {live.data.system_token}"}).status_code == 200
    assert live.double.simulate_run_single(cron, 4242, "job/manual.log")
    put_status(live, render_status_body(cron, 0, 4242, "job/manual.log", HOUR + 1234))
    (run,) = runs_of(live, cron)
    assert (run["origin"], run["origin_evidence"]) == ("manual", "run_single_row")


def test_rejected_callbacks_create_no_facts(live: LiveBridge) -> None:
    cron = new_cron(live)
    numeric = b'{"ids":["%d"],"status":0,"pid":"1","log_path":"a.log","last_execution_time":1,"last_running_time":0}'
    bad = put_status(live, numeric % cron)
    assert bad.status_code == 400 and b'"status\\" must be a string' in bad.content
    assert put_status(live, render_status_body(cron, 0, 1, "a.log", HOUR + 1), token="nope").content == \
        '{"code":401,"message":"Token 已失效"}'.encode()
    no_token = put_status(live, render_status_body(cron, 0, 1, "a.log", HOUR + 1), token=False)  # type: ignore[arg-type]
    assert no_token.status_code == 401
    pid_quotes = put_status(live, render_status_body(cron, 1, "", "a.log", HOUR + 1, 2, 0))
    assert pid_quotes.status_code == 500 and b"WHERE parameter" in pid_quotes.content  # 2.x: NaN pid on an end
    assert runs_of(live, cron) == []


def test_a_start_with_the_shells_empty_pid_is_recorded_without_a_pid(live: LiveBridge) -> None:
    cron = new_cron(live)
    body = render_status_body(cron, 0, "", "job/p.log", HOUR + 1)
    assert b'"pid":"\'\'"' in body  # what update_cron sends when $$ is empty
    assert put_status(live, body).status_code == 200
    (run,) = runs_of(live, cron)
    assert run["legacy_pid"] is None and run["status"] == "running"


def test_an_unknown_cron_is_answered_by_2x_and_recorded_nowhere(live: LiveBridge) -> None:
    before = live.metric("ql_bridge_shadow_callback_unmatched_total")
    assert put_status(live, render_status_body(987654, 0, 5, "x.log", HOUR + 1)).content == b'{"code":200}'
    assert runs_of(live, 987654) == []
    assert live.metric("ql_bridge_shadow_callback_unmatched_total") == before + 1


def test_a_locked_store_leaves_2xs_answer_unchanged_counts_the_write_and_records_it_once_unlocked(
        live: LiveBridge) -> None:
    cron = new_cron(live)
    before = not_written(live)
    ready, done = threading.Event(), threading.Event()

    def hold() -> None:
        if live.store_path is not None:
            conn = sqlite3.connect(live.store_path, isolation_level=None)
            conn.execute("BEGIN IMMEDIATE")
        else:
            engine = live.engine()
            conn = engine.connect()
            conn.execute(text("LOCK TABLE runs IN ACCESS EXCLUSIVE MODE"))
        ready.set()
        done.wait(10)
        if live.store_path is None:
            conn.rollback()
        else:
            conn.execute("ROLLBACK")
        conn.close()

    holder = threading.Thread(target=hold)
    holder.start()
    ready.wait(5)
    try:
        reply = put_status(live, render_status_body(cron, 0, 41, "job/l.log", HOUR + 1))
    finally:
        done.set()
        holder.join()
    assert (reply.status_code, reply.content) == (200, b'{"code":200}')
    # Counted as not written in time: kept in the journal (a busy SQLite), or overran the budget (a lock wait).
    assert not_written(live) > before
    assert len(live.data.instance_rows(cron)) == 1  # 2.x did its part
    assert wait_for(lambda: recorded_pids(live, cron) == [41], 15.0)  # and the bridge has it once the lock is gone


def not_written(live: LiveBridge) -> float:
    return live.metric("ql_bridge_shadow_write_failed_total") + live.metric("ql_bridge_journal_kept_total")


def recorded_pids(live: LiveBridge, cron: int) -> list[int]:
    engine = live.engine()
    try:
        with engine.connect() as conn:
            return [int(p) for p in conn.execute(select(runs_table.c.legacy_pid)
                                                 .where(runs_table.c.legacy_cron_id == cron)).scalars()]
    finally:
        engine.dispose()


def test_unplaced_callbacks_are_kept_as_mismatch_rows(live: LiveBridge) -> None:
    cron = new_cron(live)
    put_status(live, render_status_body(cron, 0, "", "job/m1.log", HOUR + 1))
    put_status(live, render_status_body(cron, 0, "", "job/m2.log", HOUR + 3601))
    put_status(live, render_status_body(cron, 1, 99, "job/m3.log", HOUR + 7201, 2, 0))
    engine = live.engine()
    with engine.connect() as conn:
        kinds = [r.kind for r in conn.execute(select(mismatches_table).where(
            mismatches_table.c.legacy_cron_id == cron))]
    engine.dispose()
    assert kinds == ["compat.ambiguous_callback"]
    assert [r["status"] for r in runs_of(live, cron)] == ["running", "running"]


def test_a_stop_through_the_bridge_cancels_the_shadow_run(live: LiveBridge) -> None:
    cron = new_cron(live)
    put_status(live, render_status_body(cron, 0, 51, "job/s.log", HOUR + 1))
    with httpx.Client(base_url=live.url, timeout=10) as client:
        stop = client.put("/open/crons/stop", content=f'["{cron}"]'.encode(),
                          headers={**CURL, "Authorization": f"Bearer {live.data.system_token}"})
    assert stop.content == b'{"code":200}'
    put_status(live, render_status_body(cron, 1, 51, "job/s.log", HOUR + 1, 4, 1))  # the trap's end callback
    (run,) = runs_of(live, cron)
    assert run["status"] == "cancelled" and run["attempts"][0]["status"] == "cancelled"
    assert run["events"][-1] == "attempt.late_callback_ignored"
    assert [row["status"] for row in live.data.instance_rows(cron)] == [2]  # 2.x: stopped
