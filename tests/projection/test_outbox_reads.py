"""The projector's reads of a cron's Runs stay on its bridge-owned Runs, however long its shadow history."""

from __future__ import annotations

from bridge.service.callback_facts import CallbackFacts, ExecutionContext
from bridge.service.shadow import ShadowRecorder
from bridge.storage.outbox import _NEWEST_ACTIVE, _NEWEST_TERMINAL
from bridge.storage.statements import CompiledStatement
from tests.projection.conftest import World

SHADOW = ExecutionContext(origin="scheduled_system", evidence="test", task_revision="rev")


def _callback(cron_id: int, pid: int, exit_code: int | None = None) -> CallbackFacts:
    return CallbackFacts(cron_id=cron_id, pid=pid, log_ref=f"log-{pid}", started_at_ms=1_796_216_400_000 + pid,
                         duration_ms=1000 if exit_code is not None else None, exit_code=exit_code,
                         received_at_ms=1_796_216_400_000 + pid)


def _plans(world: World, statement: CompiledStatement, cron_id: int) -> list[str]:
    """The plans of a statement as it runs (its text for the store, the driver's parameters), over the
    store's life."""
    assert world.backend.engine is not None
    sql, args = statement.bind(world.backend.engine.dialect, {"cron_id": cron_id})
    return world.backend.plans_in_use(sql, args)


def test_a_promoted_crons_newest_runs_come_from_the_index_of_bridge_owned_runs(world: World) -> None:
    cron = world.cron()
    shadow = ShadowRecorder(world.runs)
    for pid in range(3000, 3150):  # the cron's shadow history: closed Runs that 2.x owns
        shadow.record_start(_callback(cron, pid), SHADOW)
        shadow.record_end(_callback(cron, pid, exit_code=0), lambda: SHADOW)
    shadow.record_start(_callback(cron, 3999), SHADOW)  # and one still open
    done = world.primary.start(cron, pid=77)
    world.primary.finish(done)
    running = world.primary.start(cron, pid=78)

    active, latest, latest_terminal = world.outbox.facts_for_cron(cron)

    assert [f.run_id for f in active] == [running.run_id]
    assert latest_terminal is not None and latest_terminal.run_id == done.run_id
    assert latest is not None and latest.run_id == running.run_id
    for statement in (_NEWEST_ACTIVE, _NEWEST_TERMINAL):
        for plan in _plans(world, statement, cron):  # with statistics, and on SQLite without (as it runs)
            assert "ix_runs_bridge_owned_by_cron" in plan, plan
            assert "ix_runs_legacy_cron_status" not in plan, plan


def test_a_batch_of_rows_is_read_with_a_few_statements_whatever_its_size(world: World) -> None:
    from sqlalchemy import event

    crons = [world.cron(f"c{i}") for i in range(2)]
    runs = [world.primary.start(crons[i % 2], pid=100 + i) for i in range(30)]
    world.primary.finish(runs[0])
    rows = world.outbox.due_by_cron(world.clock.now, 10, 100)
    statements: list[str] = []
    engine = world.backend.engine
    assert engine is not None
    event.listen(engine, "before_cursor_execute", lambda *args: statements.append(args[2]))

    inputs = world.outbox.inputs(rows)

    assert len(rows) == 31 and len(statements) <= 12, statements  # 3 per cron, 3 for the rows, BEGIN
    assert [i.facts.attempt_id if i.facts else None for i in inputs] == [r.attempt_id for r in rows]
    assert [i.facts.pid if i.facts else None for i in inputs][:30] == [100 + i for i in range(30)]
    assert all(i.cron == world.outbox.facts_for_cron(r.legacy_cron_id) for r, i in zip(rows, inputs))
