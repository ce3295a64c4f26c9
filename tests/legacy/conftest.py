"""Fixtures for the 2.x adapter tests: a fake 2.x data directory and a running test double."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from legacy_adapters.testing.datadir import LegacyDataDir, create_legacy_data_dir
from legacy_adapters.testing.double import Legacy2xDouble

# Three dot-separated segments: shaped like the panel's HS384 JWT; the double accepts it on /api.
PANEL_JWT = "eyJhbGciOiJIUzM4NCJ9.eyJkYXRhIjoiYWRtaW4ifQ.c2lnbmF0dXJl"


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
