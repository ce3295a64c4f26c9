"""The v3 API on input a store would treat on its own terms: every SQL store gives the same answer.

PostgreSQL text cannot hold NUL (the driver refuses it where SQLite just finds nothing), and neither driver
can send an unpaired surrogate; such text in a run id or a cursor must never reach a store. A fuzz test
sends the same requests to a SQLite-backed and a PostgreSQL-backed app and compares the answers.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bridge.service.queries import RUN_LIST_PARAMETERS
from tests.conftest import Backend
from tests.web.test_api_v3 import Api, api_app, seed_five


def api_on(backend: Backend, tmp_path: Path) -> Iterator[Api]:
    tmp_path.mkdir()
    with api_app(backend, tmp_path) as api:
        seed_five(api.seeder)
        yield api


@pytest.fixture
def api(sql_backend: Backend, tmp_path: Path) -> Iterator[Api]:
    yield from api_on(sql_backend, tmp_path / "app")


def cursor_of(created_at_ms: object, run_id: object) -> str:
    """A cursor in the API's own encoding (base64url of a JSON pair), holding whatever it is given."""
    raw = json.dumps([created_at_ms, run_id]).encode("ascii")  # ensure_ascii: a surrogate becomes \udXXX
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def answer(api: Api, url: str) -> tuple[int, str | None, object]:
    """Status, error code and details: what must not depend on the store."""
    response = api.get(url)
    body = response.get_json()
    assert body is not None, (response.status_code, response.get_data()[:200])
    if response.status_code >= 400:
        return response.status_code, body["error"]["code"], body["error"]["details"]
    return response.status_code, None, None


@pytest.mark.parametrize("path", ["/v3/runs/%00", "/v3/runs/%00/events", "/v3/runs/a%00b",
                                  "/v3/runs/0192F0E4-0000-7000-8000-000000000000", "/v3/runs/%ED%A0%80",
                                  "/v3/runs/" + "a" * 300 + "/events"])
def test_a_run_id_that_names_no_run_is_404_run_not_found_on_every_store(api: Api, path: str) -> None:
    status, code, _ = answer(api, path)

    assert (status, code) == (404, "RUN_NOT_FOUND")


@pytest.mark.parametrize("run_id", ["\x00", "0192f0e4-0000-7000-8000-00000000000\x00", "\ud800", "a\udcffb"])
def test_a_cursor_whose_run_id_no_store_can_hold_is_400_invalid_query_on_every_store(api: Api, run_id: str) -> None:
    assert answer(api, f"/v3/runs?cursor={cursor_of(1_796_205_600_123, run_id)}") == (
        400, "INVALID_QUERY", {"parameter": "cursor"})


# --- The same requests against both stores --------------------------------------------------------------

CHARS = st.one_of(st.characters(), st.sampled_from("\x00%&=+#/?. -:Z"),
                  st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF))
TEXT = st.lists(CHARS, max_size=40).map("".join)
NUMBERS = st.integers(min_value=-(2**70), max_value=2**70).map(str)
CURSORS = st.builds(cursor_of, st.one_of(st.integers(min_value=-(2**70), max_value=2**70), TEXT, st.none()),
                    st.one_of(TEXT, st.integers(), st.none()))
VALUES = st.one_of(TEXT, NUMBERS, CURSORS, st.sampled_from(["", "2026-12-02T10:00:00.123Z", "0001-01-01T00:00:00Z",
                                                            "9999-12-31T23:59:59.999-23:59", "manual", "running"]))
PARAMETERS = st.one_of(st.sampled_from(sorted(RUN_LIST_PARAMETERS | {"after"})), TEXT)


def q(text: str) -> str:
    return quote(text, safe="", errors="surrogatepass")


REQUESTS = st.one_of(
    st.lists(st.tuples(PARAMETERS, VALUES), max_size=3).map(
        lambda pairs: "/v3/runs?" + "&".join(f"{q(k)}={q(v)}" for k, v in pairs)),
    st.builds(lambda run_id: f"/v3/runs/{q(run_id)}", TEXT.filter(bool)),
    st.builds(lambda run_id, after, limit: f"/v3/runs/{q(run_id)}/events?after={q(after)}&limit={q(limit)}",
              TEXT.filter(bool), st.one_of(NUMBERS, TEXT), st.one_of(NUMBERS, TEXT)),
)


@pytest.fixture
def both(sqlite_backend: Backend, postgres_backend: Backend, tmp_path: Path) -> Iterator[tuple[Api, Api]]:
    apis = api_on(sqlite_backend, tmp_path / "sqlite"), api_on(postgres_backend, tmp_path / "postgres")
    yield next(apis[0]), next(apis[1])
    for rest in apis:
        next(rest, None)


@pytest.mark.postgres
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(url=REQUESTS)
def test_every_v3_request_gets_the_same_answer_from_sqlite_and_postgresql(both: tuple[Api, Api], url: str) -> None:
    on_sqlite, on_postgres = answer(both[0], url), answer(both[1], url)

    assert on_sqlite == on_postgres, url
    assert on_sqlite[0] < 500, (url, on_sqlite)
