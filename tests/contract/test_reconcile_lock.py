"""The reconciler's one-pass-at-a-time lock: per store, so stores in other schemas of one database never wait."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from bridge.storage.engine import make_engine
from bridge.storage.reconcile_queries import SqlReconcileStore
from tests.bench.stores import fresh_store
from tests.conftest import Backend


@pytest.fixture
def other_schema_store(postgres_url: str, tmp_path: Path) -> Iterator[SqlReconcileStore]:
    with fresh_store("postgres", tmp_path, postgres_url, name="other") as (url, schema):
        engine = make_engine(url, pg_search_path=schema)
        yield SqlReconcileStore(engine)
        engine.dispose()


@pytest.mark.postgres
def test_one_pass_at_a_time_per_store_and_stores_in_other_schemas_do_not_wait(
        postgres_backend: Backend, other_schema_store: SqlReconcileStore) -> None:
    assert postgres_backend.engine is not None
    mine, replica = SqlReconcileStore(postgres_backend.engine), SqlReconcileStore(postgres_backend.engine)
    with mine.singleton("a", 0, 60_000) as held:
        assert held
        with replica.singleton("b", 0, 60_000) as also:
            assert not also  # the same store: a replica waits for the next interval
        with other_schema_store.singleton("c", 0, 60_000) as elsewhere:
            assert elsewhere  # another bridge's store in the same database
    with replica.singleton("b", 0, 60_000) as after:
        assert after
