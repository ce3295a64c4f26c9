"""Callback bodies at the edge of what 2.x takes, through the Flask app with the real ShadowInterceptor.

2.x is the recording MockTransport of ``tests/web/conftest.py``; the shadow store is each SQL backend.
A body 2.x refuses is relayed and recorded nowhere, never counted as a shadow failure; a body 2.x takes is
recorded the same on both stores.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from sqlalchemy import select

from bridge.bootstrap import Container
from bridge.service.flags import ORIGINS
from bridge.service.ports import StaticModes
from bridge.storage.schema import run_attempts_table, runs_table
from legacy_adapters.callbacks import render_status_body
from legacy_adapters.testing.datadir import LegacyDataDir
from tests.conftest import Backend
from tests.web.asgi_client import AsgiTestClient, bridge_client
from tests.web.conftest import JSON_2X, FakeUpstream, shadow_container

BEGIN_S = 1_796_216_497
DEPTH = 100_000


def joi_400(key: str, message: str) -> bytes:
    """celebrate's errors() body, as 2.x (celebrate 15.0.3, Joi 17) answers it."""
    return ('{"statusCode":400,"error":"Bad Request","message":"Validation failed","validation":{"body":'
            '{"source":"body","keys":["' + key + '"],"message":"' + message + '"}}}').encode()


@dataclass
class ShadowSite:
    client: AsgiTestClient
    container: Container
    upstream: FakeUpstream
    legacy: LegacyDataDir
    backend: Backend

    def put(self, body: bytes, path: str = "/open/crons/status") -> tuple[int, bytes]:
        response = self.client.put(f"{path}?t=1", data=body, headers={
            "Authorization": f"Bearer {self.legacy.system_token}", "Content-Type": "application/json;charset=UTF-8"})
        return response.status_code, response.get_data()

    def shadow_failures(self) -> float:
        """Every ql_bridge_shadow_write_failed_total sample, whatever its labels."""
        return sum(sample.value for metric in self.container.metrics.registry.collect()
                   for sample in metric.samples if sample.name == "ql_bridge_shadow_write_failed_total")


@pytest.fixture
def site(sql_backend: Backend, tmp_path: Path, upstream: FakeUpstream) -> Iterator[ShadowSite]:
    with shadow_container(sql_backend, tmp_path, upstream, StaticModes(frozenset(ORIGINS))) as (container, legacy):
        yield ShadowSite(bridge_client(container), container, upstream, legacy,
                         sql_backend)


def runs_in_store(backend: Backend) -> list[dict[str, object]]:
    assert backend.engine is not None
    r, a = runs_table, run_attempts_table
    with backend.engine.connect() as conn:
        rows = conn.execute(select(r.c.status, a.c.status.label("attempt_status"), a.c.exit_code)
                            .join(a, a.c.run_id == r.c.id)).mappings().all()
    return [dict(row) for row in rows]


@pytest.mark.parametrize("body, answer", [
    pytest.param(b'{"ids":' + b"[" * DEPTH + b"]" * DEPTH + b',"status":"0"}',
                 joi_400("ids.0", '\\"ids[0]\\" must be a number'), id="deep-ids"),
    pytest.param(b'{"ids":' + b"[" * DEPTH, b'{"code":400,"message":"Unexpected end of JSON input"}',
                 id="unclosed-ids"),
    pytest.param(b'{"status":"1","pid":' + b"[" * DEPTH + b"]" * DEPTH + b"}",
                 joi_400("pid", '\\"pid\\" must be a string'), id="deep-pid"),
    pytest.param(b'{"status":"0","x":' + b'{"a":' * DEPTH + b"1" + b"}" * DEPTH + b"}",
                 joi_400("x", '\\"x\\" is not allowed'), id="deep-unknown-key"),
])
def test_a_deeply_nested_status_body_is_relayed_and_never_counted_as_a_shadow_failure(
        site: ShadowSite, body: bytes, answer: bytes, caplog: pytest.LogCaptureFixture) -> None:
    # What 2.x v2.21.0's middleware chain answers (reproduced with express 4.21.2, body-parser 1.20.3,
    # celebrate 15.0.3 on Node 20): V8 parses any depth, then Joi refuses the container.
    site.upstream.reply = lambda _r: httpx.Response(400, headers={"Content-Type": JSON_2X}, content=answer)

    status, relayed = site.put(body)

    assert (status, relayed) == (400, answer)
    assert site.upstream.last.content == body
    assert site.shadow_failures() == 0
    assert not [r for r in caplog.records if r.levelname == "ERROR"]
    assert runs_in_store(site.backend) == []


def test_a_deeply_nested_stop_body_is_relayed_and_never_counted_as_a_shadow_failure(site: ShadowSite) -> None:
    answer = joi_400("0", '\\"[0]\\" must be a number')
    site.upstream.reply = lambda _r: httpx.Response(400, headers={"Content-Type": JSON_2X}, content=answer)

    assert site.put(b"[" * DEPTH + b"]" * DEPTH, "/open/crons/stop") == (400, answer)
    assert site.shadow_failures() == 0


@pytest.mark.parametrize("exit_code", [2**40, 2**53 - 1, -(2**53 - 1)])
def test_an_exit_code_2x_accepts_closes_the_run_with_that_code_on_every_store(site: ShadowSite,
                                                                             exit_code: int) -> None:
    cron = site.legacy.add_cron("wide", "task wide.sh", "0 * * * *")
    log = "wide_1/2026-12-02-13-01-37-617.log"

    assert site.put(render_status_body(cron, 0, 4321, log, BEGIN_S))[0] == 200
    assert site.put(render_status_body(cron, 1, 4321, log, BEGIN_S, 7, exit_code))[0] == 200

    assert runs_in_store(site.backend) == [{"status": "failed", "attempt_status": "failed", "exit_code": exit_code}]
    assert site.shadow_failures() == 0


@pytest.mark.parametrize("exit_code", ["1.5", "0.5", "-0.25"])
def test_a_non_integer_exit_code_2x_accepts_never_leaves_the_run_open(site: ShadowSite, exit_code: str) -> None:
    # Joi takes any safe number and 2.x stores it; no process exits with one, and the shell never sends one.
    cron = site.legacy.add_cron("odd", "task odd.sh", "0 * * * *")
    log = "odd_1/2026-12-02-13-01-37-617.log"

    assert site.put(render_status_body(cron, 0, 4321, log, BEGIN_S))[0] == 200
    assert site.put(render_status_body(cron, 1, 4321, log, BEGIN_S, 7, exit_code))[0] == 200

    (run,) = runs_in_store(site.backend)
    assert run["status"] in ("succeeded", "failed") and run["attempt_status"] == run["status"]
    assert site.shadow_failures() == 0
