"""/readyz on every release v2.17–v2.21: it names the 2.x release the bridge fronts (informational, never a gate)
and asks 2.x's backend the request that release serves: before v2.19 `/api/health` is public.js's (port 5400),
which the backend refuses (docs/legacy-2x.md#processes-ports-and-health-before-v221)."""

from __future__ import annotations

import dataclasses

import httpx
from flask import Response

from bridge.web.readiness import ReadinessWatch
from legacy_adapters.releases import ReleaseProfile, profile_for
from tests.web.asgi_client import bridge_client
from tests.web.conftest import JSON_2X, FakeUpstream, make_container


def pre_v219_backend(request: httpx.Request) -> httpx.Response:
    """As a v2.17/v2.18 backend answers without a token (tests/integration/old_releases.PreV219BackendDouble)."""
    if request.url.path == "/api/system":
        return httpx.Response(200, headers={"Content-Type": JSON_2X}, content=b'{"code":200,"data":{}}')
    return httpx.Response(401, headers={"Content-Type": JSON_2X},
                          content=b'{"code":401,"message":"No authorization token was found"}')


def readyz(upstream: FakeUpstream, release: ReleaseProfile | None) -> Response:
    container = dataclasses.replace(make_container(upstream), release=release)
    client = bridge_client(container)
    try:
        return client.get("/readyz")
    finally:
        client.app.readiness.close()  # before the client it asks with is closed
        container.http.close()


def test_on_v2_18_readiness_asks_the_backend_what_it_serves_and_is_ready(upstream: FakeUpstream) -> None:
    upstream.reply = pre_v219_backend

    response = readyz(upstream, profile_for("2.18.3", "/ql/version.yaml"))

    body = response.get_json()
    assert response.status_code == 200, body
    assert body["upstream"]["reason"] == "UPSTREAM_OK" and body["upstream"]["path"] == "/api/system"
    assert [r.url.path for r in upstream.requests] == ["/api/system"]
    assert body["legacy_release"] == {"status": "ok", "reason": "LEGACY_RELEASE_KNOWN", "name": "v2.18.3",
                                      "evidence": "/ql/version.yaml"}


def test_from_v2_19_readiness_asks_the_backends_own_health_route(upstream: FakeUpstream) -> None:
    response = readyz(upstream, profile_for("2.19.2", "BRIDGE_LEGACY_RELEASE"))

    assert [r.url.path for r in upstream.requests] == ["/api/health"]
    assert response.get_json()["legacy_release"]["name"] == "v2.19.2"


def test_a_release_known_only_by_its_line_is_a_warning_that_leaves_the_bridge_ready(upstream: FakeUpstream) -> None:
    from legacy_adapters.releases import profile_from_schema

    response = readyz(upstream, profile_from_schema({"RunningInstances"}, {"log_name"}, True))

    assert response.status_code == 200
    assert response.get_json()["legacy_release"] == {
        "status": "warn", "reason": "LEGACY_RELEASE_PATCH_UNKNOWN", "name": "v2.21.x",
        "evidence": "schema: RunningInstances table"}


def test_without_a_2x_data_dir_the_release_check_is_disabled(upstream: FakeUpstream) -> None:
    body = readyz(upstream, None).get_json()

    assert body["legacy_release"] == {"status": "disabled", "reason": "LEGACY_RELEASE_DISABLED"}


def test_the_readiness_watch_asks_the_releases_request_too(upstream: FakeUpstream) -> None:
    upstream.reply = pre_v219_backend
    container = dataclasses.replace(make_container(upstream), release=profile_for("2.17.13", "/ql/version.yaml"))
    watch = ReadinessWatch(container).start()
    try:
        upstream_check = watch.checks()["upstream"]
    finally:
        watch.close()  # its client is left open: a loop still finishing must not fail on a closed one (no socket)

    assert upstream_check["reason"] == "UPSTREAM_OK" and upstream_check["path"] == "/api/system"
