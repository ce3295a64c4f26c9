"""v2.17's /open/* token check (legacy_adapters/auth_apps_table.py), as back/loaders/express.ts at v2.17.13 makes it:
the Apps table, then config/auth.json, then express-jwt's English 401."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from legacy_adapters.auth_apps_table import MESSAGE_MALFORMED, MESSAGE_NO_TOKEN, AppsTableTokenAuthority
from legacy_adapters.errors import LegacyAuthError
from legacy_adapters.testing.datadir import LegacyDataDir, create_legacy_data_dir

PATH = "/open/crons/status"


@pytest.fixture
def data(tmp_path: Path) -> LegacyDataDir:
    return create_legacy_data_dir(tmp_path / "ql", release="v2.17.13")


def authority(data: LegacyDataDir) -> AppsTableTokenAuthority:
    return AppsTableTokenAuthority(data.database_path, data.root / "config" / "auth.json")


def refused(check: AppsTableTokenAuthority, token: str | None, path: str = PATH) -> str:
    with pytest.raises(LegacyAuthError) as caught:
        check.check_open_request(path, f"Bearer {token}" if token else None, time.time())
    assert caught.value.legacy_status == 401
    return caught.value.legacy_message


def test_an_apps_token_with_the_scope_passes(data: LegacyDataDir) -> None:
    assert not data.keyv_path.exists()  # v2.17 has no keyv cache: the Apps table is the only place
    authority(data).check_open_request(PATH, f"Bearer {data.system_token}", time.time())


def test_an_expired_token_a_missing_scope_and_an_unknown_token_fall_through_to_jwt_malformed(
        data: LegacyDataDir) -> None:
    check = authority(data)
    assert refused(check, data.expired_token) == MESSAGE_MALFORMED
    assert refused(check, data.limited_token) == MESSAGE_MALFORMED  # an App without the crons scope
    assert refused(check, "not-a-token") == MESSAGE_MALFORMED
    assert refused(check, None) == MESSAGE_NO_TOKEN


def test_the_panels_token_in_auth_json_passes_on_open_routes_too(data: LegacyDataDir) -> None:
    (data.root / "config" / "auth.json").write_text(json.dumps(
        {"username": "admin", "token": "panel-token", "tokens": {"desktop": "desk-token"}}), encoding="utf-8")
    check = authority(data)
    check.check_open_request(PATH, "Bearer panel-token", time.time())
    check.check_open_request(PATH, "Bearer desk-token", time.time(), user_agent="Mozilla/5.0 (X11; Linux)")
    assert refused(check, "other-token") == MESSAGE_MALFORMED


def test_a_token_without_expiration_never_passes_as_an_apps(data: LegacyDataDir) -> None:
    """``undefined >= n`` is false in JavaScript: v2.17 lets no App token through without an expiration."""
    data.query("UPDATE Apps SET tokens = ? WHERE id = 1", (json.dumps([{"value": "eternal"}]),))
    assert refused(authority(data), "eternal") == MESSAGE_MALFORMED
