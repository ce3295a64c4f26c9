"""What a write lane executes: commands that are plain values with one JSON form, run in order per cron through
the lanes' one executor, refused (never queued without bound) when the lanes are full."""

from __future__ import annotations

import json
import threading
from concurrent.futures import Future

from hypothesis import given
from hypothesis import strategies as st

from bridge.callbacks.commands import (
    ApplyInstanceStop,
    ApplyStop,
    FactCommand,
    LaneCommand,
    RecordEnd,
    RecordStart,
    from_json,
    to_json,
)
from bridge.callbacks.lanes import WriteLanes
from bridge.metrics import BridgeMetrics
from bridge.service.callback_facts import CallbackFacts, ExecutionContext
from bridge.service.ports import TaskSnapshot

small = st.integers(min_value=0, max_value=2**53 - 1)
maybe_text = st.none() | st.text(max_size=40)
facts = st.builds(CallbackFacts, cron_id=st.integers(1, 10**9), pid=st.none() | small, log_ref=maybe_text,
                  started_at_ms=st.none() | small, duration_ms=st.none() | small,
                  exit_code=st.none() | st.integers(-255, 255) | st.floats(allow_nan=False, allow_infinity=False),
                  received_at_ms=small, log_path=maybe_text)
snapshots = st.none() | st.builds(TaskSnapshot, task_revision=st.text(max_size=20), task_id=st.text(max_size=20),
                                  legacy_cron_id=st.none() | small, name=maybe_text, command=maybe_text,
                                  schedule=maybe_text, work_dir=maybe_text, log_name=maybe_text, created_at_ms=small)
contexts = st.builds(ExecutionContext, origin=st.sampled_from(["manual", "script", "scheduled_node"]),
                     evidence=st.text(max_size=30), task_revision=st.text(max_size=20), snapshot=snapshots,
                     mode=st.sampled_from(["shadow", "primary"]), executor_handle=maybe_text)
commands: st.SearchStrategy[FactCommand] = st.one_of(
    st.builds(RecordStart, facts, contexts),
    st.builds(RecordEnd, facts, st.none() | small, st.booleans()),
    st.builds(ApplyStop, st.integers(1, 10**9), small),
    st.builds(ApplyInstanceStop, st.integers(1, 10**9), st.integers(1, 10**9), small),
)


@given(commands)
def test_every_command_comes_back_equal_from_its_json_text(command: FactCommand) -> None:
    assert from_json(json.loads(json.dumps(to_json(command)))) == command


def test_a_document_of_another_kind_is_refused() -> None:
    try:
        from_json({"kind": "run_closure"})
    except ValueError as exc:
        assert "run_closure" in str(exc)
    else:
        raise AssertionError("an unknown kind was accepted")


def end(cron_id: int, received_at_ms: int) -> RecordEnd:
    return RecordEnd(CallbackFacts(cron_id, 7, None, None, None, 0, received_at_ms), None)


def test_a_crons_commands_run_in_arrival_order_through_the_one_executor() -> None:
    seen: list[tuple[str, LaneCommand]] = []

    def execute(command: LaneCommand, _read_ahead: Future[object] | None) -> object:
        seen.append((threading.current_thread().name, command))
        return None

    lanes = WriteLanes(4, execute, budget_s=5.0, metrics=BridgeMetrics())
    sent = [end(5, at) for at in range(20)] + [ApplyStop(5, 99)]
    try:
        assert lanes.write_within_budget(sent) == sent
    finally:
        lanes.close()
    assert [command for _thread, command in seen] == sent
    assert len({thread for thread, _command in seen}) == 1  # one cron, one lane


def test_a_command_beyond_the_lanes_capacity_is_refused_and_an_overrun_counted() -> None:
    release = threading.Event()

    def execute(_command: LaneCommand, _read_ahead: Future[object] | None) -> object:
        release.wait(5)
        return None

    metrics = BridgeMetrics()
    lanes = WriteLanes(1, execute, budget_s=0.01, metrics=metrics, capacity=2)
    try:
        accepted = lanes.write_within_budget([end(1, 1), end(1, 2), end(1, 3)])
    finally:
        release.set()
        lanes.close()
    assert accepted == [end(1, 1), end(1, 2)]  # the third is the caller's to keep or count
    assert metrics.value("ql_bridge_shadow_write_failed_total", origin="other", error="timeout") == 2


def test_each_refused_command_reaches_the_caller_even_the_twin_of_one_taken() -> None:
    release = threading.Event()

    def execute(_command: LaneCommand, _read_ahead: Future[object] | None) -> object:
        release.wait(5)
        return None

    refused: list[FactCommand] = []
    lanes = WriteLanes(1, execute, budget_s=0.01, metrics=BridgeMetrics(), capacity=1)
    try:
        twins = [end(1, 1), end(1, 1)]  # a callback naming the same cron twice: equal commands
        assert lanes.write_within_budget(twins, None, refused.append) == [end(1, 1)]
    finally:
        release.set()
        lanes.close()
    assert refused == [end(1, 1)]  # the refused twin is not mistaken for the taken one
