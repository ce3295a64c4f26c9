"""The status callbacks' forward to 2.x over plain TCP (legacy_adapters.http_forward.SocketForward).

2.x here is a scripted TCP peer: it records the bytes each request arrives as and answers with the bytes a test
gives it, so the wire on both sides is what is asserted (what an httpx client would send; what Node may answer).
"""

from __future__ import annotations

import gzip
import os
import resource
import socket
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import httpx
import pytest

from legacy_adapters.http_forward import SocketForward

OK = b'HTTP/1.1 200 OK\r\nContent-Type: application/json; charset=utf-8\r\nContent-Length: 12\r\n\r\n{"code":200}'
HEADERS = [(b"user-agent", b"curl/8.5.0"), (b"authorization", b"Bearer t0k"), (b"content-type", b"application/json")]


@dataclass
class ScriptedPeer:
    """A TCP peer answering each request with ``answer(n)`` (n counts requests; an empty answer closes the
    connection without one), closing after it if asked."""

    answer: Callable[[int], bytes] = lambda _n: OK
    close_after: bool = False
    requests: list[bytes] = field(default_factory=list)
    connections: int = 0
    sock: socket.socket = field(default_factory=lambda: socket.create_server(("127.0.0.1", 0)))

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}"

    def serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._connection, args=(conn,), daemon=True).start()

    def _connection(self, conn: socket.socket) -> None:
        with conn:
            buffered = b""
            while True:
                while b"\r\n\r\n" not in buffered:
                    chunk = conn.recv(65536)
                    if not chunk:
                        return
                    buffered += chunk
                head, _, rest = buffered.partition(b"\r\n\r\n")
                length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
                while len(rest) < length:
                    rest += conn.recv(65536)
                self.requests.append(head + b"\r\n\r\n" + rest[:length])
                buffered = rest[length:]
                reply = self.answer(len(self.requests))
                if not reply:
                    return  # closed without a byte of answer
                conn.sendall(reply)
                if self.close_after:
                    return


@pytest.fixture
def peer() -> Iterator[ScriptedPeer]:
    scripted = ScriptedPeer()
    threading.Thread(target=scripted.serve, daemon=True).start()
    yield scripted
    scripted.sock.close()


def forward(url: str, timeout_s: float = 5.0) -> SocketForward:
    return SocketForward(url, timeout_s=timeout_s)


def test_the_request_goes_up_as_an_httpx_client_writes_it(peer: ScriptedPeer) -> None:
    body = b'{"id":1,"status":0}'
    answer = forward(peer.url + "/ql")("PUT", b"/open/crons/status?t=1", HEADERS, body)

    assert answer.status == 200 and answer.content == b'{"code":200}'
    assert answer.header(b"content-type") == b"application/json; charset=utf-8"
    host = peer.url.removeprefix("http://").encode()
    assert peer.requests == [
        b"PUT /ql/open/crons/status?t=1 HTTP/1.1\r\nHost: " + host + b"\r\nuser-agent: curl/8.5.0\r\n"
        b"authorization: Bearer t0k\r\ncontent-type: application/json\r\nContent-Length: 19\r\n\r\n" + body]


def test_one_connection_carries_callback_after_callback(peer: ScriptedPeer) -> None:
    bridge = forward(peer.url)
    for _ in range(5):
        assert bridge("PUT", b"/open/crons/status", HEADERS, b"{}").status == 200
    assert peer.connections == 1 and len(peer.requests) == 5


def test_a_connection_2x_closed_while_idle_is_not_used_again(peer: ScriptedPeer) -> None:
    peer.close_after = True  # as Node does after its keep-alive timeout, or with Connection: close
    bridge = forward(peer.url)
    for _ in range(3):
        assert bridge("PUT", b"/open/crons/status", HEADERS, b"{}").status == 200
    assert peer.connections == 3


def test_a_kept_connection_closed_unanswered_sends_the_request_again_once_on_a_new_one(peer: ScriptedPeer) -> None:
    # The second request meets a kept connection that 2.x ends without a byte of answer, as Node does when its
    # keep-alive timeout fires as the request goes out; a new connection carries it.
    peer.answer = lambda n: b"" if n == 2 else OK
    bridge = forward(peer.url)
    assert bridge("PUT", b"/open/crons/status", HEADERS, b"{}").status == 200
    assert bridge("PUT", b"/open/crons/status", HEADERS, b"{}").status == 200
    assert peer.connections == 2 and len(peer.requests) == 3


def test_a_new_connection_closed_unanswered_is_not_sent_again(peer: ScriptedPeer) -> None:
    peer.answer = lambda _n: b""
    peer.close_after = True
    with pytest.raises(httpx.RemoteProtocolError):
        forward(peer.url)("PUT", b"/open/crons/status", HEADERS, b"{}")
    assert len(peer.requests) == 1


def test_connection_close_from_2x_ends_the_connection(peer: ScriptedPeer) -> None:
    peer.answer = lambda _n: OK.replace(b"Content-Length: 12", b"Connection: close\r\nContent-Length: 12")
    bridge = forward(peer.url)
    bridge("PUT", b"/open/crons/status", HEADERS, b"{}")
    bridge("PUT", b"/open/crons/status", HEADERS, b"{}")
    assert peer.connections == 2


def test_a_chunked_answer_is_joined_and_a_gzip_body_stays_as_sent(peer: ScriptedPeer) -> None:
    packed = gzip.compress(b'{"code":200,"data":"' + b"x" * 2000 + b'"}')
    peer.answer = lambda _n: (b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n\r\n"
                              + f"{len(packed) - 10:x}\r\n".encode() + packed[:-10] + b"\r\n"
                              + b"a\r\n" + packed[-10:] + b"\r\n0\r\n\r\n")
    answer = forward(peer.url)("PUT", b"/open/crons/stop", HEADERS, b"[1]")
    assert answer.content == packed
    assert answer.header(b"transfer-encoding") == b"chunked"  # the route drops it as hop-by-hop


def test_an_answer_framed_by_the_close_is_whole(peer: ScriptedPeer) -> None:
    peer.close_after = True
    peer.answer = lambda _n: b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nuntil the end"
    assert forward(peer.url)("PUT", b"/open/crons/status", HEADERS, b"{}").content == b"until the end"


@pytest.mark.parametrize(("answer", "error"), [
    (b"HTTP/1.1 200 OK\r\nContent-Length: 50\r\n\r\n{\"code\"", httpx.RemoteProtocolError),  # cut short
    (b"", httpx.RemoteProtocolError),  # closed without an answer
    (b"SSH-2.0-OpenSSH\r\n\r\n", httpx.RemoteProtocolError),  # not HTTP
])
def test_no_whole_answer_is_a_transport_error(peer: ScriptedPeer, answer: bytes, error: type[Exception]) -> None:
    peer.close_after = True
    peer.answer = lambda _n: answer
    with pytest.raises(error):
        forward(peer.url)("PUT", b"/open/crons/status", HEADERS, b"{}")


def test_2x_silent_past_the_timeout_is_a_read_timeout(peer: ScriptedPeer) -> None:
    gate = threading.Event()
    peer.answer = lambda _n: (gate.wait(5), OK)[1]
    try:
        with pytest.raises(httpx.ReadTimeout):
            forward(peer.url, timeout_s=0.2)("PUT", b"/open/crons/status", HEADERS, b"{}")
    finally:
        gate.set()


def test_2x_not_listening_is_a_connect_error() -> None:
    with socket.create_server(("127.0.0.1", 0)) as unused:
        url = f"http://127.0.0.1:{unused.getsockname()[1]}"
    with pytest.raises(httpx.ConnectError):
        forward(url)("PUT", b"/open/crons/status", HEADERS, b"{}")


def test_only_plain_http_is_spoken() -> None:
    with pytest.raises(ValueError, match="http://"):
        SocketForward("https://ql.example:5700", timeout_s=1)


def test_kept_connections_are_checked_at_any_descriptor_number(peer: ScriptedPeer) -> None:
    # A bridge holding hundreds of panel streams has sockets numbered past 1024, where select() gives up.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1200:
        pytest.skip(f"this process may open only {hard} files")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 1200), hard))
    filler = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]
    try:
        bridge = forward(peer.url)
        assert bridge("PUT", b"/open/crons/status", HEADERS, b"{}").status == 200  # its socket is past 1024
        assert bridge("PUT", b"/open/crons/status", HEADERS, b"{}").status == 200  # the kept one, checked
        assert peer.connections == 1
    finally:
        for fd in filler:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
