"""The v3 API's authorisation follows the release fronted: 2.x's own /open/crons check, which on v2.17 reads the
Apps table and config/auth.json (there is no keyv cache before v2.18), and the keyv cache from v2.18."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from flask.testing import FlaskClient

from bridge.bootstrap import Container, Store, build_token_authority
from bridge.bootstrap.release import decide_legacy_release
from bridge.config import Settings
from bridge.metrics import BridgeMetrics
from bridge.service.clock import SystemClock
from bridge.service.run_service import RunService
from bridge.web.app import create_app
from legacy_adapters.testing.datadir import LegacyDataDir, create_legacy_data_dir
from tests.conftest import Backend
from tests.web.conftest import LEGACY_URL


def client_for(backend: Backend, tmp_path: Path, release: str) -> tuple[FlaskClient, LegacyDataDir]:
    """The v3 app as `serve` builds its token check: for the release the settings name."""
    legacy = create_legacy_data_dir(tmp_path / "ql-data", release=release)
    settings = Settings.from_env({"BRIDGE_DATABASE_URL": backend.url or "", "BRIDGE_DATA_DIR": str(tmp_path),
                                  "BRIDGE_LEGACY_URL": LEGACY_URL, "BRIDGE_LEGACY_DATA_DIR": str(legacy.root),
                                  "BRIDGE_LEGACY_RELEASE": release})

    def never(request: httpx.Request) -> httpx.Response:
        pytest.fail(f"a /v3 request reached 2.x: {request.method} {request.url}")

    assert backend.engine is not None
    container = Container(settings=settings, metrics=BridgeMetrics(),
                          http=httpx.Client(transport=httpx.MockTransport(never)),
                          store=Store(engine=backend.engine, uow=backend.uow,  # type: ignore[arg-type]
                                      runs=RunService(backend.uow, clock=SystemClock())),  # type: ignore[arg-type]
                          token_authority=build_token_authority(settings, decide_legacy_release(settings)))
    return create_app(container).test_client(use_cookies=False), legacy


@pytest.mark.parametrize("release", ["v2.17.13", "v2.18.3", "v2.20.2"])
def test_2xs_own_app_token_reads_the_v3_api_on_every_release(sqlite_backend: Backend, tmp_path: Path,
                                                               release: str) -> None:
    client, legacy = client_for(sqlite_backend, tmp_path, release)
    answer = client.get("/v3/runs", headers={"Authorization": f"Bearer {legacy.system_token}"})
    assert answer.status_code == 200, answer.get_data(as_text=True)
    assert answer.get_json()["runs"] == []


def test_on_v2_17_a_refusal_is_v2_17s_own_401(sqlite_backend: Backend, tmp_path: Path) -> None:
    client, legacy = client_for(sqlite_backend, tmp_path, "v2.17.13")
    expired = client.get("/v3/runs", headers={"Authorization": f"Bearer {legacy.expired_token}"})
    missing = client.get("/v3/runs")
    assert (expired.status_code, expired.get_json()) == (401, {"code": 401, "message": "jwt malformed"})
    assert (missing.status_code, missing.get_json()) == (401, {"code": 401,
                                                               "message": "No authorization token was found"})
