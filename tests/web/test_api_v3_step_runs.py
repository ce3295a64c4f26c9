"""GET /v3/runs/<id>/step-runs: a Run's StepRuns in keyset pages, read-only, authorised as /v3/runs is."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import text

from bridge.domain.step_run import RECORD_KEYS, StepRunStatus
from bridge.service.queries import RunCursor
from tests.conftest import Backend
from tests.contract.step_run_world import World, world_for
from tests.web.test_api_v3 import JSON_2X, LOGIN_FIRST, TOKEN_EXPIRED, Api, api_app

STEP_RUN_KEYS = (RECORD_KEYS - {"schema"}) | {"schema", "created_at", "updated_at", "started_at", "finished_at"}


@pytest.fixture
def api(sql_backend: Backend, tmp_path: Path) -> Iterator[Api]:
    with api_app(sql_backend, tmp_path) as api:
        yield api


@pytest.fixture
def world(sql_backend: Backend) -> World:
    return world_for(sql_backend)


def listing(api: Api, run_id: str, query: str = "") -> dict[str, object]:
    response = api.get(f"/v3/runs/{run_id}/step-runs{query}")
    assert response.status_code == 200, response.get_data(as_text=True)
    assert response.content_type == "application/json"
    return response.get_json()  # type: ignore[no-any-return]


def test_a_runs_step_runs_are_listed_oldest_first_as_v1_records_with_rfc3339_times(api: Api, world: World) -> None:
    run = world.run()
    first = world.move(world.move(world.create(run.id, "first").step_run, StepRunStatus.READY), StepRunStatus.RUNNING)
    second = world.create(run.id, "第二步").step_run

    body = listing(api, run.id)

    assert body["run_id"] == run.id and body["next_cursor"] is None
    shown = body["step_runs"]
    assert [s["id"] for s in shown] == [first.id, second.id]
    assert set(shown[0]) == STEP_RUN_KEYS
    assert (shown[0]["status"], shown[0]["attempt_count"], shown[0]["digest"]) == ("running", 1, first.digest)
    assert shown[1]["step_key"] == "第二步" and shown[1]["schema"] == "qinglong/step-run@v1"
    assert shown[0]["started_at"].endswith("Z") and shown[1]["started_at"] is None


def test_keyset_pages_walk_every_step_run_once(api: Api, world: World) -> None:
    run = world.run()
    made = [world.create(run.id, f"s{n}").step_run.id for n in range(5)]
    seen: list[str] = []
    cursor = None
    for _ in range(5):
        body = listing(api, run.id, "?limit=2" + (f"&cursor={cursor}" if cursor else ""))
        seen += [s["id"] for s in body["step_runs"]]  # type: ignore[union-attr]
        cursor = body["next_cursor"]
        if cursor is None:
            break
    assert seen == made
    assert listing(api, run.id, "?limit=5")["next_cursor"] is None


def test_a_run_without_step_runs_lists_none_and_an_unknown_run_is_404(api: Api, world: World) -> None:
    assert listing(api, world.run().id)["step_runs"] == []
    response = api.get("/v3/runs/no-such-run/step-runs")
    assert response.status_code == 404 and response.get_json()["error"]["code"] == "RUN_NOT_FOUND"


@pytest.mark.parametrize("query, parameter", [
    ("limit=0", "limit"), ("limit=129", "limit"), ("cursor=!!!", "cursor"), ("after=3", "after"),
    ("limit=1&limit=2", "limit"),
])
def test_a_bad_parameter_is_400_invalid_query_naming_it(api: Api, world: World, query: str, parameter: str) -> None:
    response = api.get(f"/v3/runs/{world.run().id}/step-runs?{query}")
    assert response.status_code == 400
    assert response.get_json()["error"]["details"] == {"parameter": parameter}


@pytest.mark.parametrize("token, body", [(None, LOGIN_FIRST), ("00000000-0000-4000-8000-000000000000", TOKEN_EXPIRED)])
def test_a_refused_token_gets_2xs_own_401_as_for_v3_runs(api: Api, world: World, token: str | None,
                                                         body: bytes) -> None:
    response = api.get(f"/v3/runs/{world.run().id}/step-runs", token=token)
    assert (response.status_code, response.data, response.headers["Content-Type"]) == (401, body, JSON_2X)


@pytest.mark.parametrize("method", ["POST", "PUT", "PATCH", "DELETE"])
def test_nothing_but_get_and_head_reaches_the_listing(api: Api, world: World, method: str) -> None:
    run = world.run()
    response = api.call(method, f"/v3/runs/{run.id}/step-runs", data=json.dumps({"step_key": "x"}))
    assert response.status_code == 405
    assert world.repository.page(run.id, None, 10).step_runs == ()


def test_a_hand_edited_record_is_a_500_integrity_error_not_served(api: Api, world: World,
                                                                    sql_backend: Backend) -> None:
    run = world.run()
    step = world.create(run.id, "kept").step_run
    record = json.loads(step.to_json())
    record["step_key"] = "forged"
    assert sql_backend.engine is not None
    with sql_backend.engine.begin() as conn:
        conn.execute(text("UPDATE step_runs SET step_key = 'forged', record = :r WHERE id = :s"),
                     {"r": json.dumps(record, sort_keys=True, separators=(",", ":")), "s": step.id})
    response = api.get(f"/v3/runs/{run.id}/step-runs")
    assert response.status_code == 500 and response.get_json()["error"]["code"] == "STEP_RUN_INTEGRITY"
    assert "forged" not in response.get_data(as_text=True)


def test_the_cursor_is_the_v3_apis_one_token_and_the_reader_is_built_once(api: Api, world: World) -> None:
    run = world.run()
    steps = [world.create(run.id, f"s{n}").step_run for n in range(2)]
    body = listing(api, run.id, "?limit=1")
    assert body["next_cursor"] == RunCursor(steps[0].created_at_ms, steps[0].id).encode()
    store = api.app.extensions["bridge"].store
    reader = store.readers.step_runs
    listing(api, run.id)
    assert store.readers.step_runs is reader
