"""Fixtures for the 2.x adapter tests: a fake 2.x data directory, a running test double and a Crontabs row as
the reader returns it; and what other folders' tests use of the adapters: a statement log for a reader's or
writer's connections."""

from __future__ import annotations

import dataclasses
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from legacy_adapters.records import LegacyCron
from legacy_adapters.testing.datadir import LegacyDataDir, create_legacy_data_dir
from legacy_adapters.testing.double import Legacy2xDouble

# Three dot-separated segments: shaped like the panel's HS384 JWT; the double accepts it on /api.
PANEL_JWT = "eyJhbGciOiJIUzM4NCJ9.eyJkYXRhIjoiYWRtaW4ifQ.c2lnbmF0dXJl"


def cron(schedule: str = "0 10 * * *", **changes: object) -> LegacyCron:
    """Cron 5 as the reader returns it (idle, enabled, no pid), with ``changes`` on top."""
    base = LegacyCron(id=5, name="n", command="task a.js", schedule=schedule, timestamp=None, saved=True, status=1,
                      is_system=False, pid=None, is_disabled=False, is_pinned=False, log_path=None, labels=(),
                      last_running_time=None, last_execution_time=None, sub_id=None, extra_schedules=(),
                      task_before=None, task_after=None, log_name=None, work_dir=None,
                      allow_multiple_instances=None, created_at=None, updated_at=None)
    return dataclasses.replace(base, **changes)


class StatementLog:
    """Mixed in before a legacy_adapters reader or writer: every statement its connections run on 2.x's database,
    in order, in ``statements``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.statements: list[str] = []

    def _connect(self, *args: Any) -> sqlite3.Connection:
        conn: sqlite3.Connection = super()._connect(*args)  # type: ignore[misc]
        conn.set_trace_callback(self.statements.append)
        return conn


@pytest.fixture
def legacy_dir(tmp_path: Path) -> LegacyDataDir:
    return create_legacy_data_dir(tmp_path / "ql-data")


@pytest.fixture
def double(legacy_dir: LegacyDataDir) -> Iterator[Legacy2xDouble]:
    with Legacy2xDouble(legacy_dir, panel_token=PANEL_JWT) as running:
        yield running


@pytest.fixture
def client(double: Legacy2xDouble) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=double.url, timeout=5.0) as http:
        yield http


@pytest.fixture
def shell_headers(legacy_dir: LegacyDataDir) -> dict[str, str]:
    """The headers shell/api.sh update_cron sends (curl defaults included)."""
    return {
        "Authorization": f"Bearer {legacy_dir.system_token}",
        "Content-Type": "application/json;charset=UTF-8",
        "User-Agent": "curl/8.5.0",
        "Accept": "*/*",
    }
