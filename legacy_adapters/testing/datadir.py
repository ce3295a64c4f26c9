"""A throwaway 2.x data directory (db/, config/token.json, log/) for tests and the demo only.

Part of the 2.x test double: it follows docs/legacy-2x.md#the-database and never touches a real install.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import signal
import sqlite3
import string
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import closing, contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, tzinfo
from pathlib import Path
from typing import Any

from legacy_adapters.schema import (
    APPS_DDL,
    CRONTABS_DDL,
    DATABASE_DDL,
    KEYV_DDL,
    CrontabStatus,
    format_js_date_string,
    format_updated_at,
)

DEFAULT_SYSTEM_SCOPES = ("crons", "system", "dashboard")  # what initData gives the system app
NEWEST_RELEASE = "v2.21.0"
# Crontabs as Sequelize's sync() creates it on a fresh install of a release line before v2.21 (model order,
# back/data/cron.ts; docs/legacy-2x.md#crontabs-before-v221): v2.17–v2.19 end at task_after, v2.20 adds log_name
# and allow_multiple_instances, v2.21 work_dir. Neither RunningInstances nor CrontabStats exists before v2.21.
_COLUMNS_FROM = {"log_name": (2, 20), "allow_multiple_instances": (2, 20), "work_dir": (2, 21)}
TOKEN_LIFETIME_S = 2_592_000  # 30 days, as GET /open/auth/token issues
_CRON_COLUMNS = frozenset(re.findall(r"`(\w+)` (?!INTEGER PRIMARY)[A-Z]", CRONTABS_DDL))


def connect(database_path: Path) -> sqlite3.Connection:
    """A writer connection like 2.x's: autocommit, rollback journal (no WAL), waits on locks."""
    conn = sqlite3.connect(database_path, timeout=5.0, isolation_level=None, check_same_thread=False)
    conn.row_factory = sqlite3.Row
    return conn


@contextmanager
def immediate(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """One short ``BEGIN IMMEDIATE`` transaction, as Sequelize runs each 2.x write."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def js_json(value: Any) -> str:
    """JSON.stringify text, as Sequelize stores a JSON column."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def uniq_path(command: str, cron_id: int) -> str:
    """2.x ``getUniqPath``: the default log directory, e.g. ``task ql_sample.js`` id 5 -> ql_sample_5."""
    items = re.split(r" +", command.strip())
    if items[0] == "task":
        items = items[1:]
        if items[:1] == ["-m"]:
            items = items[2:]
    name = items[0] if items else ""
    name = name[: name.rfind(".")] if "." in name else name
    if "/" in name:
        parent, base = name.rsplit("/", 1)
        name = f"{parent.rsplit('/', 1)[-1]}_{base}"
    return f"{name}_{cron_id}"


@dataclass(frozen=True)
class LegacyDataDir:
    """The files of a fake 2.x ``data/`` root plus the tokens written into its keyv cache."""

    root: Path
    system_token: str
    limited_token: str | None = None
    expired_token: str | None = None
    tz: tzinfo | None = None

    @property
    def database_path(self) -> Path:
        return self.root / "db" / "database.sqlite"

    @property
    def keyv_path(self) -> Path:
        return self.root / "db" / "keyv.sqlite"

    @property
    def token_json_path(self) -> Path:
        return self.root / "config" / "token.json"

    @property
    def log_dir(self) -> Path:
        return self.root / "log"

    def add_cron(self, name: str | None, command: str, schedule: str, **cols: Any) -> int:
        """Insert a Crontabs row as 2.x's create does; ``cols`` override columns by DB name."""
        unknown = set(cols) - _CRON_COLUMNS
        if unknown:
            raise ValueError(f"not Crontabs columns: {sorted(unknown)}")
        now_ms = int(time.time() * 1000)
        row: dict[str, Any] = {
            "name": name,
            "command": command.strip(),
            "schedule": schedule,
            "timestamp": format_js_date_string(now_ms, self.tz),
            "saved": 0,
            "status": int(CrontabStatus.IDLE),
            "isSystem": 0,
            "isDisabled": 0,
            "isPinned": 0,
            "createdAt": format_updated_at(now_ms),
            "updatedAt": format_updated_at(now_ms),
        }
        row.update({k: js_json(v) if isinstance(v, (list, dict)) else v for k, v in cols.items()})
        names = ", ".join(f"`{k}`" for k in row)
        with closing(connect(self.database_path)) as conn, immediate(conn):
            cron_id = int(
                conn.execute(
                    f"INSERT INTO Crontabs ({names}) VALUES ({', '.join('?' * len(row))})", tuple(row.values())
                ).lastrowid
                or 0
            )
            columns = {row[1] for row in conn.execute("PRAGMA table_info(Crontabs)")}
            if "log_name" not in cols and "log_name" in columns:
                conn.execute("UPDATE Crontabs SET log_name = ? WHERE id = ?", (uniq_path(command, cron_id), cron_id))
        return cron_id

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]:
        """Rows of a read query against database.sqlite, as dicts (for assertions)."""
        with closing(connect(self.database_path)) as conn:
            return [dict(row) for row in conn.execute(sql, params)]

    def cron_row(self, cron_id: int) -> dict[str, Any] | None:
        """The raw Crontabs row, on-disk values untouched."""
        rows = self.query("SELECT * FROM Crontabs WHERE id = ?", (cron_id,))
        return rows[0] if rows else None

    def instance_rows(self, cron_id: int) -> list[dict[str, Any]]:
        """The raw RunningInstances rows of a cron in id order."""
        return self.query("SELECT * FROM RunningInstances WHERE cron_id = ? ORDER BY id", (cron_id,))

    def leave_hot_journal(self, rows: int = 400) -> Path:
        """Kill a 2.x-like writer (SIGKILL, in a child process) in the middle of a large write transaction.

        Its small page cache spills uncommitted pages into database.sqlite before it dies, so the rollback
        journal left behind is hot: the file is only consistent again once a connection with write access
        has rolled it back (2.x's next access does). Returns the journal's path.
        """
        return _kill_writer_mid_transaction(self.database_path, [
            "UPDATE Crontabs SET command = command || ' ' || hex(randomblob(64))",
            f"INSERT INTO Crontabs (name, command, schedule, createdAt, updatedAt) {_numbers(rows)} "
            "SELECT 'filler ' || n, hex(randomblob(300)), '0 * * * *', '', '' FROM numbers"])

    def leave_hot_keyv_journal(self, rows: int = 400) -> Path:
        """The same for keyv.sqlite: Keyv's writer (2.x's cache of Apps and authInfo) killed mid-transaction."""
        return _kill_writer_mid_transaction(self.keyv_path, [
            "UPDATE keyv SET value = value || ''",
            f"INSERT INTO keyv (key, value) {_numbers(rows)} SELECT 'keyv:filler' || n, hex(randomblob(300)) "
            "FROM numbers"])

    def roll_back_hot_journal(self) -> None:
        """What 2.x's next access does: a connection with write access reads, and SQLite rolls the journal back."""
        with closing(connect(self.database_path)) as conn:
            conn.execute("SELECT count(*) FROM Crontabs").fetchone()

    def write_keyv(self, key: str, value: Any) -> None:
        """Store ``value`` under ``keyv:<key>`` the way Keyv does (a value/expires envelope)."""
        with closing(connect(self.keyv_path)) as conn, immediate(conn):
            conn.execute(
                "INSERT OR REPLACE INTO keyv (key, value) VALUES (?, ?)",
                (f"keyv:{key}", js_json({"value": value, "expires": None})),
            )


_WRITER_SCRIPT = """
import sqlite3, sys, time
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute('PRAGMA cache_size=1')
conn.execute('BEGIN IMMEDIATE')
for statement in sys.argv[2:]:
    conn.execute(statement)
print('ready', flush=True)
time.sleep(60)
"""


def _numbers(count: int) -> str:
    """A CTE ``numbers(n)`` of 1..count, to insert many rows in one statement."""
    return f"WITH RECURSIVE numbers(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM numbers WHERE n < {int(count)})"


def _kill_writer_mid_transaction(path: Path, statements: list[str]) -> Path:
    """Run ``statements`` in one write transaction in a child with a one-page cache, SIGKILL it before it commits,
    and return the hot rollback journal it left beside ``path``."""
    child = subprocess.Popen([sys.executable, "-c", _WRITER_SCRIPT, str(path), *statements],
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
        if child.stdout is not None:
            child.stdout.close()
    journal = path.with_name(path.name + "-journal")
    assert journal.is_file() and journal.stat().st_size > 0, "the killed writer left no journal"
    return journal


def _random_text(length: int) -> str:
    return "".join(secrets.choice(string.ascii_letters + string.digits) for _ in range(length))


def _app(app_id: int, name: str, scopes: Sequence[str], tokens: list[dict[str, Any]], now_s: int) -> dict[str, Any]:
    iso = datetime.fromtimestamp(now_s, tz=UTC).isoformat(timespec="milliseconds")
    iso = iso.replace("+00:00", "Z")
    return {
        "id": app_id,
        "name": name,
        "scopes": list(scopes),
        "client_id": _random_text(12),
        "client_secret": _random_text(24),
        "tokens": tokens,
        "createdAt": iso,
        "updatedAt": iso,
    }


def create_legacy_data_dir(
    root: Path,
    *,
    tokens: Sequence[str] | None = None,
    scopes: Sequence[str] = DEFAULT_SYSTEM_SCOPES,
    limited_app: bool = True,
    expired_token: bool = True,
    now_s: int | None = None,
    tz: tzinfo | None = None,
    release: str = NEWEST_RELEASE,
) -> LegacyDataDir:
    """Create ``root/db/{database,keyv}.sqlite``, ``root/config/token.json`` and ``root/log/``.

    The ``system`` app gets ``tokens`` (default: one uuid4) valid for 30 days and ``scopes``;
    optionally an app without the ``crons`` scope and an already expired system token. ``release`` (``v2.20.2``,
    ``v2.17.13``…) shapes the database as a fresh install of it: no RunningInstances before v2.21, no
    ``keyv.sqlite`` before v2.18.
    """
    now = int(time.time()) if now_s is None else now_s
    valid = list(tokens) if tokens else [str(uuid.uuid4())]
    expired = str(uuid.uuid4()) if expired_token else None
    limited = str(uuid.uuid4()) if limited_app else None
    for sub in ("db", "config", "log", "scripts"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    system_tokens = [{"value": t, "expiration": now + TOKEN_LIFETIME_S} for t in valid]
    if expired:
        system_tokens.append({"value": expired, "expiration": now - 60})
    apps = [_app(1, "system", scopes, system_tokens, now)]
    if limited:
        apps.append(_app(2, "limited", ["envs"], [{"value": limited, "expiration": now + TOKEN_LIFETIME_S}], now))
    data_dir = LegacyDataDir(root, valid[0], limited, expired, tz)
    _create_databases(data_dir, apps, now, release)
    data_dir.token_json_path.write_text(js_json({"value": valid[0], "expiration": now + TOKEN_LIFETIME_S}) + "\n")
    return data_dir


def _line(release: str) -> tuple[int, int]:
    match = re.match(r"^v?2\.(\d+)", release)
    if match is None:
        raise ValueError(f"not a 2.x release: {release!r}")
    return (2, int(match[1]))


def crontabs_ddl(release: str) -> str:
    """The Crontabs DDL a fresh install of ``release`` creates: v2.21.0's without the columns added later."""
    line = _line(release)
    ddl = CRONTABS_DDL
    for column, since in _COLUMNS_FROM.items():
        if line < since:
            ddl = re.sub(rf"`{column}` [A-Z]+(\(\d+\))?, ", "", ddl)
    return ddl


def database_ddl(release: str) -> tuple[str, ...]:
    """Every table of a fresh ``release`` install's database.sqlite: before v2.21 its Crontabs and Apps only."""
    if _line(release) >= (2, 21):
        return DATABASE_DDL
    return (crontabs_ddl(release), APPS_DDL)


def _create_databases(data_dir: LegacyDataDir, apps: list[dict[str, Any]], now_s: int, release: str) -> None:
    stamp = format_updated_at(now_s * 1000)
    with closing(connect(data_dir.database_path)) as conn:
        for statement in database_ddl(release):
            conn.execute(statement)
        with immediate(conn):
            conn.executemany(
                "INSERT INTO Apps (id, name, scopes, client_id, client_secret, tokens, "
                "createdAt, updatedAt) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    (
                        a["id"],
                        a["name"],
                        js_json(a["scopes"]),
                        a["client_id"],
                        a["client_secret"],
                        js_json(a["tokens"]),
                        stamp,
                        stamp,
                    )
                    for a in apps
                ],
            )
    if _line(release) < (2, 18):
        return  # v2.17 reads /open/* tokens from Apps; keyv.sqlite arrives in v2.18.0
    with closing(connect(data_dir.keyv_path)) as conn:
        conn.execute(KEYV_DDL)
    data_dir.write_keyv("apps", apps)
    data_dir.write_keyv("authInfo", {"username": "admin", "token": "", "tokens": {}})
