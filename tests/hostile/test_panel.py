"""The panel's own traffic through the bridge: its SockJS WebSocket, long-lived xhr_streaming answers, and
every task's callback beside them (the `panel` group of the hostile suite, on both stores).

2.x's channel is served by the test double as sockjs-node serves it for 2.x (``legacy_adapters.testing.
sockjs_double``): ``/api/ws/<server>/<session>/websocket`` and ``xhr_streaming`` + ``xhr_send``, token in
``?token=``, every message echoed.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import httpx
import pytest
from sqlalchemy import func, select
from websockets.exceptions import InvalidStatus
from websockets.sync.client import ClientConnection, connect

from bridge.storage.schema import runs_table
from tests.hostile.conftest import PANEL_TOKEN, Site, rss_kib, start_site
from tests.hostile.test_serving import callback_latencies, p99

STREAMS = 200
WEBSOCKETS = 100
pytestmark = pytest.mark.panel


@pytest.fixture
def lively_site(tmp_path: Path, store: tuple[str, str | None]) -> Iterator[Site]:
    """A bridge in front of a double whose SockJS heartbeat comes every 0.3 s instead of 25 s."""
    yield from start_site(tmp_path, store, {"sockjs_heartbeat_s": 0.3})


def websocket_url(site: Site, session: str, token: str = PANEL_TOKEN) -> str:
    return f"ws://127.0.0.1:{site.port}/api/ws/123/{session}/websocket?token={token}"


def open_stream(port: int, session: str, timeout_s: float = 10) -> socket.socket:
    """sockjs-client's xhr_streaming: a POST whose answer never ends; returns once the session is open."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=timeout_s)
    sock.sendall(f"POST /api/ws/123/{session}/xhr_streaming?token={PANEL_TOKEN} HTTP/1.1\r\nHost: panel\r\n"
                 f"Content-Length: 0\r\nUser-Agent: Mozilla/5.0 (X11; Linux x86_64)\r\n\r\n".encode())
    received = b""
    while b"\no\n" not in received:  # the prelude of 2,048 h, then the open frame
        chunk = sock.recv(65536)
        if not chunk:
            raise AssertionError(f"the stream ended before it opened: {received[:200]!r}")
        received += chunk
    return sock


def read_until(sock: socket.socket, marker: bytes, timeout_s: float) -> float:
    """Seconds until ``marker`` arrived on ``sock``."""
    started = time.monotonic()
    sock.settimeout(timeout_s)
    received = b""
    while marker not in received:
        chunk = sock.recv(65536)
        if not chunk:
            raise AssertionError(f"closed before {marker!r}")
        received += chunk
    return time.monotonic() - started


def test_a_websocket_switches_protocols_echoes_both_ways_and_passes_the_close_code_on(site: Site) -> None:
    with connect(websocket_url(site, "ws-echo"), user_agent_header="Mozilla/5.0 (X11; Linux x86_64)") as ws:
        assert ws.response.status_code == 101
        assert ws.recv(timeout=5) == "o"  # sockjs-node's open frame, from 2.x through the bridge
        ws.send('["hello through the bridge"]')
        assert ws.recv(timeout=5) == 'a["hello through the bridge"]'
        ws.close(4000, "panel closed")
    deadline = time.monotonic() + 5
    while 4000 not in site.double.sockjs.close_codes and time.monotonic() < deadline:
        time.sleep(0.05)
    assert 4000 in site.double.sockjs.close_codes  # the client's close code reached 2.x


def test_2xs_token_refusal_and_its_close_come_back_as_2x_sent_them(site: Site) -> None:
    with connect(websocket_url(site, "ws-bad", token="not-a-token")) as ws:
        assert ws.recv(timeout=5) == "o"
        assert ws.recv(timeout=5) == 'c["404","Normal closure"]'  # sock.ts: conn.close('404')
        with pytest.raises(Exception):  # noqa: B017 - the library raises ConnectionClosedOK at the close
            ws.recv(timeout=5)
        assert ws.close_code == 1000


def test_an_upgrade_2x_does_not_switch_gets_2xs_own_answer_unchanged(site: Site) -> None:
    with pytest.raises(InvalidStatus) as refused:
        connect(f"ws://127.0.0.1:{site.port}/api/ws/info", open_timeout=5)

    response = refused.value.response
    assert response.status_code == 200  # sockjs-node answers /info as plain HTTP, upgrade or not
    assert b'"websocket":true' in response.body


def test_an_xhr_streaming_heartbeat_reaches_the_client_at_once_and_send_echoes_into_the_stream(
        lively_site: Site) -> None:
    sock = open_stream(lively_site.port, "stream-echo")
    try:
        beat = read_until(sock, b"h\n", timeout_s=5)
        sent = httpx.post(f"{lively_site.url}/api/ws/123/stream-echo/xhr_send", content=b'["ping"]', timeout=5)
        assert sent.status_code == 204
        read_until(sock, b'a["ping"]\n', timeout_s=5)
    finally:
        sock.close()
    assert beat < 2.0, f"a 1-byte heartbeat sent every 0.3 s took {beat:.2f} s to arrive"


@contextmanager
def panel_load(site: Site) -> Iterator[list[ClientConnection]]:
    """STREAMS xhr_streaming sessions and WEBSOCKETS WebSockets open through the bridge for the block."""
    with ExitStack() as stack:
        for i in range(STREAMS):
            stack.callback(stack.enter_context(open_stream(site.port, f"s{i}")).close)
        sockets = [stack.enter_context(connect(websocket_url(site, f"w{i}"), open_timeout=10))
                   for i in range(WEBSOCKETS)]
        for ws in sockets:
            assert ws.recv(timeout=10) == "o"
        yield sockets


def threads_of(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("Threads:")))


def test_two_hundred_streams_and_a_hundred_websockets_leave_callbacks_health_and_shadow_facts_alone(
        site: Site) -> None:
    callback_latencies(site, 10)  # warm-up: connections, caches, first-use imports
    quiet = callback_latencies(site, 30)
    pid = site.proc.pid  # type: ignore[attr-defined]
    threads_before, (rss_before, _) = threads_of(pid), rss_kib(pid)

    with panel_load(site) as sockets:
        threads_open, (rss_open, _) = threads_of(pid), rss_kib(pid)
        time.sleep(1.5)  # past the burst of opening them: what is measured is their being open
        loaded = callback_latencies(site, 50)
        alive = httpx.get(f"{site.url}/livez", timeout=5)
        sockets[0].send('["still echoing"]')
        echoed = sockets[0].recv(timeout=5)
    # Quiet again afterwards: a shared machine's drift over the minute is then on both sides of the comparison.
    quiet += callback_latencies(site, 30)

    assert alive.status_code == 200
    assert echoed == 'a["still echoing"]'
    assert threads_open <= threads_before + 2, (threads_before, threads_open)  # sockets, never threads
    # docs/serving.md, "Memory bound": a few KiB an idle stream or WebSocket (the worst case is bounded far higher).
    assert (rss_open - rss_before) / 1024 < 48, f"RSS grew by {(rss_open - rss_before) / 1024:.1f} MiB"
    # A floor of 20 ms keeps scheduler noise on a shared machine from deciding the comparison.
    assert p99(loaded) < 2 * max(p99(quiet), 0.020), (p99(quiet), p99(loaded), sorted(loaded)[-5:])
    engine = site.store_engine()
    try:
        with engine.connect() as conn:
            runs = conn.execute(select(func.count()).select_from(runs_table)
                                .where(runs_table.c.status == "succeeded")).scalar()
    finally:
        engine.dispose()
    assert runs == 120  # every execution of the warm-up, quiet and loaded blocks has its facts


def test_a_stopping_bridge_closes_websockets_with_1001_and_ends_streams(site: Site) -> None:
    stream = open_stream(site.port, "stopping")
    with connect(websocket_url(site, "stopping")) as ws:
        assert ws.recv(timeout=5) == "o"
        stopping = threading.Timer(0.2, site.proc.terminate)  # type: ignore[attr-defined]
        stopping.start()
        with pytest.raises(Exception):  # noqa: B017 - ConnectionClosedError, whichever side closed first
            while True:
                ws.recv(timeout=10)
        assert ws.close_code == 1001  # "going away": sockjs-client reconnects
    stream.settimeout(10)
    tail = b""
    while chunk := stream.recv(65536):
        tail += chunk
    stream.close()
    assert tail.endswith(b"0\r\n\r\n")  # the chunked answer ended cleanly, not cut
    assert site.proc.wait(15) == 0  # type: ignore[attr-defined]
