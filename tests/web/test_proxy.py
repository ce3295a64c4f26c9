"""The pass-through: what reaches 2.x and what comes back are the client's and 2.x's bytes, unchanged."""

from __future__ import annotations

import gzip
import json
import logging
from typing import Any

import httpx
import pytest

from bridge.bootstrap import Container
from bridge.callbacks.routes import InterceptedRoute, StatusRoute
from bridge.web.proxy import raw_target
from tests.web.asgi_client import AsgiTestClient, bridge_client
from tests.web.conftest import JSON_2X, OK_2X, FakeUpstream, make_container

TOKEN = "Bearer 3c7a0bd5-secret-token"
START_BODY = (b'{"ids":["12"],"status":"0","pid":"4321","log_path":"ql_sample_12/2026-07-18-10-00-00-123.log",'
              b'"last_execution_time":1784340000,"last_running_time":0}')
SHELL_HEADERS = {
    "Authorization": TOKEN,
    "Content-Type": "application/json;charset=UTF-8",
    "Accept-Encoding": "deflate, gzip, br, zstd",
    "User-Agent": "curl/8.5.0",
    "Accept": "*/*",
    "Cookie": "lang=zh",
}


class RecordingInterceptor:
    """Appends what it is shown to a shared list, so its calls can be ordered against the forward."""

    def __init__(self, calls: list[Any], *, fail_in: str | None = None) -> None:
        self.calls = calls
        self.fail_in = fail_in

    def before_forward(self, route: InterceptedRoute, body: bytes, headers: Any = None) -> object | None:
        self.calls.append(("before", route, body))
        if self.fail_in == "before":
            raise RuntimeError(f"boom {body!r} {TOKEN}")
        return {"prepared": route}

    def after_forward(self, prepared: object, upstream_status: int) -> None:
        self.calls.append(("after", prepared, upstream_status))
        if self.fail_in == "after":
            raise RuntimeError(f"boom {TOKEN}")


def intercepted_client(upstream: FakeUpstream, interceptor: Any) -> tuple[AsgiTestClient, Container]:
    container = make_container(upstream, interceptor=interceptor)
    return bridge_client(container), container


def put_status(client: AsgiTestClient, path: str = "/open/crons/status?t=1784340000") -> Any:
    return client.put(path, data=START_BODY, headers=SHELL_HEADERS)


def test_a_status_callback_reaches_2x_with_its_method_raw_path_query_body_and_headers_unchanged(
        client: AsgiTestClient, upstream: FakeUpstream) -> None:
    response = put_status(client)

    sent = upstream.last
    assert response.status_code == 200 and response.get_data() == OK_2X
    assert sent.method == "PUT"
    assert sent.extensions["target"] == b"/open/crons/status?t=1784340000"
    assert sent.url.raw_path == b"/open/crons/status?t=1784340000"
    assert sent.content == START_BODY
    for name, value in SHELL_HEADERS.items():
        assert sent.headers.get_list(name) == [value], name
    assert sent.headers["Content-Length"] == str(len(START_BODY))
    assert sent.headers["Host"] == "legacy.test:5700"


def test_no_accept_encoding_or_other_client_default_is_added_when_the_client_sent_none(
        client: AsgiTestClient, upstream: FakeUpstream) -> None:
    client.get("/api/crons?searchValue=x&t=1", headers={"Authorization": TOKEN})

    names = {name.lower() for name in upstream.last.headers}
    assert names == {"host", "authorization"}


def test_the_raw_target_goes_upstream_even_where_httpx_would_normalise_or_requote_it(
        client: AsgiTestClient, upstream: FakeUpstream) -> None:
    raw = '/api/a/./../b//c?filters={"a":1}&q=%E4%B8%AD%zz&t=1'
    client.get("/api/b/c", environ_overrides={"RAW_URI": raw})

    assert upstream.last.extensions["target"] == raw.encode("ascii")


def test_the_raw_target_is_read_from_the_servers_raw_path_or_rebuilt_from_the_decoded_path() -> None:
    assert raw_target({"raw_path": b"/open/crons/status", "query_string": b"t=1"}) == b"/open/crons/status?t=1"
    assert raw_target({"raw_path": b"http://bridge:5701/api/x", "query_string": b"t=2"}) == b"/api/x?t=2"
    # Without a raw path the decoded one is quoted again; the raw query string is kept as it is.
    scope = {"path": "/api/a b/%/\u4e2d", "query_string": b"t=1&q=%20"}
    assert raw_target(scope) == b"/api/a%20b/%25/%E4%B8%AD?t=1&q=%20"
    # Bytes a request line cannot carry raw are percent-encoded, visible ASCII is not touched.
    assert raw_target({"raw_path": "/\xe4\xb8\xad".encode("latin-1"), "query_string": b'a="{}|"'}) == \
        b'/%E4%B8%AD?a="{}|"'


@pytest.mark.parametrize("streamed", [True, False], ids=["streamed", "pre-read"])
def test_an_upstream_gzip_body_is_relayed_still_compressed_byte_for_byte(
        client: AsgiTestClient, upstream: FakeUpstream, streamed: bool) -> None:
    compressed = gzip.compress('{"code":200,"data":[{"name":"中文"}]}'.encode() * 50)
    headers = {"Content-Type": JSON_2X, "Content-Encoding": "gzip", "Content-Length": str(len(compressed)),
               "ETag": 'W/"abc"', "Vary": "Accept-Encoding"}
    upstream.reply = lambda _r: (httpx.Response(200, headers=headers, stream=httpx.ByteStream(compressed))
                                 if streamed else httpx.Response(200, headers=headers, content=compressed))

    response = client.get("/api/crons", headers={"Accept-Encoding": "gzip"})

    assert response.get_data() == compressed
    assert response.headers["Content-Encoding"] == "gzip"
    assert response.headers["Content-Type"] == JSON_2X  # no charset rewriting
    assert response.headers["Content-Length"] == str(len(compressed))
    assert response.headers["ETag"] == 'W/"abc"' and response.headers["Vary"] == "Accept-Encoding"
    assert upstream.last.headers["Accept-Encoding"] == "gzip"


def test_every_set_cookie_header_from_upstream_is_kept(client: AsgiTestClient, upstream: FakeUpstream) -> None:
    cookies = ["a=1; Path=/; HttpOnly", "b=2; Path=/", "c=3; Expires=Wed, 21 Oct 2037 07:28:00 GMT"]
    upstream.reply = lambda _r: httpx.Response(200, headers=[("Set-Cookie", c) for c in cookies], content=b"")

    response = client.get("/api/user")

    assert response.headers.getlist("Set-Cookie") == cookies


def test_upstreams_status_and_error_body_are_relayed_unchanged(client: AsgiTestClient, upstream: FakeUpstream) -> None:
    body = '{"code":401,"message":"请先登录"}'.encode()
    upstream.reply = lambda _r: httpx.Response(401, headers={"Content-Type": JSON_2X}, content=body)

    response = put_status(client)

    assert (response.status_code, response.get_data(), response.content_type) == (401, body, JSON_2X)


def test_hop_by_hop_headers_are_dropped_in_both_directions(client: AsgiTestClient, upstream: FakeUpstream) -> None:
    upstream.reply = lambda _r: httpx.Response(200, headers=[
        ("Connection", "keep-alive, X-Hop-Down"), ("Keep-Alive", "timeout=5"), ("X-Hop-Down", "1"),
        ("Date", "Tue, 01 Jan 2030 00:00:00 GMT"), ("Server", "node"), ("X-Powered-By", "Express"),
        ("Location", "/ql/login?redirect=%2F"), ("Content-Type", "text/html; charset=utf-8")], content=b"<html>")

    response = client.get("/", headers={"Connection": "keep-alive, X-Hop-Up", "X-Hop-Up": "1",
                                        "Keep-Alive": "300", "TE": "trailers", "Proxy-Authorization": "Basic x",
                                        "Upgrade": "websocket", "Expect": "100-continue"})

    sent = {name.lower() for name in upstream.last.headers}
    assert sent.isdisjoint({"connection", "x-hop-up", "keep-alive", "te", "proxy-authorization", "upgrade",
                            "expect"})
    received = {name.lower() for name in response.headers.keys()}
    assert received.isdisjoint({"connection", "keep-alive", "x-hop-down"})
    # The server adds neither Date nor Server of its own, so 2.x's go back as they were.
    assert (response.headers["Date"], response.headers["Server"]) == ("Tue, 01 Jan 2030 00:00:00 GMT", "node")
    assert response.headers["X-Powered-By"] == "Express"
    assert response.headers["Location"] == "/ql/login?redirect=%2F"  # relative, not made absolute
    assert response.get_data() == b"<html>"


def test_a_response_without_content_type_gets_none_added(client: AsgiTestClient, upstream: FakeUpstream) -> None:
    upstream.reply = lambda _r: httpx.Response(200, content=b"plain bytes")

    response = client.get("/api/raw")

    assert "Content-Type" not in response.headers
    assert response.get_data() == b"plain bytes"


def test_head_is_forwarded_as_head_and_keeps_upstreams_content_length(
        client: AsgiTestClient, upstream: FakeUpstream) -> None:
    upstream.reply = lambda _r: httpx.Response(200, headers={"Content-Length": "1234", "Content-Type": JSON_2X},
                                               stream=httpx.ByteStream(b""))

    response = client.head("/api/crons")

    assert upstream.last.method == "HEAD"
    assert response.headers["Content-Length"] == "1234" and response.get_data() == b""


@pytest.mark.parametrize(("method", "target"), [
    ("OPTIONS", "/api/crons"), ("GET", "/api/crons/"), ("GET", "/static/umi.3f2a.js"), ("DELETE", "/open/crons"),
    ("PATCH", "/api/x//y"), ("GET", "/"), ("POST", "/healthz"), ("GET", "/metrics/"), ("PROPFIND", "/api/crons"),
    ("POST", "/bridge/flags"), ("GET", "/bridge/other"),
])
def test_flask_answers_nothing_itself_every_unclaimed_method_and_path_reaches_2x(
        client: AsgiTestClient, upstream: FakeUpstream, method: str, target: str) -> None:
    response = client.open(target, method=method, environ_overrides={"RAW_URI": target})

    assert response.status_code == 200 and response.get_data() == OK_2X
    assert (upstream.last.method, upstream.last.extensions["target"]) == (method, target.encode())


@pytest.mark.parametrize("error", [httpx.ConnectError, httpx.ConnectTimeout, httpx.ReadTimeout,
                                   httpx.RemoteProtocolError, httpx.ReadError])
def test_an_unreachable_upstream_is_a_502_in_2x_shape(
        client: AsgiTestClient, upstream: FakeUpstream, error: type[httpx.TransportError]) -> None:
    def fail(request: httpx.Request) -> httpx.Response:
        raise error("upstream gone", request=request)
    upstream.reply = fail

    response = put_status(client)

    assert response.status_code == 502
    assert response.headers["Content-Type"] == JSON_2X
    body = json.loads(response.get_data())
    assert body["code"] == 502 and error.__name__ in body["message"] and set(body) == {"code", "message"}


def test_an_unreachable_upstream_is_logged_in_one_line_without_body_token_or_query(
        client: AsgiTestClient, upstream: FakeUpstream, caplog: pytest.LogCaptureFixture) -> None:
    def fail(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)
    upstream.reply = fail

    with caplog.at_level(logging.DEBUG, logger="bridge"):
        put_status(client, "/open/crons/status?t=1784340000&client_secret=s3cr3t")

    lines = [r.getMessage() for r in caplog.records if r.name.startswith("bridge")]
    assert len(lines) == 1 and "/open/crons/status" in lines[0] and "ConnectError" in lines[0]
    text = caplog.text
    assert "s3cr3t" not in text and "secret-token" not in text and "ql_sample_12" not in text


def test_the_interceptor_sees_the_callback_before_the_forward_and_the_status_after_it(upstream: FakeUpstream) -> None:
    calls: list[Any] = []
    upstream.on_request = lambda request: calls.append(("forward", request.extensions["target"]))
    client, _ = intercepted_client(upstream, RecordingInterceptor(calls))

    response = put_status(client)

    assert response.status_code == 200 and response.get_data() == OK_2X
    assert calls == [
        ("before", StatusRoute(from_shell=True), START_BODY),
        ("forward", b"/open/crons/status?t=1784340000"),
        ("after", {"prepared": StatusRoute(from_shell=True)}, 200),
    ]


def test_the_interceptor_is_told_upstreams_error_status_too(upstream: FakeUpstream) -> None:
    calls: list[Any] = []
    upstream.reply = lambda _r: httpx.Response(400, headers={"Content-Type": JSON_2X}, content=b'{"code":400}')
    client, _ = intercepted_client(upstream, RecordingInterceptor(calls))

    put_status(client, "/api/crons/status")

    assert calls[-1] == ("after", {"prepared": StatusRoute(from_shell=False)}, 400)


def test_after_forward_is_not_called_when_upstream_is_unreachable(upstream: FakeUpstream) -> None:
    calls: list[Any] = []

    def fail(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)
    upstream.reply = fail
    client, _ = intercepted_client(upstream, RecordingInterceptor(calls))

    response = put_status(client)

    assert response.status_code == 502
    assert [call[0] for call in calls] == ["before"]


@pytest.mark.parametrize("stage", ["before", "after"])
def test_an_interceptor_that_raises_changes_nothing_in_the_answer_and_is_counted(
        upstream: FakeUpstream, stage: str, caplog: pytest.LogCaptureFixture) -> None:
    calls: list[Any] = []
    client, container = intercepted_client(upstream, RecordingInterceptor(calls, fail_in=stage))

    with caplog.at_level(logging.DEBUG, logger="bridge"):
        response = put_status(client)

    assert (response.status_code, response.get_data(), response.content_type) == (200, OK_2X, JSON_2X)
    assert len(upstream.requests) == 1 and upstream.last.content == START_BODY
    assert container.metrics.value("ql_bridge_shadow_write_failed_total", origin="unknown", error="internal") == 1
    assert "RuntimeError" in caplog.text
    assert "secret-token" not in caplog.text and "ql_sample_12" not in caplog.text
    if stage == "before":  # nothing was prepared, so there is nothing to finish
        assert [call[0] for call in calls] == ["before"]


@pytest.mark.parametrize(("method", "target"), [
    ("GET", "/open/crons/status"), ("PUT", "/open/crons/Status"), ("PUT", "/Open/crons/status"),
    ("PUT", "/open/crons"), ("POST", "/open/dashboard/record"), ("PUT", "/open/crons/status/"),
    ("PUT", "/ql/open/crons/status"),
])
def test_only_a_put_to_the_exact_status_paths_is_shown_to_the_interceptor(
        upstream: FakeUpstream, method: str, target: str) -> None:
    calls: list[Any] = []
    client, _ = intercepted_client(upstream, RecordingInterceptor(calls))

    client.open(target, method=method, data=START_BODY, environ_overrides={"RAW_URI": target})

    assert calls == [] and upstream.last.extensions["target"] == target.encode()


def test_every_forward_is_timed_in_bridge_forward_seconds(
        client: AsgiTestClient, container: Container, upstream: FakeUpstream) -> None:
    client.get("/api/a")

    def fail(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)
    upstream.reply = fail
    client.get("/api/b")

    assert container.metrics.value("ql_bridge_forward_seconds_count") == 2


def test_when_the_panel_holds_the_connection_limit_open_it_gets_503_and_callbacks_still_pass(
        upstream: FakeUpstream) -> None:
    calls: list[Any] = []
    client, container = intercepted_client(upstream, RecordingInterceptor(calls))
    client.app.pass_through.in_flight = container.settings.connection_limit  # as if that many streams were open

    refused = client.get("/api/crons")
    callback = put_status(client)

    assert refused.status_code == 503 and refused.get_json()["code"] == 503
    assert callback.status_code == 200 and [c[0] for c in calls] == ["before", "after"]
    assert [r.url.path for r in upstream.requests] == ["/open/crons/status"]
