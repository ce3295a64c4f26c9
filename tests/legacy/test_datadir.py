from __future__ import annotations

import json
import re
import sqlite3
import time
from contextlib import closing

from legacy_adapters.schema import format_updated_at
from legacy_adapters.testing.datadir import LegacyDataDir, uniq_path

UUID4 = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")


def test_the_data_dir_has_the_2x_layout_and_a_rollback_journal(legacy_dir: LegacyDataDir) -> None:
    assert legacy_dir.database_path.is_file() and legacy_dir.log_dir.is_dir()
    with closing(sqlite3.connect(legacy_dir.database_path)) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
        tables = {n for (n,) in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert {"Crontabs", "RunningInstances", "CrontabStats", "Apps", "sqlite_sequence"} <= tables


def test_token_json_holds_the_valid_system_token_and_a_newline(legacy_dir: LegacyDataDir) -> None:
    text = legacy_dir.token_json_path.read_text()
    assert text.endswith("}\n") and text.startswith('{"value":"')
    token = json.loads(text)
    assert token["value"] == legacy_dir.system_token and UUID4.match(token["value"])
    assert 29 * 86400 < token["expiration"] - time.time() <= 30 * 86400


def test_the_keyv_apps_row_holds_the_system_app_in_a_keyv_envelope(legacy_dir: LegacyDataDir) -> None:
    with closing(sqlite3.connect(legacy_dir.keyv_path)) as conn:
        (raw,) = conn.execute("SELECT value FROM keyv WHERE key = 'keyv:apps'").fetchone()
    envelope = json.loads(raw)
    assert envelope["expires"] is None
    system, limited = envelope["value"]
    assert system["name"] == "system" and system["scopes"] == ["crons", "system", "dashboard"]
    assert {t["value"] for t in system["tokens"]} == {legacy_dir.system_token, legacy_dir.expired_token}
    assert "crons" not in limited["scopes"] and len(system["client_secret"]) == 24


def test_add_cron_writes_2x_on_disk_encodings(legacy_dir: LegacyDataDir) -> None:
    cron_id = legacy_dir.add_cron("n", "  task a/b/c.js  ", "0 * * * *", labels=["x"], status=3)
    row = legacy_dir.cron_row(cron_id)
    assert row is not None
    assert (row["command"], row["labels"], row["status"], row["log_name"]) == (
        "task a/b/c.js",
        '["x"]',
        3,
        f"b_c_{cron_id}",
    )
    assert re.match(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} \+00:00$", row["createdAt"])
    assert re.match(r"^\w{3} \w{3} \d\d \d{4} \d\d:\d\d:\d\d GMT[+-]\d{4} \(.+\)$", row["timestamp"])
    assert row["updatedAt"] <= format_updated_at(int(time.time() * 1000))


def test_uniq_path_follows_get_uniq_path() -> None:
    assert uniq_path("task ql_sample.js", 5) == "ql_sample_5"
    assert uniq_path("task -m 3 foo/bar.py", 2) == "foo_bar_2"
    assert uniq_path("ql repo https://example.invalid/x.git", 9) == "ql_9"
