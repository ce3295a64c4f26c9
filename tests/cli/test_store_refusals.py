"""A store the command cannot use is one line naming which failure and where, never a traceback, and
never a side effect: a missing store is not created, a newer one is not written, a read-only one is said."""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url

from bridge.config import Settings
from bridge.storage.migrate import head_revision
from tests.cli.conftest import Cli, dump, one_line_failure, read_only_mount

FUTURE = "0042_from_the_future"
# Every command that opens the bridge store; each argument list must reach the store.
STORE_COMMANDS = [
    ("status",),
    ("serve",),
    ("flags", "show"),
    ("flags", "set", "manual", "shadow", "--actor", "ops", "--reason", "try"),
    ("flags", "admin-token"),
    ("reconcile",),
    ("report",),
    ("import-legacy",),
    ("projection", "retry"),
]


@pytest.mark.parametrize("args", [*STORE_COMMANDS, ("db", "upgrade")], ids=" ".join)
def test_a_store_newer_than_the_code_is_refused_by_every_command_naming_both_revisions(
        cli: Cli, store: Path, legacy_dir: Path, args: tuple[str, ...]) -> None:
    with sqlite3.connect(store) as conn:
        conn.execute("UPDATE alembic_version SET version_num = ?", (FUTURE,))
    before = dump(store)

    line = one_line_failure(cli(*args))

    assert "newer than this code" in line and FUTURE in line and head_revision() in line, line
    assert str(store) in line
    assert dump(store) == before


@pytest.mark.parametrize("args", STORE_COMMANDS, ids=" ".join)
def test_a_missing_store_is_one_line_and_is_not_created(cli: Cli, tmp_path: Path, legacy_dir: Path,
                                                         args: tuple[str, ...]) -> None:
    path = tmp_path / "var" / "bridge.sqlite"

    line = one_line_failure(cli(*args))

    assert line == f"ql-bridge: no store at {path}: run `ql-bridge db upgrade`"
    assert not path.exists() and not path.parent.exists()


def test_an_empty_or_older_store_is_refused_with_the_upgrade_hint(cli: Cli, store: Path) -> None:
    with sqlite3.connect(store) as conn:
        conn.execute("DELETE FROM alembic_version")

    line = one_line_failure(cli("flags", "show"))

    assert line == f"ql-bridge: SCHEMA_MISMATCH: the bridge store at {store} is empty: run `ql-bridge db upgrade`"
    status = cli("status")
    assert status.returncode == 1 and "run `ql-bridge db upgrade`" in status.stdout
    assert "every origin off" not in status.stdout, "the modes of a store not at head are not known"


def test_status_of_a_store_in_a_read_only_folder_says_so(cli: Cli, store: Path) -> None:
    line = one_line_failure(cli("status", prefix=read_only_mount(store.parent)))

    assert line.startswith(f"ql-bridge: STORE_UNAVAILABLE: the bridge store at {store} is unavailable: ")
    assert f"its folder {store.parent} is read-only" in line


@pytest.mark.parametrize("command", [("flags", "set", "manual", "shadow", "--actor", "ops", "--reason", "try"),
                                     ("serve",)], ids=" ".join)
@pytest.mark.parametrize("how", ["read-only folder", "immutable file", "mode=ro URL"])
def test_a_read_only_store_is_one_line_saying_read_only_and_where(
        cli: Cli, store: Path, how: str, command: tuple[str, ...],
        make_immutable: Callable[[Path], None]) -> None:
    prefix: list[str] = []
    if how == "read-only folder":
        prefix = read_only_mount(store.parent)
    elif how == "immutable file":
        make_immutable(store)
    else:
        cli.env["BRIDGE_DATABASE_URL"] = f"sqlite:///file:{store}?mode=ro&uri=true"
    before = dump(store)

    line = one_line_failure(cli(*command, prefix=prefix, timeout=30))

    assert line.startswith(f"ql-bridge: STORE_UNAVAILABLE: the bridge store at {store} is unavailable: "), line
    assert "read-only" in line
    assert dump(store) == before


def test_status_reads_an_immutable_store(cli: Cli, store: Path, make_immutable: Callable[[Path], None]) -> None:
    make_immutable(store)

    result = cli("status")

    assert result.returncode == 0, result.stderr
    assert "up to date" in result.stdout


@pytest.mark.parametrize("content", [b"not a database at all" * 100, b""], ids=["garbage", "empty file"])
def test_a_file_that_is_not_a_store(cli: Cli, tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "var" / "bridge.sqlite"
    path.parent.mkdir()
    path.write_bytes(content)

    line = one_line_failure(cli("status") if content else cli("flags", "show"))

    assert str(path) in line
    assert ("not an SQLite database" in line) if content else ("is empty: run `ql-bridge db upgrade`" in line)


def test_db_upgrade_to_an_unknown_revision_is_one_line_and_creates_nothing(cli: Cli, tmp_path: Path) -> None:
    path = tmp_path / "var" / "bridge.sqlite"

    line = one_line_failure(cli("db", "upgrade", "--revision", "nosuch"))

    assert "--revision nosuch" in line and head_revision() in line and str(path) in line
    assert not path.exists()


def test_a_data_folder_that_cannot_be_made_is_one_line(cli: Cli, tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("")

    line = one_line_failure(cli("db", "upgrade", BRIDGE_DATA_DIR=str(tmp_path / "a-file" / "var")))

    assert str(tmp_path / "a-file") in line


def test_a_postgresql_server_that_is_not_there(cli: Cli) -> None:
    line = one_line_failure(cli("status", BRIDGE_DATABASE_URL="postgresql://ops:s3cret@127.0.0.1:1/bridge"))

    assert line.startswith("ql-bridge: STORE_UNAVAILABLE: the bridge store at 127.0.0.1:1/bridge is unavailable: ")
    assert "connection refused" in line
    assert "s3cret" not in line


@pytest.mark.postgres
def test_a_postgresql_database_that_does_not_exist(cli: Cli, postgres_url: str) -> None:
    server = make_url(postgres_url)
    name = f"nosuch_{uuid.uuid4().hex[:8]}"
    url = server.set(database=name).render_as_string(hide_password=False)

    line = one_line_failure(cli("flags", "show", BRIDGE_DATABASE_URL=url))

    where = f"{server.host}:{server.port or 5432}/{name}"
    assert line.startswith(f"ql-bridge: STORE_UNAVAILABLE: the bridge store at {where} is unavailable: "), line
    assert f"database '{name}' does not exist" in line


@pytest.mark.postgres
def test_a_postgresql_user_the_server_refuses(cli: Cli, postgres_url: str) -> None:
    server = make_url(postgres_url)
    role = f"nosuch_{uuid.uuid4().hex[:8]}"
    url = server.set(username=role, password="s3cret").render_as_string(hide_password=False)

    line = one_line_failure(cli("status", BRIDGE_DATABASE_URL=url))

    assert f"the server refused user '{role}'" in line
    assert "s3cret" not in line


def test_a_postgres_scheme_url_is_accepted_like_postgresql() -> None:
    settings = Settings.from_env({"BRIDGE_DATABASE_URL": "postgres://ops@db.example:5432/bridge"})

    assert settings.database_url == "postgresql+psycopg://ops@db.example:5432/bridge"


@pytest.mark.postgres
def test_the_cli_works_on_a_postgres_scheme_url(cli: Cli, postgres_url: str, postgres_schema: str) -> None:
    server = make_url(postgres_url)
    url = "postgres://" + server.render_as_string(hide_password=False).partition("://")[2]
    cli.env |= {"BRIDGE_DATABASE_URL": url, "BRIDGE_DATABASE_SCHEMA": postgres_schema}

    upgraded = cli("db", "upgrade")
    status = cli("status")

    assert upgraded.returncode == 0, upgraded.stderr
    assert status.returncode == 0 and "up to date" in status.stdout, status.stdout + status.stderr
