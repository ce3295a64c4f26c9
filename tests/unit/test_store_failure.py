"""describe_store_failure: a failure of the bridge store as its code and the one line the command line prints,
naming the store (never its password) and the driver's cause; anything else is left to the caller."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from alembic.util import CommandError
from sqlalchemy import create_engine
from sqlalchemy.exc import DBAPIError, ResourceClosedError

from bridge.domain.errors import RunNotFoundError, SchemaMismatchError
from bridge.storage.errors import STORE_FAILURES, StoreFailure, describe_store_failure, url_without_password


def connect_error(url: str) -> DBAPIError:
    engine = create_engine(url)
    try:
        with pytest.raises(DBAPIError) as caught:
            engine.connect()
    finally:
        engine.dispose()
    return caught.value


def test_a_sqlite_store_in_a_folder_that_is_not_there(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/gone/bridge.sqlite"

    failure = describe_store_failure(connect_error(url), url)

    assert failure == StoreFailure("STORE_UNAVAILABLE", f"STORE_UNAVAILABLE: the bridge store at {tmp_path}/gone/"
                                   f"bridge.sqlite is unavailable: its folder {tmp_path}/gone does not exist")


def test_a_postgresql_server_that_refuses_is_named_without_the_password() -> None:
    url = "postgresql+psycopg://ops:s3cret@127.0.0.1:1/bridge"

    failure = describe_store_failure(connect_error(url), url)

    assert failure is not None and failure.code == "STORE_UNAVAILABLE"
    assert failure.line.startswith("STORE_UNAVAILABLE: the bridge store at 127.0.0.1:1/bridge is unavailable")
    assert "s3cret" not in failure.line


def test_a_bare_sqlite3_error_and_another_sqlalchemy_error_are_storage_errors(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/bridge.sqlite"

    not_a_database = describe_store_failure(sqlite3.DatabaseError("file is not a database"), url)
    closed = describe_store_failure(ResourceClosedError("This result object is closed."), url)

    assert not_a_database == StoreFailure("STORAGE_ERROR", f"STORAGE_ERROR: the bridge store at {tmp_path}/"
                                          "bridge.sqlite failed: the file is not an SQLite database")
    assert closed == StoreFailure("STORAGE_ERROR", f"STORAGE_ERROR: the bridge store at {tmp_path}/bridge.sqlite "
                                  "failed")


def test_alembics_refusal_has_no_code_and_says_the_store_is_unchanged() -> None:
    failure = describe_store_failure(CommandError("Can't locate revision identified by 'nope'"),
                                     "sqlite:////var/lib/bridge.sqlite")

    assert failure == StoreFailure(None, "alembic: Can't locate revision identified by 'nope'; the bridge store at "
                                         "/var/lib/bridge.sqlite is unchanged")


def test_a_schema_refusal_keeps_its_own_message() -> None:
    refusal = SchemaMismatchError("the bridge store at /s is at revision 0099, newer than this code's 0014")

    failure = describe_store_failure(refusal, "sqlite:////s")

    assert failure == StoreFailure("SCHEMA_MISMATCH", f"SCHEMA_MISMATCH: {refusal.message}")


@pytest.mark.parametrize("exc", [ValueError("x"), OSError(2, "No such file"), RunNotFoundError("r")],
                         ids=["value", "os", "bridge"])
def test_what_is_not_a_store_failure_is_left_to_the_caller(exc: Exception) -> None:
    assert not isinstance(exc, STORE_FAILURES)
    assert describe_store_failure(exc, "sqlite:////s") is None


def test_a_url_is_shown_without_its_password() -> None:
    assert url_without_password("postgresql+psycopg://ops:s3cret@db:5432/bridge") == \
        "postgresql+psycopg://ops:***@db:5432/bridge"
