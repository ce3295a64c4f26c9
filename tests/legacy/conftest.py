"""Fixtures for the 2.x adapter tests: a fake 2.x data directory and a running test double; and what other
folders' tests use of the adapters: a statement log for a reader's or writer's connections."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from legacy_adapters.testing.datadir import LegacyDataDir, create_legacy_data_dir
from legacy_adapters.testing.double import Legacy2xDouble

# Three dot-separated segments: shaped like the panel's HS384 JWT; the double accepts it on /api.
PANEL_JWT = "eyJhbGciOiJIUzM4NCJ9.eyJkYXRhIjoiYWRtaW4ifQ.c2lnbmF0dXJl"


class StatementLog:
    """Mixed in before a legacy_adapters reader or writer: every statement its connections run on 2.x's database,
    in order, in ``statements``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.statements: list[str] = []

    def _connect(self) -> sqlite3.Connection:
        conn: sqlite3.Connection = super()._connect()  # type: ignore[misc]
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
