"""Bulk apply (bridge.service.imports.BulkRunWriter.apply_many, the import's write), run on every store: it stores
exactly what RunStore.apply stores for the same ChangeSets, every column of runs, run_attempts and run_events.

The ChangeSets are the import's and the shadow path's shapes (a new Run up the opening ladder, ended or still
running) and one whose Run, Attempt and events have every field set, none left at its default: a column that
either write path leaves out, or that no field of the records fills, fails these tests. The one exception is
step_run_id: it must name a StepRun of the same Run (migration 0011's triggers), and a Run not yet written has
none, so a brand-new Run never carries one.
"""

from __future__ import annotations

import itertools
import types
import typing
from collections.abc import Callable, Iterator, Sequence
from dataclasses import MISSING, fields, replace
from typing import Any, TypeVar

import pytest
from sqlalchemy import delete, select

from bridge.domain.aggregate import AttemptWrite, ChangeSet, RunChange
from bridge.domain.events import Actor, ActorType, RunEvent
from bridge.domain.ladder import open_to_running
from bridge.domain.model import AttemptStatus, Run, RunAttempt, RunStatus
from bridge.service.ports import IdempotencyKeyTakenError
from bridge.storage.schema import run_attempts_table, run_events_table, runs_table
from tests.conftest import Backend

R = TypeVar("R", Run, RunAttempt, RunEvent)
TABLES = ((runs_table, Run), (run_attempts_table, RunAttempt), (run_events_table, RunEvent))
ACTOR = Actor(ActorType.SYSTEM, "bulk-test")
AT_MS = 1_780_000_000_000
UNSET = frozenset({"step_run_id"})  # a brand-new Run has no StepRun to name (see above)


class _RolledBack(Exception):
    """Raised at the end of a transaction's work so that it leaves nothing behind."""


def _ids(prefix: str) -> Callable[[], str]:
    counter = itertools.count(1)
    return lambda: f"{prefix}{next(counter):04d}"


def _run(new_id: Callable[[], str], key: str, *, synthesized: bool) -> Run:
    return Run(id=new_id(), project_id="default", task_id="legacy-cron:7", task_revision="rev-7",
               trigger_type="legacy_callback", status=RunStatus.CREATED, version=0, event_sequence=0,
               created_at_ms=AT_MS - 60_000, legacy_cron_id=7, idempotency_key=key, origin="manual",
               origin_evidence="bulk", mode="shadow", owner="legacy", legacy_pid=4242, log_ref="log-7",
               synthesized=synthesized)


def _opened(new_id: Callable[[], str], key: str, *, synthesized: bool, end: bool) -> ChangeSet:
    """A new Run and Attempt 1 up the opening ladder, as the shadow path and the import open them; ``end``
    takes both on to failed with an exit code, as the import closes 2.x's history."""
    run = _run(new_id, key, synthesized=synthesized)
    change = RunChange.create(run, actor=ACTOR, at_ms=AT_MS, new_id=new_id, payload={"origin": "manual"})
    attempt = open_to_running(change, RunAttempt(
        id=new_id(), run_id=run.id, attempt=1, status=AttemptStatus.CLAIMED, executor_type="legacy_shell",
        callback_sequence=0, created_at_ms=AT_MS - 60_000, pid=4242, log_artifact_id="log-7",
        synthesized=synthesized), started_at_ms=AT_MS - 59_000)
    if end:
        ended = {"exit_code": 3, "error_code": "process_exit_error"}
        change.move_attempt(attempt, AttemptStatus.FAILED, payload=ended, exit_code=3,
                            error_code="process_exit_error", finished_at_ms=AT_MS - 1_000)
        change.move_run(RunStatus.FAILED, payload=ended, error_code="process_exit_error",
                        finished_at_ms=AT_MS - 1_000, duration_ms=58_000)
    return change.result()


def _fill(record: R, tag: str) -> R:
    """``record`` with every field still at its default set to a value of its type that no default has.

    A field of a new type fails here, so that the test is given a value for it rather than skipping it.
    """
    hints = typing.get_type_hints(type(record))
    values: dict[str, Any] = {}
    for number, f in enumerate(fields(record), start=1):
        if f.default is MISSING or getattr(record, f.name) != f.default or f.name in UNSET:
            continue
        kind = hints[f.name]
        options = typing.get_args(kind) if isinstance(kind, types.UnionType) else (kind,)
        if bool in options:
            values[f.name] = not f.default
        elif int in options:
            values[f.name] = 1_000 + number
        elif str in options:
            values[f.name] = f"{tag}{f.name[:6]}{number}"  # short: owner and mode columns hold 16 characters
        else:
            raise AssertionError(f"no test value for {type(record).__name__}.{f.name} ({kind})")
    return replace(record, **values)


def _every_field_set(change: ChangeSet, tag: str) -> ChangeSet:
    attempts = tuple(AttemptWrite(_fill(w.attempt, f"{tag}a{w.attempt.attempt}"), None, None)
                     for w in change.attempt_writes)
    events = tuple(_fill(e, f"{tag}e{e.sequence}") for e in change.events)  # dedupe keys unique per Run
    return replace(change, run=_fill(change.run, f"{tag}r"), attempt_writes=attempts, events=events)


def batch(prefix: str = "B~") -> list[ChangeSet]:
    """New Runs as the import writes them: ids and keys begin with ``prefix``."""
    new_id = _ids(prefix)
    return [
        _opened(new_id, f"{prefix}imported", synthesized=True, end=True),
        _opened(new_id, f"{prefix}shadow", synthesized=False, end=False),
        _every_field_set(_opened(new_id, f"{prefix}full", synthesized=False, end=True), prefix),
    ]


def apply_each(store: Any, changes: Sequence[ChangeSet]) -> None:
    for change in changes:
        store.apply(change)


def apply_many(store: Any, changes: Sequence[ChangeSet]) -> None:
    store.apply_many(changes)


def stored(store: Any, changes: Sequence[ChangeSet]) -> list[tuple[Run | None, list[RunAttempt], list[RunEvent]]]:
    """What the store reads back for each ChangeSet's Run: the Run, its Attempts, its events."""
    return [(store.get_run(c.run.id), store.get_attempts(c.run.id), store.list_events(c.run.id, 0, 1_000))
            for c in changes]


def written_and_rolled_back(backend: Backend, write: Callable[[Any, Sequence[ChangeSet]], None],
                            changes: Sequence[ChangeSet]) -> list[Any]:
    """Write ``changes`` in one transaction, read them back in it, and roll it back."""
    seen: list[Any] = []

    def work(store: Any) -> None:
        write(store, changes)
        seen.extend(stored(store, changes))
        raise _RolledBack

    with pytest.raises(_RolledBack):
        backend.uow.write(work)  # type: ignore[attr-defined]
    return seen


def rows(backend: Backend) -> Iterator[tuple[str, list[dict[str, Any]]]]:
    assert backend.engine is not None
    with backend.engine.connect() as conn:
        for table, _ in TABLES:
            yield table.name, [dict(r._mapping) for r in conn.execute(select(table).order_by(table.c.id))]


def test_every_column_is_a_field_of_its_record() -> None:
    # What the mappers write is read off the records' fields: a column without a field would stay empty.
    for table, record in TABLES:
        assert set(table.columns.keys()) == {f.name for f in fields(record)}, table.name


def test_bulk_apply_stores_what_apply_stores(backend: Backend) -> None:
    changes = batch()
    expected = [(c.run, [w.attempt for w in c.attempt_writes], list(c.events)) for c in changes]

    assert written_and_rolled_back(backend, apply_each, changes) == expected
    assert written_and_rolled_back(backend, apply_many, changes) == expected


def test_bulk_apply_writes_the_rows_apply_writes_every_column(sql_backend: Backend) -> None:
    changes = batch()
    assert sql_backend.engine is not None
    sql_backend.uow.write(lambda store: apply_each(store, changes))  # type: ignore[attr-defined]
    by_apply = dict(rows(sql_backend))
    with sql_backend.engine.begin() as conn:
        for table, _ in reversed(TABLES):
            conn.execute(delete(table))
    sql_backend.uow.write(lambda store: apply_many(store, changes))  # type: ignore[attr-defined]
    by_bulk = dict(rows(sql_backend))

    assert by_bulk == by_apply
    counts = {name: len(found) for name, found in by_bulk.items()}
    assert counts == {"runs": 3, "run_attempts": 3, "run_events": sum(len(c.events) for c in changes)}
    full = changes[-1].run.id
    for name, found in by_bulk.items():
        for row in found:
            if full in (row["id"], row.get("run_id")):
                assert [k for k, v in row.items() if v is None and k not in UNSET] == [], (name, row)


def test_a_taken_key_fails_the_whole_batch(backend: Backend) -> None:
    first = batch("A~")
    backend.uow.write(lambda store: apply_many(store, first[:1]))  # type: ignore[attr-defined]
    again = batch("B~")
    taken = replace(again[0], run=replace(again[0].run, idempotency_key=first[0].run.idempotency_key))

    with pytest.raises(IdempotencyKeyTakenError):
        backend.uow.write(lambda store: apply_many(store, [again[1], taken]))  # type: ignore[attr-defined]
    assert backend.uow.read(lambda store: stored(store, again[:2])) == [(None, [], [])] * 2  # type: ignore[attr-defined]


def test_bulk_apply_only_inserts_new_runs(backend: Backend) -> None:
    new, opened = batch()[:2]
    moved = RunChange(opened.run, actor=ACTOR, at_ms=AT_MS, new_id=_ids("C~"))
    moved.move_run(RunStatus.SUCCEEDED)

    with pytest.raises(ValueError, match="only inserts new Runs"):
        backend.uow.write(lambda store: apply_many(store, [new, moved.result()]))  # type: ignore[attr-defined]
    assert backend.uow.read(lambda store: store.get_run(new.run.id)) is None  # type: ignore[attr-defined]
