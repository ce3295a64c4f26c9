"""pin_sqlite_index: every FROM of the index's table names the index; other tables and other dialects are untouched."""

from __future__ import annotations

import pytest
from sqlalchemy.dialects import postgresql, sqlite

from bridge.storage.outbox import _NEWEST_ACTIVE
from bridge.storage.runs import _ACTIVE_CANDIDATES
from bridge.storage.schema import index_named, runs_table
from bridge.storage.statements import pin_sqlite_index


def test_each_from_of_the_table_names_the_index_and_other_tables_are_left_alone() -> None:
    sql, _ = _ACTIVE_CANDIDATES.bind(sqlite.dialect(), {"b_cron": 1, "b_limit": 8})
    assert sql.count("FROM runs INDEXED BY ix_runs_active_by_cron") == 1
    assert "FROM run_attempts AS latest" in sql  # the correlated subquery reads its own table as before
    union, _ = _NEWEST_ACTIVE.bind(sqlite.dialect(), {"cron_id": 1})
    assert union.count("FROM runs INDEXED BY ix_runs_bridge_owned_by_cron") == union.count("FROM runs") > 1


def test_postgresql_text_is_not_pinned() -> None:
    sql, _ = _ACTIVE_CANDIDATES.bind(postgresql.dialect(), {"b_cron": 1, "b_limit": 8})
    assert "INDEXED BY" not in sql


def test_a_statement_without_the_table_is_refused() -> None:
    open_runs = index_named(runs_table, "ix_runs_active_by_cron")
    with pytest.raises(ValueError, match="no FROM runs"):
        pin_sqlite_index("SELECT id FROM run_attempts WHERE run_id = ?", open_runs)
