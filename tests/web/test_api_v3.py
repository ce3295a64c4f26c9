"""The read-only v3 API: filters, keyset pages, shapes and times, 2.x's /open/crons authorisation, errors.

Runs are made by the real RunService and ShadowRecorder on a migrated store; tokens come from a throwaway
2.x data directory; the upstream is a MockTransport that fails the test if anything reaches it.
"""

from __future__ import annotations

import base64
import itertools
import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path

import httpx
import pytest
from flask import Flask
from flask.testing import FlaskClient
from werkzeug.test import TestResponse

from bridge.bootstrap import Container, Store, build_token_authority
from bridge.config import Settings
from bridge.domain.errors import RunNotFoundError
from bridge.metrics import BridgeMetrics
from bridge.service.callback_facts import CallbackFacts, ExecutionContext
from bridge.service.queries import (
    InvalidQueryError,
    PageRequest,
    RunCursor,
    RunFilters,
    parse_since,
    rfc3339_ms,
)
from bridge.service.run_service import RunService
from bridge.service.shadow import ShadowRecorder
from bridge.storage.queries import SqlRunQueries
from bridge.web.app import create_app
from legacy_adapters.testing.datadir import LegacyDataDir, create_legacy_data_dir
from tests.conftest import Backend
from tests.contract.lifecycle import create
from tests.web.conftest import JSON_2X, LEGACY_URL

T0 = 1_796_205_600_123  # 2026-12-02T10:00:00.123Z
LOGIN_FIRST = '{"code":401,"message":"请先登录"}'.encode()
TOKEN_EXPIRED = '{"code":401,"message":"Token 已失效"}'.encode()
NO_PERMISSION = '{"code":401,"message":"暂无权限"}'.encode()
INTERNAL = {"idempotency_key", "request_fingerprint", "callback_token_hash", "lease_token", "dedupe_key"}
RUN_KEYS = {
    "id", "project_id", "task_id", "task_revision", "trigger_type", "status", "version", "event_sequence",
    "priority", "legacy_cron_id", "parent_run_id", "retry_of_run_id", "trigger_id", "input_ref", "output_ref",
    "cancel_reason", "error_code", "error_summary", "origin", "origin_evidence", "mode", "owner", "legacy_pid",
    "log_ref", "synthesized", "duration_ms",
    "created_at_ms", "created_at", "queued_at_ms", "queued_at", "started_at_ms", "started_at",
    "finished_at_ms", "finished_at", "cancel_requested_at_ms", "cancel_requested_at", "received_at_ms", "received_at",
}
ATTEMPT_KEYS = {
    "id", "run_id", "step_run_id", "attempt", "status", "executor_type", "worker_id", "executor_handle", "pid",
    "log_artifact_id", "callback_sequence", "exit_code", "error_code", "error_summary", "synthesized",
    "lease_expires_at_ms", "lease_expires_at", "deadline_at_ms", "deadline_at", "created_at_ms", "created_at",
    "started_at_ms", "started_at", "finished_at_ms", "finished_at",
}
EVENT_KEYS = {"id", "run_id", "sequence", "type", "actor_type", "actor_id", "attempt_id", "step_run_id", "payload",
              "created_at_ms", "created_at"}


class SettableClock:
    """The time RunService stamps created_at_ms with; tests set it so ties and order are chosen, not hoped for."""

    def __init__(self, now_ms: int) -> None:
        self.now = now_ms

    def now_ms(self) -> int:
        return self.now


@dataclass
class Seeder:
    """Creates Runs the way production does: 2.x callbacks through ShadowRecorder, or a RunService command."""

    service: RunService
    clock: SettableClock
    pids: Iterator[int] = field(default_factory=lambda: itertools.count(1000))

    def shadow(self, at_ms: int, *, cron: int = 1, origin: str = "scheduled_node", exit_code: int | None = None,
               ended: bool = False) -> str:
        recorder, pid = ShadowRecorder(self.service), next(self.pids)
        facts = CallbackFacts(cron_id=cron, pid=pid, log_ref=f"log-{pid}", started_at_ms=at_ms - 500,
                              duration_ms=None, exit_code=None, received_at_ms=at_ms)
        context = ExecutionContext(origin=origin, evidence=f"test:{origin}", task_revision="rev")
        self.clock.now = at_ms
        run_id = recorder.record_start(facts, context).run_id
        assert run_id is not None
        if ended:
            self.clock.now = at_ms + 2000
            recorder.record_end(replace(facts, duration_ms=2000, exit_code=exit_code, received_at_ms=at_ms + 2000),
                                lambda: context)
        return run_id

    def plain(self, at_ms: int, key: str | None = None) -> str:
        """A Run in ``created`` with no origin (legacy cron 1), made by a CreateRun command."""
        self.clock.now = at_ms
        return create(self.service, key=key).id


def seeder_for(backend: Backend) -> Seeder:
    clock = SettableClock(T0)
    return Seeder(RunService(backend.uow, clock=clock), clock)  # type: ignore[arg-type]


def seed_five(seeder: Seeder) -> dict[str, str]:
    """a..e, oldest first: two ended Runs of cron 1 (exit 0 and 3), two running Runs of cron 2, one bare created
    Run."""
    return {
        "a": seeder.shadow(T0, cron=1, origin="scheduled_node", ended=True, exit_code=0),
        "b": seeder.shadow(T0 + 1000, cron=1, origin="manual", ended=True, exit_code=3),
        "c": seeder.shadow(T0 + 2000, cron=2, origin="manual"),
        "d": seeder.shadow(T0 + 3000, cron=2, origin="scheduled_node"),
        "e": seeder.plain(T0 + 4000, key="client-key-e"),
    }


def seed_many(seeder: Seeder, count: int = 23) -> list[str]:
    """``count`` Runs, in groups of up to four sharing one millisecond; ids in the API's order."""
    made = [(T0 + (i // 4) * 10, seeder.shadow(T0 + (i // 4) * 10, cron=7 + i % 2)) for i in range(count)]
    return [run_id for _, run_id in sorted(made, reverse=True)]


# --- The app under test --------------------------------------------------------------------------------


@dataclass
class Api:
    app: Flask
    client: FlaskClient
    legacy: LegacyDataDir
    seeder: Seeder

    def get(self, path: str, token: str | None = "system", **kwargs: object) -> TestResponse:
        return self.call("GET", path, token, **kwargs)

    def call(self, method: str, path: str, token: str | None = "system", **kwargs: object) -> TestResponse:
        value = self.legacy.system_token if token == "system" else token
        headers = {"Authorization": f"Bearer {value}"} if value is not None else {}
        return self.client.open(path, method=method, headers=headers, **kwargs)  # type: ignore[arg-type]


def build_app(backend: Backend, tmp_path: Path, *, legacy_dir: bool = True) -> tuple[Flask, LegacyDataDir, Seeder]:
    legacy = create_legacy_data_dir(tmp_path / "ql-data")
    env = {"BRIDGE_DATABASE_URL": backend.url or "", "BRIDGE_DATA_DIR": str(tmp_path), "BRIDGE_LEGACY_URL": LEGACY_URL}
    if legacy_dir:
        env["BRIDGE_LEGACY_DATA_DIR"] = str(legacy.root)

    def never(request: httpx.Request) -> httpx.Response:
        pytest.fail(f"a /v3 request reached 2.x: {request.method} {request.url}")

    seeder = seeder_for(backend)
    assert backend.engine is not None
    store = Store(engine=backend.engine, uow=backend.uow, runs=seeder.service)  # type: ignore[arg-type]
    settings = Settings.from_env(env)
    container = Container(settings=settings, metrics=BridgeMetrics(),
                          http=httpx.Client(transport=httpx.MockTransport(never)), store=store,
                          token_authority=build_token_authority(settings))
    return create_app(container), legacy, seeder


@contextmanager
def api_app(backend: Backend, tmp_path: Path) -> Iterator[Api]:
    """The v3 app of ``build_app`` with its test client; its 2.x client closed afterwards."""
    app, legacy, seeder = build_app(backend, tmp_path)
    try:
        yield Api(app, app.test_client(use_cookies=False), legacy, seeder)
    finally:
        app.extensions["bridge"].http.close()


@pytest.fixture
def api(sqlite_backend: Backend, tmp_path: Path) -> Iterator[Api]:
    with api_app(sqlite_backend, tmp_path) as api:
        yield api


@pytest.fixture
def five(api: Api) -> dict[str, str]:
    return seed_five(api.seeder)


def ids(response: TestResponse) -> list[str]:
    assert response.status_code == 200, response.get_data(as_text=True)
    return [run["id"] for run in response.get_json()["runs"]]


def walk(api: Api, query: str, limit: int) -> tuple[list[str], int]:
    """Every run id reached by following next_cursor, and how many pages that took."""
    seen: list[str] = []
    cursor: str | None = None
    for pages in itertools.count(1):
        response = api.get(f"/v3/runs?limit={limit}{query}" + (f"&cursor={cursor}" if cursor else ""))
        seen += ids(response)
        cursor = response.get_json()["next_cursor"]
        if cursor is None:
            return seen, pages
    raise AssertionError("unreachable")


# --- Listing --------------------------------------------------------------------------------------------


def test_listing_without_filters_returns_every_run_newest_first_and_no_next_cursor(
        api: Api, five: dict[str, str]) -> None:
    response = api.get("/v3/runs")

    assert response.content_type == "application/json"
    assert ids(response) == [five[k] for k in "edcba"]
    assert response.get_json()["next_cursor"] is None


@pytest.mark.parametrize("query, expected", [
    ("cron_id=1", "eba"),
    ("cron_id=2", "dc"),
    ("cron_id=99", ""),
    ("origin=manual", "cb"),
    ("origin=scheduled_node", "da"),
    ("status=running", "dc"),
    ("status=failed", "b"),
    ("status=succeeded", "a"),
    ("status=created", "e"),
    ("cron_id=1&status=failed&origin=manual", "b"),
    (f"since={T0 + 2000}", "edc"),
    ("since=2026-12-02T10:00:02.123Z", "edc"),
    ("since=2026-12-02t18:00:02.123%2B08:00", "edc"),
    ("since=2026-12-02T18:00:02.123+08:00", "edc"),  # an unencoded "+" arrives as a space
    ("since=2026-12-02T05:00:02.123-05:00", "edc"),
    ("since=2026-12-02T10:00:02.1225Z", "edc"),  # sub-millisecond bounds round up, never down
    ("since=2026-12-02T10:00:02.1231Z", "ed"),
    ("since=2026-12-02T10:00:01.123999Z&cron_id=1", "e"),
    ("cron_id=&origin=", "edcba"),  # an empty value is no filter
])
def test_each_filter_narrows_the_listing(api: Api, five: dict[str, str], query: str, expected: str) -> None:
    assert ids(api.get(f"/v3/runs?{query}")) == [five[k] for k in expected]


def test_keyset_pages_never_repeat_or_skip_a_run_even_when_runs_share_a_millisecond(api: Api) -> None:
    expected = seed_many(api.seeder, 23)

    for limit in (1, 4, 5, 22, 23, 200):
        seen, pages = walk(api, "", limit)
        assert seen == expected, f"limit={limit}"
        assert pages == max(1, -(-23 // limit))  # a page exactly at the end says so: no empty last page


def test_a_filtered_listing_pages_through_only_the_matching_runs(api: Api) -> None:
    everything = seed_many(api.seeder, 23)
    cron_7 = [run_id for run_id in everything if api.get(f"/v3/runs/{run_id}").get_json()["legacy_cron_id"] == 7]

    seen, pages = walk(api, "&cron_id=7", 3)

    assert seen == cron_7 and len(cron_7) == 12 and pages == 4


def test_the_cursor_is_base64url_of_the_last_runs_created_at_ms_and_id(api: Api, five: dict[str, str]) -> None:
    cursor = api.get("/v3/runs?limit=2").get_json()["next_cursor"]

    assert "=" not in cursor
    decoded = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
    assert decoded == [T0 + 3000, five["d"]]
    assert ids(api.get(f"/v3/runs?cursor={cursor}")) == [five[k] for k in "cba"]


# --- Detail, events, shapes -----------------------------------------------------------------------------


def test_run_detail_is_the_run_with_its_attempts(api: Api, five: dict[str, str]) -> None:
    body = api.get(f"/v3/runs/{five['b']}").get_json()

    assert (body["id"], body["status"], body["origin"], body["legacy_cron_id"]) == (five["b"], "failed", "manual", 1)
    assert body["error_code"] == "process_exit_error" and body["duration_ms"] == 2000
    (attempt,) = body["attempts"]
    assert (attempt["run_id"], attempt["attempt"], attempt["status"], attempt["exit_code"]) == (five["b"], 1,
                                                                                             "failed", 3)
    assert api.get(f"/v3/runs/{five['e']}").get_json()["attempts"] == []


def test_every_ms_instant_has_an_rfc3339_utc_sibling_with_milliseconds_and_null_stays_null(
        api: Api, five: dict[str, str]) -> None:
    body = api.get(f"/v3/runs/{five['b']}").get_json()
    listed = api.get("/v3/runs?status=failed").get_json()["runs"][0]
    event = api.get(f"/v3/runs/{five['b']}/events?limit=1").get_json()["events"][0]

    assert (body["created_at_ms"], body["created_at"]) == (T0 + 1000, "2026-12-02T10:00:01.123Z")
    assert (body["started_at_ms"], body["started_at"]) == (T0 + 500, "2026-12-02T10:00:00.623Z")
    assert (body["finished_at_ms"], body["finished_at"]) == (T0 + 3000, "2026-12-02T10:00:03.123Z")
    assert body["cancel_requested_at_ms"] is None and body["cancel_requested_at"] is None
    assert "duration" not in body  # a length of time, not an instant
    assert body["attempts"][0]["deadline_at_ms"] is None and body["attempts"][0]["deadline_at"] is None
    assert body["attempts"][0]["started_at"] == "2026-12-02T10:00:00.623Z"
    assert listed["created_at"] == "2026-12-02T10:00:01.123Z"
    assert (event["created_at_ms"], event["created_at"]) == (T0 + 1000, "2026-12-02T10:00:01.123Z")


def test_no_internal_field_ever_leaves_the_bridge(api: Api, five: dict[str, str]) -> None:
    listed = api.get("/v3/runs")
    detail = api.get(f"/v3/runs/{five['e']}")
    shadow = api.get(f"/v3/runs/{five['a']}")
    events = api.get(f"/v3/runs/{five['a']}/events")

    assert all(set(run) == RUN_KEYS for run in listed.get_json()["runs"])
    assert set(shadow.get_json()) == RUN_KEYS | {"attempts"}
    assert set(shadow.get_json()["attempts"][0]) == ATTEMPT_KEYS
    assert all(set(event) == EVENT_KEYS for event in events.get_json()["events"])
    for response in (listed, detail, shadow, events):
        text = response.get_data(as_text=True)
        assert not any(name in text for name in INTERNAL)
        assert "client-key-e" not in text and "legacy:1:" not in text and "legacy-end:" not in text


def test_events_come_in_sequence_pages_until_next_after_is_null(api: Api, five: dict[str, str]) -> None:
    run_id = five["a"]
    everything = api.get(f"/v3/runs/{run_id}/events").get_json()
    total = len(everything["events"])
    seen: list[int] = []
    after: int | None = 0
    while after is not None:
        page = api.get(f"/v3/runs/{run_id}/events?after={after}&limit=3").get_json()
        assert page["run_id"] == run_id and len(page["events"]) <= 3
        seen += [event["sequence"] for event in page["events"]]
        after = page["next_after"]

    assert everything["next_after"] is None and total >= 9
    assert seen == list(range(1, total + 1))
    assert api.get(f"/v3/runs/{run_id}/events?after={total}").get_json() == {"run_id": run_id, "events": [],
                                                                            "next_after": None}
    assert api.get(f"/v3/runs/{run_id}/events?limit={total}").get_json()["next_after"] is None


def test_a_run_whose_end_reported_no_outcome_is_listed_as_ended_never_as_succeeded(
        api: Api, five: dict[str, str]) -> None:
    unreported = api.seeder.shadow(T0 + 5000, cron=3, ended=True, exit_code=None)  # every end before v2.21

    assert ids(api.get("/v3/runs?status=ended")) == [unreported]
    assert ids(api.get("/v3/runs?status=succeeded")) == [five["a"]]
    body = api.get(f"/v3/runs/{unreported}").get_json()
    assert (body["status"], body["error_code"], body["attempts"][0]["status"], body["attempts"][0]["exit_code"]) == (
        "ended", None, "ended", None)
    types = [e["type"] for e in api.get(f"/v3/runs/{unreported}/events").get_json()["events"]]
    assert types[-2:] == ["attempt.ended", "run.ended"]


def test_event_types_and_statuses_are_lowercase_strings_and_payloads_are_json_objects(
        api: Api, five: dict[str, str]) -> None:
    events = api.get(f"/v3/runs/{five['b']}/events").get_json()["events"]

    assert [e["type"] for e in events][:3] == ["run.created", "run.queued", "run.dispatching"]
    assert all(isinstance(e["payload"], dict) for e in events)
    assert events[0]["payload"] == {"origin": "manual", "evidence": "test:manual"}
    assert events[0]["actor_type"] == "legacy_shell"
    assert {r["status"] for r in api.get("/v3/runs").get_json()["runs"]} == {"succeeded", "failed", "running",
                                                                             "created"}


def test_head_answers_like_get_without_a_body(api: Api, five: dict[str, str]) -> None:
    response = api.call("HEAD", "/v3/runs")

    assert response.status_code == 200 and response.data == b""


# --- Authorisation: exactly 2.x's /open/crons -----------------------------------------------------------

V3_PATHS = ["/v3/runs", "/v3/runs/{a}", "/v3/runs/{a}/events", "/v3/runs/unknown-run", "/v3/elsewhere"]


@pytest.mark.parametrize("path", V3_PATHS)
@pytest.mark.parametrize("token, body", [
    (None, LOGIN_FIRST),
    ("expired", TOKEN_EXPIRED),
    ("limited", NO_PERMISSION),  # a valid App token, but without the crons scope
    ("00000000-0000-4000-8000-000000000000", TOKEN_EXPIRED),  # no App owns it
])
def test_a_refused_token_gets_2xs_own_401_byte_for_byte(api: Api, five: dict[str, str], path: str,
                                                        token: str | None, body: bytes) -> None:
    value = {"expired": api.legacy.expired_token, "limited": api.legacy.limited_token}.get(token or "", token)

    response = api.get(path.format(a=five["a"]), token=value)

    assert (response.status_code, response.data) == (401, body)
    assert response.headers["Content-Type"] == JSON_2X


def test_a_non_bearer_authorization_is_please_log_in_first(api: Api) -> None:
    response = api.client.get("/v3/runs", headers={"Authorization": f"Basic {api.legacy.system_token}"})

    assert (response.status_code, response.data) == (401, LOGIN_FIRST)


def test_a_token_withdrawn_from_2xs_cache_stops_working(api: Api) -> None:
    assert api.get("/v3/runs").status_code == 200
    api.legacy.write_keyv("apps", [])
    api.app.extensions["bridge"].token_authority.invalidate()  # 2.x's cache is re-read at most once a second

    assert (api.get("/v3/runs").status_code, api.get("/v3/runs").data) == (401, TOKEN_EXPIRED)


def test_without_a_2x_data_dir_v3_answers_503_and_never_skips_authorisation(
        sqlite_backend: Backend, tmp_path: Path) -> None:
    app, legacy, _ = build_app(sqlite_backend, tmp_path, legacy_dir=False)
    client = app.test_client()

    for headers in ({}, {"Authorization": f"Bearer {legacy.system_token}"}):
        response = client.get("/v3/runs", headers=headers)
        assert response.status_code == 503
        assert response.get_json()["error"]["code"] == "LEGACY_DATABASE"
    app.extensions["bridge"].http.close()


def test_the_token_authority_and_the_queries_are_built_once_per_process(api: Api) -> None:
    container = api.app.extensions["bridge"]
    api.get("/v3/runs")
    authority, queries = container.token_authority, container.store.readers.runs
    api.get("/v3/runs")

    assert container.token_authority is authority and container.store.readers.runs is queries
    assert authority.keyv_path == api.legacy.keyv_path


# --- Errors ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("query, parameter", [
    ("cron_id=abc", "cron_id"),
    ("cron_id=1.5", "cron_id"),
    ("cron_id=-1", "cron_id"),
    ("cron_id=99999999999999999999", "cron_id"),
    ("origin=cron", "origin"),
    ("status=RUNNING", "status"),
    ("status=done", "status"),
    ("since=yesterday", "since"),
    ("since=2026-12-02", "since"),
    ("since=2026-12-02T10:00:00", "since"),  # RFC 3339 requires an offset
    ("since=2026-13-02T10:00:00Z", "since"),
    ("since=-5", "since"),
    ("cursor=!!!", "cursor"),
    ("cursor=bm90LWpzb24", "cursor"),  # "not-json"
    ("cursor=WyJ4IiwieSJd", "cursor"),  # ["x","y"]
    ("cursor=WzEsMiwzXQ", "cursor"),  # [1,2,3]
    ("limit=0", "limit"),
    ("limit=201", "limit"),
    ("limit=ten", "limit"),
    ("status=running&status=failed", "status"),
    ("stauts=running", "stauts"),
])
def test_a_bad_run_list_parameter_is_400_invalid_query_naming_it(api: Api, query: str, parameter: str) -> None:
    response = api.get(f"/v3/runs?{query}")

    assert response.status_code == 400
    error = response.get_json()["error"]
    assert (error["code"], error["details"]) == ("INVALID_QUERY", {"parameter": parameter})
    assert parameter in error["message"]


@pytest.mark.parametrize("query, parameter", [
    ("after=-1", "after"), ("after=x", "after"), ("limit=0", "limit"), ("limit=501", "limit"), ("cursor=a", "cursor"),
])
def test_a_bad_event_list_parameter_is_400_invalid_query_naming_it(api: Api, five: dict[str, str], query: str,
                                                                  parameter: str) -> None:
    response = api.get(f"/v3/runs/{five['a']}/events?{query}")

    assert response.status_code == 400
    assert response.get_json()["error"]["details"] == {"parameter": parameter}


@pytest.mark.parametrize("path", ["/v3/runs/no-such-run", "/v3/runs/no-such-run/events"])
def test_an_unknown_run_is_404_run_not_found(api: Api, path: str) -> None:
    response = api.get(path)

    assert response.status_code == 404
    assert response.get_json()["error"] == {"code": "RUN_NOT_FOUND", "message": "run no-such-run does not exist",
                                            "details": {"run_id": "no-such-run"}}


@pytest.mark.parametrize("method", ["POST", "PUT", "PATCH", "DELETE", "OPTIONS"])
@pytest.mark.parametrize("path", ["/v3/runs", "/v3/runs/{a}", "/v3/runs/{a}/events", "/v3/elsewhere"])
def test_every_method_but_get_and_head_is_405_in_the_bridge_shape(api: Api, five: dict[str, str], method: str,
                                                                  path: str) -> None:
    for token in ("system", None):
        response = api.call(method, path.format(a=five["a"]), token=token, data=b'{"x":1}')

        assert response.status_code == 405
        assert response.get_json()["error"]["code"] == "METHOD_NOT_ALLOWED"
        assert set(response.headers["Allow"].replace(" ", "").split(",")) == {"GET", "HEAD"}


@pytest.mark.parametrize("path", ["/v3", "/v3/", "/v3/runs/", "/v3/runs/x/y/z", "/v3/open/crons", "/v3//runs"])
def test_no_v3_path_is_ever_forwarded_to_2x(api: Api, path: str) -> None:
    response = api.get(path)  # the MockTransport fails the test if this reaches 2.x

    assert response.status_code == 404
    assert response.get_json()["error"]["code"] == "NOT_FOUND"


def test_a_v3_route_never_shadows_2xs_own_paths(api: Api) -> None:
    assert [r.rule for r in api.app.url_map.iter_rules() if r.endpoint.startswith("api_v3.")] and all(
        r.rule.startswith("/v3") for r in api.app.url_map.iter_rules() if r.endpoint.startswith("api_v3."))


# --- The pure parts -------------------------------------------------------------------------------------


def test_rfc3339_ms_writes_utc_with_milliseconds() -> None:
    assert rfc3339_ms(T0) == "2026-12-02T10:00:00.123Z"
    assert rfc3339_ms(0) == "1970-01-01T00:00:00.000Z"
    assert rfc3339_ms(None) is None


def test_parse_since_reads_epoch_ms_and_rfc3339_offsets_and_rounds_up() -> None:
    assert parse_since(str(T0)) == T0
    assert parse_since("2026-12-02T11:00:00.123+01:00") == T0
    assert parse_since("2026-12-02T10:00:00.122000001Z") == T0
    with pytest.raises(InvalidQueryError):
        parse_since("2026-12-02T10:00:60Z")


def test_a_cursor_decodes_to_what_it_encoded() -> None:
    cursor = RunCursor(T0, "0190b7a1-0000-7000-8000-000000000001")

    assert RunCursor.decode(cursor.encode()) == cursor


# --- SqlRunQueries on every SQL backend -----------------------------------------------------------------


@pytest.fixture
def sql_queries(sql_backend: Backend) -> tuple[SqlRunQueries, Seeder]:
    assert sql_backend.engine is not None
    return SqlRunQueries(sql_backend.engine), seeder_for(sql_backend)


def test_sql_queries_filter_and_order_runs_on_every_backend(sql_queries: tuple[SqlRunQueries, Seeder]) -> None:
    queries, seeder = sql_queries
    five = seed_five(seeder)

    def listed(**filters: object) -> list[str]:
        return [run["id"] for run in queries.list_runs(RunFilters(**filters), PageRequest()).runs]  # type: ignore[arg-type]

    assert listed() == [five[k] for k in "edcba"]
    assert listed(cron_id=1) == [five[k] for k in "eba"]
    assert listed(origin="manual") == [five[k] for k in "cb"]
    assert listed(status="running") == [five[k] for k in "dc"]
    assert listed(status="ended") == []
    unreported = seeder.shadow(T0 + 5000, cron=1, ended=True, exit_code=None)
    assert listed(status="ended") == [unreported] == listed(cron_id=1, status="ended")
    assert listed(since_ms=T0 + 2000) == [unreported] + [five[k] for k in "edc"]
    assert listed(cron_id=2, status="running", origin="scheduled_node", since_ms=T0) == [five["d"]]


def test_sql_keyset_pages_never_repeat_or_skip_on_every_backend(sql_queries: tuple[SqlRunQueries, Seeder]) -> None:
    queries, seeder = sql_queries
    expected = seed_many(seeder, 23)

    for limit in (1, 4, 23):
        seen: list[str] = []
        page = queries.list_runs(RunFilters(), PageRequest(limit=limit))
        while True:
            seen += [run["id"] for run in page.runs]
            if page.next_cursor is None:
                break
            page = queries.list_runs(RunFilters(), PageRequest(limit=limit, after=RunCursor.decode(page.next_cursor)))
        assert seen == expected, f"limit={limit}"


def test_sql_run_detail_and_event_pages_on_every_backend(sql_queries: tuple[SqlRunQueries, Seeder]) -> None:
    queries, seeder = sql_queries
    run_id = seeder.shadow(T0, ended=True, exit_code=3)

    detail = queries.get_run(run_id)
    first, second = queries.list_events(run_id, 0, 4), queries.list_events(run_id, 4, 100)

    assert detail["status"] == "failed" and [a["status"] for a in detail["attempts"]] == ["failed"]
    assert [e["sequence"] for e in first.events] == [1, 2, 3, 4] and first.next_after == 4
    assert second.events[0]["sequence"] == 5 and second.next_after is None
    assert isinstance(first.events[0]["payload"], dict)


def test_sql_queries_raise_run_not_found_on_every_backend(sql_queries: tuple[SqlRunQueries, Seeder]) -> None:
    queries, _ = sql_queries

    with pytest.raises(RunNotFoundError):
        queries.get_run("missing")
    with pytest.raises(RunNotFoundError):
        queries.list_events("missing", 0, 10)
