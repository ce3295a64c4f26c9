"""The stop routes reach the interceptor on /open and /api, with 2.x's answer body (stopInstance answers HTTP
200 whether it stopped anything or not); anything else that looks like them is only relayed."""

from __future__ import annotations

import gzip
from typing import Any

import httpx
import pytest

from bridge.callbacks.routes import InstanceStopRoute, InterceptedRoute, StatusRoute, StopRoute
from tests.web.asgi_client import bridge_client
from tests.web.conftest import JSON_2X, FakeUpstream, make_container

STOPPED = '{"code":200,"message":"实例已停止"}'.encode()
HEADERS = {"Authorization": "Bearer t", "Content-Type": "application/json"}


class AnswerRecorder:
    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def before_forward(self, route: InterceptedRoute, body: bytes, headers: Any = None) -> object | None:
        return {"route": route}

    def after_forward(self, prepared: object, upstream_status: int, *answer: bytes) -> None:
        self.calls.append((prepared, upstream_status, *answer))


def send(upstream: FakeUpstream, method: str, target: str, body: bytes = b"") -> tuple[httpx.Response, Any]:
    recorder = AnswerRecorder()
    client = bridge_client(make_container(upstream, interceptor=recorder))
    response = client.open(target, method=method, data=body, headers=HEADERS, environ_overrides={"RAW_URI": target})
    return response, recorder.calls


@pytest.mark.parametrize("prefix", ["/open", "/api"])
def test_stop_instance_is_shown_to_the_interceptor_with_2xs_answer(upstream: FakeUpstream, prefix: str) -> None:
    upstream.reply = lambda _r: httpx.Response(200, headers={"Content-Type": JSON_2X}, content=STOPPED)

    response, calls = send(upstream, "POST", f"{prefix}/crons/12/instances/34/stop?t=1")

    assert response.get_data() == STOPPED  # 2.x's answer goes back unchanged
    assert calls == [({"route": InstanceStopRoute(cron_id=12, instance_id=34)}, 200, STOPPED)]


def test_a_compressed_answer_is_decoded_for_the_interceptor_and_relayed_compressed(upstream: FakeUpstream) -> None:
    wire = gzip.compress(STOPPED)
    upstream.reply = lambda _r: httpx.Response(200, headers={"Content-Type": JSON_2X, "Content-Encoding": "gzip"},
                                               content=wire)

    response, calls = send(upstream, "POST", "/open/crons/12/instances/34/stop")

    assert response.get_data() == wire
    assert calls[0][2] == STOPPED


def test_an_answer_in_a_coding_the_bridge_cannot_read_is_passed_as_none(upstream: FakeUpstream) -> None:
    upstream.reply = lambda _r: httpx.Response(200, headers={"Content-Type": JSON_2X, "Content-Encoding": "br"},
                                               content=b"\x0b\x01\x80{}\x03")

    _response, calls = send(upstream, "POST", "/open/crons/12/instances/34/stop")

    assert calls == [({"route": InstanceStopRoute(cron_id=12, instance_id=34)}, 200)]  # no answer to read


def test_the_api_stop_passes_its_answer_and_a_status_callback_keeps_the_two_argument_call(
        upstream: FakeUpstream) -> None:
    _response, stop_calls = send(upstream, "PUT", "/api/crons/stop", b"[12]")
    _response, status_calls = send(upstream, "PUT", "/open/crons/status", b"{}")

    assert stop_calls == [({"route": StopRoute()}, 200, b'{"code":200}')]
    assert status_calls == [({"route": StatusRoute(from_shell=True)}, 200)]


@pytest.mark.parametrize(("method", "target"), [
    ("PUT", "/open/crons/12/instances/34/stop"), ("GET", "/api/crons/12/instances/34/stop"),
    ("POST", "/open/crons/12/instances/x/stop"), ("POST", "/open/crons/12/instances/34/stop/x"),
    ("POST", "/Open/crons/12/instances/34/stop"), ("POST", "/open/crons/12/instances/34"),
    ("POST", "/ql/open/crons/12/instances/34/stop"), ("POST", "/open/crons/stop"),
])
def test_only_stop_instances_post_is_intercepted(upstream: FakeUpstream, method: str, target: str) -> None:
    _response, calls = send(upstream, method, target)

    assert calls == [] and upstream.last.extensions["target"] == target.encode()
