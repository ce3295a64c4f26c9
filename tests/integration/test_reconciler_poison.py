"""No accepted callback and no value 2.x can store stops reconciliation: a value no rule can judge is a
mismatch of its own kind, repeats of one execution are counted and never compared, and a failed pass records
its real cause."""

from __future__ import annotations

import json
import sqlite3
import time

import pytest
from sqlalchemy import func, insert, select

from bridge.jobs.reconcile import ReconcileSettings
from bridge.storage.reconcile_queries import SqlReconcileStore
from bridge.storage.schema import reconcile_seen_table
from legacy_adapters.callbacks import render_status_body
from legacy_adapters.errors import LegacyTimeError
from tests.conftest import Backend
from tests.integration.legacy_world import BEGIN, NOW, end, start
from tests.integration.test_reconciler import World, cron
from tests.integration.test_reconciler import world as world_of_test_reconciler

world = world_of_test_reconciler  # the same 2.x double, shadow store and reconciler, on each store backend

INVALID = "invalid_legacy_value"
REPLAYED = "legacy_duplicate_instance"
JS_MAX_SAFE = 2**53 - 1  # the largest integer a JS number holds exactly: Joi and Sequelize pass it through
FAR_AHEAD = NOW + 30 * 86_400


def case_id(column: str, value: object) -> str:
    return f"{column}=" + ("30 days ahead" if value == FAR_AHEAD else repr(value))  # stable across collections


def invalid_diffs(world: World) -> list[dict[str, str]]:
    return [json.loads(m["diff"]) for m in world.store.open_mismatches(INVALID)]


def diffs_after_writing(world: World, table: str, cron_column: str, column: str, value: object,
                        pid: int) -> list[dict[str, str]]:
    """A shadowed execution, then ``value`` written into its cron's row of 2.x's ``table``, then a pass that must
    end "ok": the open invalid-value diffs it left."""
    c = cron(world)
    world.via_bridge(start(c, pid, f"{pid}.log"))
    world.via_bridge(end(c, pid, f"{pid}.log"))
    world.legacy(f"UPDATE {table} SET {column} = ? WHERE {cron_column} = ?", (value, c))
    world.reconcile()  # asserts the pass ended "ok"
    return invalid_diffs(world)


def test_a_start_time_no_clock_reaches_is_an_invalid_value_and_the_pass_goes_on(world: World) -> None:
    c, other = cron(world), cron(world)
    world.via_bridge(render_status_body(c, 0, 41, "big.log", JS_MAX_SAFE))  # 2.x accepts it and stores it
    world.direct(start(other, 42, "h.log"))  # a real disagreement after it, which the pass must still find
    assert world.reconcile() == [(INVALID, c), ("missing", other)]
    (found,) = world.store.open_mismatches(INVALID)
    assert json.loads(found["diff"]) == {"RunningInstances.started_at": "looks like milliseconds already"}
    assert str(JS_MAX_SAFE) not in found["diff"]  # the column is named, never the value
    world.legacy("UPDATE RunningInstances SET started_at = ? WHERE cron_id = ?", (BEGIN, c))
    assert world.reconcile() == [("missing", c), ("missing", other)]
    assert world.store.open_mismatches(INVALID) == []  # closed once 2.x's row is fixed


def test_an_ended_instance_with_an_unusable_value_names_its_run(world: World) -> None:
    c = cron(world)
    world.via_bridge(start(c, 43, "n.log"))
    world.via_bridge(end(c, 43, "n.log"))
    world.legacy("UPDATE RunningInstances SET exit_code = 'Infinity', status = 9 WHERE cron_id = ?", (c,))
    assert world.reconcile() == [(INVALID, c)]
    (found,) = world.store.open_mismatches(INVALID)
    assert found["run_id"] is not None  # the key still matched: the Run is named, and not an orphan
    assert json.loads(found["diff"]) == {"RunningInstances.exit_code": "not finite",
                                         "RunningInstances.status": "unknown"}
    events = [e for e in world.runs.list_events(found["run_id"]).events
              if e.type.value == "run.legacy_projection_mismatch"]
    assert [e.payload for e in events] == [{"kind": INVALID, "diff": ["RunningInstances.exit_code",
                                                                      "RunningInstances.status"]}]


RUNNING_INSTANCE_VALUES = [
    ("started_at", JS_MAX_SAFE, "looks like milliseconds already"),
    ("started_at", "1e400", "not finite"),  # stored as REAL Infinity
    ("started_at", "-1e400", "not finite"),
    ("started_at", "nan", "not finite"),  # stays text; the reader's float() makes it NaN
    ("started_at", -5, "negative"),
    ("started_at", "soon", "no value"),  # text in a NOT NULL number column
    ("started_at", FAR_AHEAD, "in the future"),
    ("started_at", BEGIN + 0.5, None),
    ("finished_at", "Infinity", "not finite"),
    ("finished_at", -1, "negative"),
    ("finished_at", 2**53, "looks like milliseconds already"),
    ("finished_at", 1.5, None),
    ("finished_at", "abc", None),
    ("exit_code", "1e400", "not finite"),
    ("exit_code", "nan", "not finite"),
    ("exit_code", 2**53, None),
    ("exit_code", 1e300, None),
    ("exit_code", -1, None),
    ("exit_code", 1.5, None),
    ("exit_code", "abc", None),
    ("status", 7, "unknown"),
    ("status", -1, "unknown"),
    ("status", 1.5, "unknown"),
    ("status", "done", "unknown"),
    ("pid", -1, None),
    ("pid", 2**53, None),
    ("pid", 1e23, None),
    ("pid", "abc", None),
    ("cron_id", "abc", "no value"),
    ("cron_id", 1e30, "out of range"),  # no SQLite INTEGER (nor store BIGINT) holds it
    ("cron_id", -3, None),
]


@pytest.mark.parametrize(("column", "value", "defect"), RUNNING_INSTANCE_VALUES,
                         ids=[case_id(c, v) for c, v, _ in RUNNING_INSTANCE_VALUES])
def test_a_pass_survives_any_value_in_a_running_instance(world: World, column: str, value: object,
                                                         defect: str | None) -> None:
    assert diffs_after_writing(world, "RunningInstances", "cron_id", column, value, pid=44) == (
        [{f"RunningInstances.{column}": defect}] if defect else [])


CRONTAB_VALUES = [
    ("last_execution_time", JS_MAX_SAFE, "looks like milliseconds already"),
    ("last_execution_time", "Infinity", "not finite"),
    ("last_execution_time", "nan", "not finite"),
    ("last_execution_time", -5, "negative"),
    ("last_execution_time", FAR_AHEAD, "in the future"),
    ("last_execution_time", "abc", None),  # reads as "never"
    ("last_execution_time", 1.5, None),
    ("status", 7, None),
    ("status", "x", None),
    ("pid", 1e23, None),
    ("pid", -1, None),
]


@pytest.mark.parametrize(("column", "value", "defect"), CRONTAB_VALUES,
                         ids=[case_id(c, v) for c, v, _ in CRONTAB_VALUES])
def test_a_pass_survives_any_value_in_a_crontabs_row(world: World, column: str, value: object,
                                                     defect: str | None) -> None:
    assert diffs_after_writing(world, "Crontabs", "id", column, value, pid=45) == (
        [{f"Crontabs.{column}": defect}] if defect else [])


def test_one_id_sent_501_times_is_one_execution_counted_across_two_batches(world: World) -> None:
    c = cron(world)
    ids = ",".join(f'"{c}"' for _ in range(501))  # Joi takes the array as it is: 2.x opens 501 instances
    body = (f'{{"ids":[{ids}],"status":"0","pid":"46","log_path":"many.log",'
            f'"last_execution_time":{BEGIN},"last_running_time":0}}').encode()
    assert world.via_bridge(body) == 200
    rows = world.data.instance_rows(c)
    assert len(rows) == 501
    assert world.reconcile() == [(REPLAYED, c)]
    (found,) = world.store.open_mismatches(REPLAYED)
    assert json.loads(found["diff"]) == {"rows": 501, "instances": [{"id": r["id"], "status": "running"}
                                                                    for r in rows[:20]]}  # the first 20 named
    assert world.reconcile() == [(REPLAYED, c)]


def test_a_replayed_start_in_a_later_batch_is_counted_and_not_compared(world: World) -> None:
    world.reconciler._settings = ReconcileSettings(grace_s=0, batch_size=2)  # noqa: SLF001 - the setting under test
    c, others = cron(world), [cron(world) for _ in range(3)]
    world.via_bridge(start(c, 47, "r.log"))
    for n, other in enumerate(others):
        world.via_bridge(start(other, 48 + n, "o.log"))
    world.direct(start(c, 47, "r.log"))  # the same start again, three rows later
    assert world.reconcile() == [(REPLAYED, c)]
    (found,) = world.store.open_mismatches(REPLAYED)
    assert json.loads(found["diff"])["rows"] == 2


def test_marking_runs_seen_tolerates_repeats_in_one_call_and_across_calls(sql_backend: Backend) -> None:
    store = SqlReconcileStore(sql_backend.engine)  # type: ignore[arg-type]
    pass_id = store.open_pass(int(time.time() * 1000))
    assert store.mark_seen(pass_id, ["run-a", "run-a", "run-b"]) == set()
    assert store.mark_seen(pass_id, ["run-b", "run-c"]) == {"run-b"}  # matched in an earlier batch of the pass
    with store.read() as conn:
        assert conn.execute(select(func.count()).select_from(reconcile_seen_table)).scalar() == 3


def test_a_failed_pass_records_the_bridge_code_of_a_store_error(world: World,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    c = cron(world)
    world.via_bridge(start(c, 51, "e.log"))

    def refused(keys: object) -> None:  # a real constraint violation from the store's own driver
        with world.store.engine.begin() as conn:
            conn.execute(insert(reconcile_seen_table), [{"pass_id": 0, "run_id": "twice"}] * 2)

    monkeypatch.setattr(world.store, "runs_by_keys", refused)
    result = world.reconciler.run_once()
    assert (result.result, result.reason) == ("failed", "STORAGE_ERROR")  # not SQLAlchemy's doc link code
    assert world.store.last_pass()["reason"] == "STORAGE_ERROR"  # type: ignore[index]


def test_a_failure_after_the_scan_is_recorded_as_a_failed_pass(world: World,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    def gone(mismatch_ids: object, since_ms: int, at_ms: int, pass_id: int) -> int:
        raise ConnectionResetError("peer reset while closing mismatches")

    monkeypatch.setattr(world.store, "resolve_unseen", gone)
    result = world.reconciler.run_once()
    assert (result.result, result.reason) == ("failed", "ConnectionResetError")
    assert world.store.last_pass()["result"] == "failed"  # type: ignore[index]


def test_a_failure_is_named_by_its_code_or_type_never_its_message() -> None:
    from bridge.jobs.reconcile import failure_code

    assert failure_code(LegacyTimeError("started_at", "negative", "int")) == "INVALID_LEGACY_TIME"
    assert failure_code(sqlite3.OperationalError("database is locked")) == "LEGACY_DATABASE"  # 2.x's file
    assert failure_code(ValueError("/ql/data/scripts/secret.sh")) == "ValueError"
