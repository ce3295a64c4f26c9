"""`/bridge/flags` input the stores would treat differently: every SQL store answers the same 400, in the
bridge's error shape, and keeps nothing."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import httpx
import pytest
from werkzeug.test import TestResponse

from bridge.bootstrap import Container
from bridge.config import Settings
from bridge.metrics import BridgeMetrics
from bridge.service.admin import new_admin_token
from bridge.service.flags import FlagService
from bridge.storage.flags import SqlFlagStore
from tests.conftest import Backend
from tests.web.asgi_client import AsgiTestClient, bridge_client
from tests.web.conftest import LEGACY_URL


class Admin:
    def __init__(self, client: AsgiTestClient, flags: FlagService) -> None:
        self.client, self.flags = client, flags
        self.auth = {"Authorization": f"Bearer {new_admin_token(flags)}"}

    def show(self, query: str = "") -> TestResponse:
        return self.client.get(f"/bridge/flags{query}", headers=self.auth)

    def put(self, origin: str, body: bytes) -> TestResponse:
        return self.client.put(f"/bridge/flags/{origin}", data=body, headers={**self.auth,
                                                                              "Content-Type": "application/json"})


@pytest.fixture
def admin(sql_backend: Backend) -> Iterator[Admin]:
    flags = FlagService(SqlFlagStore(sql_backend.engine), lambda: time.time_ns() // 1_000_000)
    never = httpx.MockTransport(lambda request: pytest.fail(f"/bridge reached 2.x: {request.url}"))
    container = Container(settings=Settings.from_env({"BRIDGE_LEGACY_URL": LEGACY_URL}), metrics=BridgeMetrics(),
                          http=httpx.Client(transport=never), flags=flags)
    yield Admin(bridge_client(container), flags)
    container.http.close()


def error(response: TestResponse) -> tuple[int, str, dict[str, object]]:
    body = response.get_json()
    return response.status_code, body["error"]["code"], body["error"]["details"]


@pytest.mark.parametrize("query", ["?audit=-5", "?audit=0", "?audit=201", "?audit=abc", "?audit=1.5", "?audit=%00",
                                   "?audit=99999999999999999999"])
def test_an_audit_count_outside_1_to_200_is_400_invalid_query_on_every_store(admin: Admin, query: str) -> None:
    for i in range(3):
        admin.flags.set_mode("manual", "shadow" if i % 2 == 0 else "off", actor="ops", reason=f"change {i}")

    assert error(admin.show(query)) == (400, "INVALID_QUERY", {"parameter": "audit"})


@pytest.mark.parametrize("query, rows", [("", 3), ("?audit=", 3), ("?audit=1", 1), ("?audit=200", 3)])
def test_an_audit_count_from_1_to_200_bounds_the_rows_newest_first(admin: Admin, query: str, rows: int) -> None:
    for i in range(3):
        admin.flags.set_mode("manual", "shadow" if i % 2 == 0 else "off", actor="ops", reason=f"change {i}")

    response = admin.show(query)

    assert response.status_code == 200
    assert [c["reason"] for c in response.get_json()["audit"]] == ["change 2", "change 1", "change 0"][:rows]


@pytest.mark.parametrize("change, field", [
    ({"mode": "shadow", "actor": "ali\x00ce", "reason": "measure"}, "actor"),
    ({"mode": "shadow", "actor": "alice", "reason": "\x00"}, "reason"),
])
def test_a_nul_in_a_flag_change_is_400_invalid_flag_change_on_every_store(admin: Admin, change: dict[str, str],
                                                                          field: str) -> None:
    response = admin.put("manual", json.dumps(change).encode())

    assert error(response) == (400, "INVALID_FLAG_CHANGE", {"field": field})
    assert admin.flags.audit() == []


def test_an_unpaired_surrogate_in_a_flag_change_is_400_invalid_flag_change(admin: Admin) -> None:
    response = admin.put("manual", b'{"mode":"shadow","actor":"\\ud800","reason":"measure"}')

    assert error(response) == (400, "INVALID_FLAG_CHANGE", {"field": "actor"})


def test_a_flag_change_nested_deeper_than_the_parser_goes_is_400_not_500(admin: Admin) -> None:
    response = admin.put("manual", b'{"mode":' + b"[" * 5_000 + b"]" * 5_000 + b"}")

    assert error(response) == (400, "INVALID_FLAG_CHANGE", {"field": "mode"})
