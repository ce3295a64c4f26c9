"""The status callbacks' forward to 2.x: one request written in one piece, 2.x's answer read whole.

A status callback is a small request with a small answer, sent while a task shell waits: it needs none of a
general client's machinery (URL objects, header normalisation, streaming, redirects). ``SocketForward`` keeps
a few connections to 2.x alive, writes the request with one ``sendall`` and parses 2.x's answer with llhttp
(httptools), the parser 2.x itself runs on. Its errors are httpx's transport errors, as the web layer's other
forward (through an httpx client, ``bridge.web.callback_route.HttpxForward``) raises them.
"""

from __future__ import annotations

import select
import socket
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Protocol
from urllib.parse import urlsplit

import httptools
import httpx

READ_CHUNK_BYTES = 64 * 1024
KEPT_CONNECTIONS = 16  # idle connections kept to 2.x (the callback pool has 16 threads)


@dataclass(frozen=True)
class ForwardedAnswer:
    """2.x's answer: status, end-to-end and hop-by-hop headers as sent, and the body as it came off the wire
    (chunked framing removed, a content coding kept)."""

    status: int
    headers: list[tuple[bytes, bytes]]
    content: bytes

    def header(self, name: bytes) -> bytes | None:
        return next((v for k, v in self.headers if k.lower() == name), None)


class CallbackForward(Protocol):
    def __call__(self, method: str, target: bytes, headers: Iterable[tuple[bytes, bytes]],
                 body: bytes) -> ForwardedAnswer:
        """Send one request to 2.x and return its answer; raise an httpx.TransportError if there is none.

        ``target`` is the path and query as the client sent them, and ``headers`` the ones that go up, Host
        and Content-Length excluded (the forward sets them)."""
        ...

    def close(self) -> None: ...


class SocketForward:
    """The forward over plain TCP to an ``http://`` 2.x, on connections kept alive between callbacks."""

    def __init__(self, legacy_url: str, *, timeout_s: float, connect_timeout_s: float = 5.0,
                 keep: int = KEPT_CONNECTIONS) -> None:
        parts = urlsplit(legacy_url)
        if parts.scheme != "http" or not parts.hostname:
            raise ValueError("SocketForward speaks plain http:// only")
        self._address = (parts.hostname, parts.port or 80)
        # The Host an httpx client would send: the URL's host[:port] (userinfo is never sent).
        self._host = parts.netloc.rpartition("@")[2].encode("ascii")
        self._prefix = parts.path.rstrip("/").encode("ascii")  # a QlBaseUrl-style mount
        self._timeout_s = timeout_s
        self._connect_timeout_s = connect_timeout_s
        self._keep = keep
        self._idle: list[socket.socket] = []
        self._lock = threading.Lock()
        self._closed = False

    def __call__(self, method: str, target: bytes, headers: Iterable[tuple[bytes, bytes]],
                 body: bytes) -> ForwardedAnswer:
        request = self._request_bytes(method, target, headers, body)
        kept = self._kept()
        if kept is not None:
            try:
                return self._on(kept, request)
            except _ClosedUnanswered:
                # 2.x closed the kept connection as the request went out (Node ends idle ones after 5 s):
                # it never read it, so it goes again once, on a new connection.
                pass
        return self._on(self._connect(), request)

    def _on(self, sock: socket.socket, request: bytes) -> ForwardedAnswer:
        try:
            answer, reusable = self._exchange(sock, request)
        except BaseException:
            sock.close()
            raise
        if reusable:
            self._put_back(sock)
        else:
            sock.close()
        return answer

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for sock in idle:
            sock.close()

    def _request_bytes(self, method: str, target: bytes, headers: Iterable[tuple[bytes, bytes]],
                       body: bytes) -> bytes:
        # Host first, the headers in their order, Content-Length last: what an httpx client sends.
        lines = [method.encode("ascii"), b" ", self._prefix, target, b" HTTP/1.1\r\nHost: ", self._host, b"\r\n"]
        for name, value in headers:
            lines += (name, b": ", value, b"\r\n")
        lines += (b"Content-Length: ", str(len(body)).encode("ascii"), b"\r\n\r\n", body)
        return b"".join(lines)

    def _kept(self) -> socket.socket | None:
        """A kept connection that 2.x has not closed meanwhile (Node closes idle ones after 5 s)."""
        while True:
            with self._lock:
                if not self._idle:
                    return None
                sock = self._idle.pop()
            if not _readable_now(sock):
                return sock
            sock.close()  # readable while idle: 2.x closed it (EOF) or sent what nobody asked for

    def _put_back(self, sock: socket.socket) -> None:
        with self._lock:
            if not self._closed and len(self._idle) < self._keep:
                self._idle.append(sock)
                return
        sock.close()

    def _connect(self) -> socket.socket:
        try:
            sock = socket.create_connection(self._address, timeout=self._connect_timeout_s)
        except TimeoutError as exc:
            raise httpx.ConnectTimeout("connecting to 2.x timed out") from exc
        except OSError as exc:
            raise httpx.ConnectError(f"cannot connect to 2.x ({type(exc).__name__})") from exc
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.settimeout(self._timeout_s)
        return sock

    def _exchange(self, sock: socket.socket, request: bytes) -> tuple[ForwardedAnswer, bool]:
        try:
            sock.sendall(request)
        except TimeoutError as exc:
            raise httpx.WriteTimeout("writing to 2.x timed out") from exc
        except (BrokenPipeError, ConnectionResetError) as exc:
            raise _ClosedUnanswered("2.x closed the connection before the request was written") from exc
        except OSError as exc:
            raise httpx.WriteError(f"writing to 2.x failed ({type(exc).__name__})") from exc
        reading = _AnswerReader()
        parser = reading.parser = httptools.HttpResponseParser(reading)
        deadline = time.monotonic() + self._timeout_s
        while not reading.complete:
            try:
                chunk = sock.recv(READ_CHUNK_BYTES)
            except TimeoutError as exc:
                raise httpx.ReadTimeout("2.x did not answer in time") from exc
            except ConnectionResetError as exc:
                if not reading.begun:
                    raise _ClosedUnanswered("2.x reset the connection without answering") from exc
                raise httpx.ReadError("2.x reset the connection while answering") from exc
            except OSError as exc:
                raise httpx.ReadError(f"reading from 2.x failed ({type(exc).__name__})") from exc
            if not chunk:
                if not reading.begun:
                    raise _ClosedUnanswered("2.x closed the connection without answering")
                return reading.at_end_of_stream(parser), False
            reading.begun = True
            try:
                parser.feed_data(chunk)
            except httptools.HttpParserUpgrade as exc:  # a 101 to a callback: not an answer the shell can use
                raise httpx.RemoteProtocolError("2.x switched protocols on a callback") from exc
            except httptools.HttpParserError as exc:
                raise httpx.RemoteProtocolError(f"2.x's answer is not valid HTTP ({type(exc).__name__})") from exc
            if time.monotonic() > deadline:
                raise httpx.ReadTimeout("2.x's answer did not end in time")
        return reading.answer(parser), reading.keep_alive


def _readable_now(sock: socket.socket) -> bool:
    """Whether the socket has something to read, or its end, right now (poll: any descriptor number, where
    select() fails past 1024, which a bridge holding hundreds of panel streams reaches)."""
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    return bool(poller.poll(0))


class _ClosedUnanswered(httpx.RemoteProtocolError):
    """2.x closed or reset the connection before a byte of its answer: on a kept connection, the sign that
    Node closed it while idle, so the request was never read."""


@dataclass
class _AnswerReader:
    """httptools' callbacks for one answer."""

    headers: list[tuple[bytes, bytes]] = field(default_factory=list)
    body: list[bytes] = field(default_factory=list)
    begun: bool = False  # a byte of the answer has arrived
    head_done: bool = False
    complete: bool = False
    keep_alive: bool = False
    parser: httptools.HttpResponseParser | None = None

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name, value))

    def on_headers_complete(self) -> None:
        self.head_done = True

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        self.complete = True
        # Asked now: llhttp forgets the answer's Connection semantics once the message is over.
        self.keep_alive = self.parser is not None and self.parser.should_keep_alive()

    def answer(self, parser: httptools.HttpResponseParser) -> ForwardedAnswer:
        return ForwardedAnswer(parser.get_status_code(), self.headers, b"".join(self.body))

    def at_end_of_stream(self, parser: httptools.HttpResponseParser) -> ForwardedAnswer:
        """2.x closed the connection before the answer's end: an answer framed by the close is whole then."""
        framed = any(k.lower() in (b"content-length", b"transfer-encoding") for k, _ in self.headers)
        if self.head_done and not framed:
            return self.answer(parser)
        raise httpx.RemoteProtocolError("2.x closed the connection before its answer ended")

