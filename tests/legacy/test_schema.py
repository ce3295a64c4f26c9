from __future__ import annotations

import sqlite3
from contextlib import closing
from datetime import timedelta, timezone

from legacy_adapters.schema import (
    DATABASE_DDL,
    KEYV_DDL,
    CrontabStatus,
    InstanceStatus,
    format_js_date_string,
    format_updated_at,
)


def test_updated_at_uses_the_sequelize_on_disk_text() -> None:
    assert format_updated_at(1784340000123) == "2026-07-18 02:00:00.123 +00:00"
    assert format_updated_at(0) == "1970-01-01 00:00:00.000 +00:00"


def test_js_date_string_matches_date_to_string_in_shanghai() -> None:
    shanghai = timezone(timedelta(hours=8), "CST")
    assert format_js_date_string(1784340000000, shanghai) == ("Sat Jul 18 2026 10:00:00 GMT+0800 (China Standard Time)")


def test_the_exact_ddl_creates_the_documented_tables_and_indexes() -> None:
    with closing(sqlite3.connect(":memory:")) as conn:
        for statement in (*DATABASE_DDL, KEYV_DDL):
            conn.execute(statement)
        objects = {name for (name,) in conn.execute("SELECT name FROM sqlite_master")}
        crontab_sql = conn.execute("SELECT sql FROM sqlite_master WHERE name = 'Crontabs'").fetchone()[0]
    assert {
        "Crontabs",
        "RunningInstances",
        "CrontabStats",
        "Apps",
        "keyv",
        "crontab_stats_ref_id_date",
        "crontab_stats_date",
        "sqlite_autoindex_Crontabs_1",
    } <= objects
    assert crontab_sql.endswith("UNIQUE (`name`, `command`, `schedule`))")


def test_numeric_enums_follow_the_2x_values() -> None:
    assert [s.value for s in CrontabStatus] == [0, 1, 2, 3]
    assert (InstanceStatus.RUNNING, InstanceStatus.FINISHED, InstanceStatus.STOPPED, InstanceStatus.ERROR) == (
        0,
        1,
        2,
        3,
    )
