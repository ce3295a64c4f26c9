"""store_capabilities: what each backend can do, asked for instead of the dialect's name."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import create_engine

from bridge.storage.engine import StoreCapabilities, store_capabilities


def test_sqlite_has_one_writer_and_postgresql_serializable_writes_roles_and_round_trips(tmp_path: Path) -> None:
    sqlite = create_engine(f"sqlite:///{tmp_path / 'store.sqlite'}")
    postgres = create_engine("postgresql+psycopg://nobody@127.0.0.1:1/none")  # never connects
    try:
        assert store_capabilities(sqlite) == StoreCapabilities(single_writer=True, serializable_writes=False,
                                                               database_roles=False, reads_are_round_trips=False)
        assert store_capabilities(postgres) == StoreCapabilities(single_writer=False, serializable_writes=True,
                                                                 database_roles=True, reads_are_round_trips=True)
    finally:
        sqlite.dispose()
        postgres.dispose()
