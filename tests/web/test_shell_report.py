"""What the seam block adds beside 2.x's body (legacy_adapters/shell_report.py): read by the bridge, never
forwarded, and never preferred over what 2.x's own body says. Through the ASGI app with the real interceptor;
2.x is the recording MockTransport of ``tests/web/conftest.py``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from bridge.service.flags import ORIGINS
from bridge.service.ports import StaticModes
from legacy_adapters.callbacks import render_status_body
from legacy_adapters.shell_report import EXIT_CODE_HEADER, TRAPPED_HEADER, read_shell_report
from tests.conftest import Backend
from tests.web.asgi_client import bridge_client
from tests.web.conftest import FakeUpstream, shadow_container
from tests.web.test_callback_input import BEGIN_S, ShadowSite, runs_in_store

LOG = "report_1/2026-12-02-13-01-37-617.log"


@pytest.fixture
def site(sqlite_backend: Backend, tmp_path: Path, upstream: FakeUpstream) -> Iterator[ShadowSite]:
    with shadow_container(sqlite_backend, tmp_path, upstream, StaticModes(frozenset(ORIGINS))) as (container, legacy):
        yield ShadowSite(bridge_client(container), container, upstream, legacy, sqlite_backend)


def put(site: ShadowSite, body: bytes, **extra: str) -> int:
    headers = {"Authorization": f"Bearer {site.legacy.system_token}",
               "Content-Type": "application/json;charset=UTF-8", **extra}
    return site.client.put("/open/crons/status?t=1", data=body, headers=headers).status_code


def test_an_end_without_an_exit_code_in_its_body_takes_the_shells_and_2x_never_sees_the_header(
        site: ShadowSite) -> None:
    cron = site.legacy.add_cron("report", "task report.sh", "0 * * * *")
    end = render_status_body(cron, 1, 4321, LOG, BEGIN_S, 7)  # a v2.17–v2.20 end: no exit_code key

    assert put(site, render_status_body(cron, 0, 4321, LOG, BEGIN_S)) == 200
    assert put(site, end, **{EXIT_CODE_HEADER: "3"}) == 200

    assert runs_in_store(site.backend) == [{"status": "failed", "attempt_status": "failed", "exit_code": 3}]
    forwarded = site.upstream.last
    assert forwarded.content == end
    assert not [name for name in forwarded.headers if name.lower().startswith("x-ql-bridge-")]


def test_2xs_own_exit_code_wins_over_the_shells(site: ShadowSite) -> None:
    cron = site.legacy.add_cron("report", "task report.sh", "0 * * * *")

    assert put(site, render_status_body(cron, 0, 4321, LOG, BEGIN_S)) == 200
    assert put(site, render_status_body(cron, 1, 4321, LOG, BEGIN_S, 7, 0), **{EXIT_CODE_HEADER: "3"}) == 200

    assert runs_in_store(site.backend) == [{"status": "succeeded", "attempt_status": "succeeded", "exit_code": 0}]


@pytest.mark.parametrize(("headers", "exit_code", "trapped"), [
    ({}, None, False),
    ({EXIT_CODE_HEADER: "0"}, 0, False),
    ({EXIT_CODE_HEADER: " 124 "}, 124, False),
    ({EXIT_CODE_HEADER: "256"}, None, False),  # no shell status is above 255
    ({EXIT_CODE_HEADER: "-1"}, None, False),
    ({EXIT_CODE_HEADER: "3.0"}, None, False),
    ({EXIT_CODE_HEADER: "٣"}, None, False),  # a digit, but not one a shell prints
    ({TRAPPED_HEADER: "1"}, None, True),
    ({TRAPPED_HEADER: "yes"}, None, False),
])
def test_only_what_the_seam_block_sends_is_read(headers: dict[str, str], exit_code: int | None,
                                                trapped: bool) -> None:
    report = read_shell_report(headers)
    assert (report.exit_code, report.trapped) == (exit_code, trapped)
