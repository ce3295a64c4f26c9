"""Attacks on the serving layer: slow clients, huge bodies, bad framing, secrets in request lines, restarts.

In front of the panel's port the bridge is on the panel's critical path: none of these may stop it
answering callbacks, the panel or its health check.
"""

from __future__ import annotations

import json
import math
import os
import signal
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import httpx
import pytest
from sqlalchemy import func, select

from bridge.storage.schema import runs_table
from tests.hostile.conftest import Site, raw_request, rss_kib

ATTACKERS = 200
JSON_2X = "application/json; charset=utf-8"
MIB = 1024 * 1024


def p99(samples: list[float]) -> float:
    """Nearest rank: the smallest sample at or above 99 % of them (the largest of fewer than 100)."""
    ordered = sorted(samples)
    return ordered[max(0, math.ceil(0.99 * len(ordered)) - 1)]


def callback_latencies(site: Site, executions: int) -> list[float]:
    """Seconds per callback for `executions` start/end pairs, one kept-alive client like a busy shell."""
    latencies = []
    begin = int(time.time()) - 60
    with httpx.Client(base_url=site.url, timeout=30) as client:
        for _ in range(executions):
            pid = site.next_pid()
            for status in (0, 1):
                started = time.perf_counter()
                reply = site.callback(client, status, pid, begin)
                latencies.append(time.perf_counter() - started)
                assert reply.status_code == 200, reply.content
    return latencies


@contextmanager
def tricklers(port: int, count: int) -> Iterator[list[socket.socket]]:
    """`count` connections that send a status request's headers (half of them only part of the headers)
    and then one byte a second, for as long as the block runs."""
    stop = threading.Event()
    with ExitStack() as stack:
        sockets = []
        for i in range(count):
            sock = stack.enter_context(socket.create_connection(("127.0.0.1", port), timeout=5))
            if i % 2:
                sock.sendall(b"PUT /open/crons/status HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n")
            else:
                sock.sendall(b"PUT /open/crons/status HTTP/1.1\r\nHost: x\r\nX-Slow: ")
            sockets.append(sock)

        def trickle() -> None:
            while not stop.wait(1.0):
                for sock in sockets:
                    try:
                        sock.send(b"a")
                    except OSError:
                        pass

        thread = threading.Thread(target=trickle, daemon=True)
        thread.start()
        try:
            yield sockets
        finally:
            stop.set()
            thread.join(5)


def test_two_hundred_trickling_clients_leave_callback_latency_and_health_alone(site: Site) -> None:
    callback_latencies(site, 10)  # warm-up: connections, caches, first-use imports
    quiet = callback_latencies(site, 30)

    with tricklers(site.port, ATTACKERS):
        time.sleep(1.5)
        attacked = callback_latencies(site, 30)
        health = httpx.get(f"{site.url}/healthz", timeout=5)
        alive = httpx.get(f"{site.url}/livez", timeout=5)

    assert health.status_code == 200 and health.json()["status"] == "ok"
    assert alive.status_code == 200
    # A floor of 20 ms keeps scheduler noise on a shared machine from deciding the comparison.
    assert p99(attacked) < 2 * max(p99(quiet), 0.020), (p99(quiet), p99(attacked))


def test_trickling_and_idle_connections_are_closed_after_the_configured_timeout(impatient_site: Site) -> None:
    with tricklers(impatient_site.port, 4) as sockets, \
            socket.create_connection(("127.0.0.1", impatient_site.port), timeout=5) as idle:
        sockets = [*sockets, idle]
        deadline = time.monotonic() + 12  # timeouts of 3 s, checked every second
        open_ = list(sockets)
        while open_ and time.monotonic() < deadline:
            for sock in list(open_):
                sock.settimeout(0.1)
                try:
                    data = sock.recv(4096)
                except TimeoutError:
                    continue
                except OSError:
                    open_.remove(sock)
                    continue
                if not data or data.startswith(b"HTTP/1.1 408"):
                    open_.remove(sock)
        assert not open_, f"{len(open_)} of {len(sockets)} connections still open after 12 s"
    # and the bridge still answers
    assert callback_latencies(impatient_site, 1)


def test_four_concurrent_25_mib_status_bodies_stay_within_the_memory_bound(site: Site) -> None:
    callback_latencies(site, 5)
    pid = site.proc.pid  # type: ignore[attr-defined]
    baseline, _ = rss_kib(pid)
    peak = [baseline]
    sampling = threading.Event()

    def sample() -> None:
        while not sampling.wait(0.02):
            peak[0] = max(peak[0], rss_kib(pid)[0])

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    begin = int(time.time()) - 60
    pids = [site.next_pid() for _ in range(4)]
    answers: dict[int, int] = {}

    def send(shell_pid: int) -> None:
        # A valid start callback padded with JSON whitespace: 2.x accepts it, the bridge must not parse it.
        body = (f'{{"ids":["{site.cron}"],"status":"0","pid":"{shell_pid}","log_path":"big_{shell_pid}.log",'
                f'"last_execution_time":{begin}' + " " * (25 * MIB) + "}").encode()
        with httpx.Client(base_url=site.url, timeout=120) as client:
            answers[shell_pid] = client.put("/open/crons/status?t=1", content=body, headers=site.headers()).status_code

    senders = [threading.Thread(target=send, args=(p,)) for p in pids]
    for thread in senders:
        thread.start()
    for thread in senders:
        thread.join(180)
    still_answering = callback_latencies(site, 2)
    sampling.set()
    sampler.join(5)

    growth_mib = (peak[0] - baseline) / 1024
    assert answers == {p: 200 for p in pids}  # 2.x's answer, relayed
    assert still_answering
    assert growth_mib < 96, f"RSS grew by {growth_mib:.0f} MiB"
    metrics = httpx.get(f"{site.url}/metrics", timeout=5).text
    assert 'ql_bridge_callback_body_oversize_total{path="/open/crons/status"} 4.0' in metrics
    engine = site.store_engine()
    try:
        with engine.connect() as conn:
            keys = [f"%:{p}:%" for p in pids]
            recorded = conn.execute(select(func.count()).select_from(runs_table).where(
                runs_table.c.idempotency_key.like(keys[0]) | runs_table.c.idempotency_key.like(keys[1])
                | runs_table.c.idempotency_key.like(keys[2]) | runs_table.c.idempotency_key.like(keys[3]))).scalar()
    finally:
        engine.dispose()
    assert recorded == 0  # over the cap: forwarded, never parsed or recorded


@pytest.mark.parametrize("request_bytes, status", [
    (b"PUT /open/crons/status HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n", 400),
    (b"PUT /open/crons/status HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nsecret\r\n0\r\n\r\n",
     400),
    (b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * (80 * 1024) + b"\r\n\r\n", 431),
    # llhttp refuses Content-Length beside Transfer-Encoding, in the bridge as in 2.x's Node.
    (b"PUT /open/crons/status HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n"
     b"0\r\n\r\n", 400),
    (b"PUT /open/crons/status HTTP/1.1\r\nHost: x\r\nContent-Length: 6\r\nTransfer-Encoding: chunked\r\n\r\n"
     b"6\r\nsecret\r\n0\r\n\r\n", 400),
], ids=["bad-content-length", "bad-chunk", "headers-over-64-kib", "cl-and-te-empty", "cl-and-te-body"])
def test_the_servers_own_refusals_come_in_2xs_json_shape(impatient_site: Site, request_bytes: bytes,
                                                         status: int) -> None:
    reply = raw_request(impatient_site.port, request_bytes)

    head, _, body = reply.partition(b"\r\n\r\n")
    assert head.startswith(f"HTTP/1.1 {status} ".encode()), head[:80]  # as Node answers
    assert f"content-type: {JSON_2X}".encode() in head.lower()
    document = json.loads(body)
    assert document["code"] == status and isinstance(document["message"], str)
    assert b"secret" not in body and b"abc" not in body  # nothing the client sent is echoed
    # refused by the bridge, never forwarded (the readiness probe's /api/health is all 2.x saw)
    assert {r.path for r in impatient_site.double.requests()} <= {"/api/health"}


def test_headers_up_to_nodes_16_kib_reach_2x(impatient_site: Site) -> None:
    long_query = "q=" + "x" * 6000
    reply = httpx.get(f"{impatient_site.url}/api/anything?{long_query}",
                      headers={"X-Long": "y" * 9000}, timeout=10)

    assert reply.status_code == 200  # the double's echo: 2.x answered, the bridge refused nothing
    assert reply.json()["method"] == "GET"


def test_nothing_the_client_sent_reaches_a_log_line(impatient_site: Site) -> None:
    secrets = [f"s3cr3t-{i}-{os.urandom(4).hex()}" for i in range(5)]
    raw_request(impatient_site.port, f"GET /open/auth/token?client_secret={secrets[0]}\x01 HTTP/1.1\r\n"
                                     f"Host: x\r\n\r\n".encode("latin-1"))
    raw_request(impatient_site.port, f"GET /open/auth/token?client_secret={secrets[1]} HTTP/1.1\r\n"
                                     f"Host: x\r\nX-Token: {secrets[2]}\x01\r\n\r\n".encode("latin-1"))
    raw_request(impatient_site.port, f"PUT /open/crons/status?k={secrets[3]} HTTP/1.1\r\nHost: x\r\n"
                                     f"Transfer-Encoding: chunked\r\n\r\n{secrets[4]}\r\n".encode("latin-1"))
    httpx.get(f"{impatient_site.url}/open/auth/token?client_id=a&client_secret={secrets[0]}", timeout=10)

    logs = impatient_site.log()
    assert not [s for s in secrets if s in logs], logs[-2000:]


class SlowLink:
    """A loopback TCP relay that holds each answer from upstream for `delay_s` (a 2.x that takes its time)."""

    def __init__(self, upstream_port: int, delay_s: float) -> None:
        self.delay_s = delay_s
        self._upstream = upstream_port
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self._upstream))
            threading.Thread(target=self._pipe, args=(client, upstream, False), daemon=True).start()
            threading.Thread(target=self._pipe, args=(upstream, client, True), daemon=True).start()

    def _pipe(self, source: socket.socket, sink: socket.socket, delayed: bool) -> None:
        try:
            while data := source.recv(65536):
                time.sleep(self.delay_s if delayed else 0)
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (source, sink):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        self._listener.close()


@pytest.fixture
def slow_site(tmp_path: Path, store: tuple[str, str | None]) -> Iterator[Site]:
    """A bridge whose 2.x answers each request 2 s late."""
    from bridge.cli.demo import bridge_process, free_port, serve_env
    from legacy_adapters.testing.datadir import create_legacy_data_dir
    from legacy_adapters.testing.double import Legacy2xDouble

    data = create_legacy_data_dir(tmp_path / "ql")
    cron = data.add_cron("hostile", "task hostile.sh", "0 * * * *")
    url, schema = store
    port = free_port()
    with Legacy2xDouble(data).start() as double:
        link = SlowLink(int(double.url.rsplit(":", 1)[1]), 0.0)
        env = serve_env(port, f"http://127.0.0.1:{link.port}", data.root, url, BRIDGE_DATA_DIR=str(tmp_path),
                        BRIDGE_SHADOW_BUDGET_MS="2000", **({"BRIDGE_DATABASE_SCHEMA": schema} if schema else {}))
        try:
            with bridge_process(env, f"http://127.0.0.1:{port}") as proc:
                link.delay_s = 2.0  # once the bridge is up: its start waits for 2.x's health
                yield Site(f"http://127.0.0.1:{port}", port, data, double, proc, url, schema, cron)
        finally:
            link.close()


def test_a_stopping_bridge_finishes_in_flight_callbacks_and_their_shadow_writes(slow_site: Site) -> None:
    begin = int(time.time()) - 60
    pid = slow_site.next_pid()
    replies: list[httpx.Response | Exception] = []

    def call() -> None:
        try:
            with httpx.Client(base_url=slow_site.url, timeout=30) as client:
                replies.append(slow_site.callback(client, 0, pid, begin))
        except httpx.HTTPError as exc:
            replies.append(exc)

    caller = threading.Thread(target=call)
    caller.start()
    time.sleep(0.7)  # the callback is now waiting for 2.x
    proc = slow_site.proc
    proc.send_signal(signal.SIGTERM)  # type: ignore[attr-defined]
    caller.join(30)
    exit_code = proc.wait(30)  # type: ignore[attr-defined]

    [reply] = replies
    assert isinstance(reply, httpx.Response) and reply.status_code == 200, reply
    assert exit_code == 0
    engine = slow_site.store_engine()
    try:
        with engine.connect() as conn:
            status = conn.execute(select(runs_table.c.status).where(
                runs_table.c.idempotency_key.like(f"%:{pid}:%"))).scalar()
    finally:
        engine.dispose()
    assert status == "running"  # the shadow write finished before the store was closed
    assert "RuntimeError" not in slow_site.log()


def test_a_killed_bridge_leaves_no_process_holding_the_port(impatient_site: Site) -> None:
    proc = impatient_site.proc
    with tricklers(impatient_site.port, 20):  # busy serving threads notice their parent's death late, if ever
        time.sleep(1)
        os.kill(proc.pid, signal.SIGKILL)  # type: ignore[attr-defined]
        proc.wait(10)  # type: ignore[attr-defined]

        deadline = time.monotonic() + 2
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", impatient_site.port), timeout=0.2).close()
            except OSError:
                return  # nothing listens any more: a supervisor can start a new bridge on the port
            time.sleep(0.05)
    pytest.fail("something still accepts connections on the bridge's port after its process was killed")
