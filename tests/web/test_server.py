"""The real thing: uvicorn serving the app in a subprocess, in front of a tiny upstream on a real socket."""

from __future__ import annotations

import gzip
import http.client
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from bridge.config import Settings
from bridge.web.http_protocol import HEADER_LIMIT_BYTES, BridgeHttpProtocol
from bridge.web.server import uvicorn_config
from tests.web.asgi_client import bridge_client
from tests.web.conftest import FakeUpstream, make_container

COMPRESSED = gzip.compress('{"code":200,"data":{"name":"中文","bytes":"\\u0000\\uffff"}}'.encode() * 20)
JSON_2X = "application/json; charset=utf-8"
BODY = b'{"ids":["1"],"status":"0","pid":"10325","log_path":"hello_1/x.log","last_execution_time":1796216497}'
SERVE = """
import sys
from bridge.bootstrap import Container, build_http_client
from bridge.config import Settings
from bridge.metrics import BridgeMetrics
from bridge.web.server import serve

settings = Settings.from_env({"BRIDGE_LISTEN": sys.argv[1], "BRIDGE_LEGACY_URL": sys.argv[2],
                              "BRIDGE_DATA_DIR": sys.argv[3], "BRIDGE_THREADS": "4"})
serve(settings, lambda s: Container(settings=s, metrics=BridgeMetrics(), http=build_http_client(s)))
"""


@dataclass
class Seen:
    method: str
    target: str
    headers: list[tuple[str, str]]
    body: bytes


@dataclass
class TinyUpstream:
    url: str
    seen: list[Seen] = field(default_factory=list)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_PUT(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.server.seen.append(Seen(self.command, self.path, list(self.headers.items()), body))  # type: ignore[attr-defined]
        self.send_response(200)
        self.send_header("Content-Type", JSON_2X)
        self.send_header("Content-Encoding", "gzip")
        self.send_header("X-Upstream-Marker", "2.x")
        self.send_header("Content-Length", str(len(COMPRESSED)))
        self.end_headers()
        self.wfile.write(COMPRESSED)

    def log_message(self, format: str, *args: object) -> None:  # the stdlib's signature
        pass


@pytest.fixture
def tiny_upstream() -> Iterator[TinyUpstream]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.daemon_threads = True
    upstream = TinyUpstream(f"http://127.0.0.1:{server.server_address[1]}")
    server.seen = upstream.seen  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield upstream
    server.shutdown()
    server.server_close()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_until_listening(port: int, process: subprocess.Popen[bytes], log: Path, timeout_s: float = 20) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"the bridge exited with {process.returncode}:\n{log.read_text()[-3000:]}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    pytest.fail(f"the bridge did not listen on {port} within {timeout_s} s:\n{log.read_text()[-3000:]}")


@pytest.fixture
def bridge_port(tiny_upstream: TinyUpstream, tmp_path: Path) -> Iterator[int]:
    port = free_port()
    log = tmp_path / "bridge.log"
    with log.open("wb") as out:
        process = subprocess.Popen([sys.executable, "-c", SERVE, f"127.0.0.1:{port}", tiny_upstream.url,
                                    str(tmp_path)], stdout=out, stderr=subprocess.STDOUT, cwd=tmp_path)
    try:
        wait_until_listening(port, process, log)
        yield port
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def test_uvicorn_takes_the_settings_logs_no_request_line_and_never_rewrites_forwarding_headers() -> None:
    settings = Settings.from_env({"BRIDGE_LISTEN": "0.0.0.0:5800", "BRIDGE_THREADS": "8",
                                  "BRIDGE_IDLE_TIMEOUT_S": "7", "BRIDGE_HEADERS_TIMEOUT_S": "9",
                                  "BRIDGE_DRAIN_TIMEOUT_S": "3"})
    client = bridge_client(make_container(FakeUpstream()))

    config = uvicorn_config(client.app, settings)

    assert (config.host, config.port, config.timeout_keep_alive, config.timeout_graceful_shutdown) == \
        ("0.0.0.0", 5800, 7, 3)
    assert issubclass(config.http, BridgeHttpProtocol) and config.http.deadlines.headers_s == 9  # type: ignore[arg-type]
    assert HEADER_LIMIT_BYTES >= 16 * 1024  # never below Node's limit
    assert config.access_log is False and config.proxy_headers is False and config.ws == "wsproto"
    assert config.ws_ping_interval is None  # no idle timeout shorter than 2.x's 25 s SockJS heartbeat
    client.close()


def test_several_workers_are_refused_with_one_line_naming_the_variable() -> None:
    with pytest.raises(ValueError, match="BRIDGE_WORKERS"):
        Settings.from_env({"BRIDGE_WORKERS": "2"})


def test_the_real_server_relays_a_callback_and_2xs_compressed_answer_unchanged(
        bridge_port: int, tiny_upstream: TinyUpstream) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", bridge_port, timeout=10)
    try:
        conn.putrequest("PUT", "/open/crons/status?t=1796216497", skip_host=False, skip_accept_encoding=True)
        for name, value in [("Authorization", "Bearer tok"), ("Content-Type", "application/json;charset=UTF-8"),
                            ("Accept-Encoding", "deflate, gzip, br, zstd"), ("Content-Length", str(len(BODY)))]:
            conn.putheader(name, value)
        conn.endheaders(BODY)
        response = conn.getresponse()
        body = response.read()
    finally:
        conn.close()

    assert response.status == 200
    assert body == COMPRESSED
    assert response.getheader("Content-Type") == JSON_2X
    assert response.getheader("Content-Encoding") == "gzip"
    assert response.getheader("X-Upstream-Marker") == "2.x"
    [seen] = tiny_upstream.seen
    assert (seen.method, seen.target, seen.body) == ("PUT", "/open/crons/status?t=1796216497", BODY)
    sent = {k.lower(): v for k, v in seen.headers}
    assert sent["authorization"] == "Bearer tok" and sent["content-type"] == "application/json;charset=UTF-8"
    assert sent["accept-encoding"] == "deflate, gzip, br, zstd"
    assert "user-agent" not in sent and "accept" not in sent  # nothing added on the way
