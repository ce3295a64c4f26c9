"""The local fact journal (bridge.storage.journal): ordered, durable across a restart, bounded; and the keeper on
it (bridge.callbacks.keeper): facts kept while the store does not take them come back in order, once, through the
executor, and what a full journal cannot keep is counted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bridge.callbacks.commands import ApplyStop, FactCommand, RecordEnd, from_json
from bridge.callbacks.keeper import FactKeeper, StoreStillOut
from bridge.domain.errors import InvalidRunTransitionError, StoreUnavailableError
from bridge.metrics import BridgeMetrics
from bridge.service.callback_facts import CallbackFacts
from bridge.storage.journal import SqliteFactJournal


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000_000

    def now_ms(self) -> int:
        return self.now


def end(cron_id: int, pid: int) -> RecordEnd:
    return RecordEnd(CallbackFacts(cron_id, pid, "ref", 1_799_999_990_000, 3000, 0, 1_799_999_999_000), 1_799_999_990)


def test_entries_come_back_in_the_order_kept_and_survive_a_reopen(tmp_path: Path) -> None:
    path = tmp_path / "journal" / "facts.sqlite"
    journal = SqliteFactJournal(path, capacity=10)
    for n in range(5):
        assert journal.append(f"doc-{n}", 1000 + n)
    journal.remove([entry.id for entry in journal.oldest(2)])
    journal.close()

    reopened = SqliteFactJournal(path, capacity=10)
    assert [(e.document, e.kept_at_ms) for e in reopened.oldest(10)] == [(f"doc-{n}", 1000 + n) for n in (2, 3, 4)]
    assert reopened.size() == 3 and reopened.oldest_kept_at_ms() == 1002
    reopened.close()


def test_a_full_journal_refuses_and_keeps_what_it_had(tmp_path: Path) -> None:
    journal = SqliteFactJournal(tmp_path / "facts.sqlite", capacity=2)
    assert journal.append("a", 1) and journal.append("b", 2)
    assert not journal.append("c", 3)
    assert [e.document for e in journal.oldest(10)] == ["a", "b"]
    journal.close()


@pytest.fixture
def keeper_world(tmp_path: Path):  # type: ignore[no-untyped-def]
    journal = SqliteFactJournal(tmp_path / "facts.sqlite", capacity=3)
    metrics, clock = BridgeMetrics(), Clock()
    yield journal, FactKeeper(journal, metrics, clock), metrics, clock
    journal.close()


def test_while_the_journal_holds_facts_new_ones_join_it_and_replay_runs_them_in_order_once(keeper_world) -> None:  # type: ignore[no-untyped-def]
    journal, keeper, metrics, clock = keeper_world
    assert not keeper.hold(end(1, 1))  # nothing held: the caller writes to the store itself
    keeper.keep(end(1, 1), "store_unavailable")
    assert keeper.holding and keeper.hold(ApplyStop(2, 5))  # joins behind the kept fact
    executed: list[FactCommand] = []

    clock.now += 4_000
    assert keeper.replay_once(executed.append) == 2
    assert executed == [end(1, 1), ApplyStop(2, 5)]
    assert not keeper.holding and journal.size() == 0
    assert keeper.replay_once(executed.append) == 0 and len(executed) == 2
    assert metrics.value("ql_bridge_journal_kept_total", reason="store_unavailable") == 1
    assert metrics.value("ql_bridge_journal_kept_total", reason="queued") == 1
    assert metrics.value("ql_bridge_journal_replayed_total", result="ok") == 2
    assert metrics.value("ql_bridge_journal_replay_lag_seconds_sum") == 8.0


def test_replay_stops_at_a_store_still_out_and_keeps_that_fact_first(keeper_world) -> None:  # type: ignore[no-untyped-def]
    journal, keeper, metrics, _clock = keeper_world
    for pid in (1, 2, 3):
        keeper.keep(end(1, pid), "store_unavailable")
    calls: list[int] = []

    def second_fails(command: FactCommand) -> None:
        assert isinstance(command, RecordEnd)
        calls.append(command.facts.pid or 0)
        if command.facts.pid == 2:
            raise StoreUnavailableError("the bridge store is unavailable")

    with pytest.raises(StoreStillOut):
        keeper.replay_once(second_fails)
    assert calls == [1, 2] and keeper.holding
    assert [from_json(json.loads(e.document)) for e in journal.oldest(10)] == [end(1, 2), end(1, 3)]


def test_a_fact_the_rules_refuse_on_replay_is_counted_and_not_retried(keeper_world) -> None:  # type: ignore[no-untyped-def]
    _journal, keeper, metrics, _clock = keeper_world
    keeper.keep(end(1, 1), "store_busy")

    def refuse(_command: FactCommand) -> None:
        raise InvalidRunTransitionError("r", "succeeded", "running")

    assert keeper.replay_once(refuse) == 1 and not keeper.holding
    assert metrics.value("ql_bridge_journal_replayed_total", result="failed") == 1


def test_what_a_full_journal_cannot_keep_is_counted_as_dropped(keeper_world) -> None:  # type: ignore[no-untyped-def]
    journal, keeper, metrics, _clock = keeper_world
    for pid in range(5):
        keeper.keep(end(1, pid), "store_unavailable")
    assert journal.size() == 3
    assert metrics.value("ql_bridge_journal_dropped_total", reason="full") == 2


def test_a_restarted_process_holds_what_the_last_one_kept(tmp_path: Path) -> None:
    path = tmp_path / "facts.sqlite"
    first = SqliteFactJournal(path, capacity=10)
    FactKeeper(first, BridgeMetrics(), Clock()).keep(end(3, 7), "store_unavailable")
    first.close()
    journal = SqliteFactJournal(path, capacity=10)
    keeper = FactKeeper(journal, BridgeMetrics(), Clock())
    executed: list[FactCommand] = []
    assert keeper.holding and keeper.replay_once(executed.append) == 1
    assert executed == [end(3, 7)]
    journal.close()


def test_serving_knows_at_start_that_the_last_process_left_facts_to_replay(tmp_path: Path) -> None:
    from bridge.bootstrap import JOURNAL_FILE, journal_holds_facts
    from bridge.config import Settings

    settings = Settings.from_env({"BRIDGE_DATA_DIR": str(tmp_path)})
    assert not journal_holds_facts(settings)  # no journal yet: nothing to wait for
    journal = SqliteFactJournal(tmp_path / JOURNAL_FILE, capacity=10)
    assert not journal_holds_facts(settings)
    FactKeeper(journal, BridgeMetrics(), Clock()).keep(end(3, 7), "store_unavailable")
    journal.close()
    assert journal_holds_facts(settings)
