"""The bridge's HTTP/1.1 connections under uvicorn (httptools): head limit, deadlines, 2.x-shaped refusals.

uvicorn parses with llhttp (through httptools), the parser 2.x's Node runs on, so a request is framed, or
refused, as 2.x would frame or refuse it; each request goes to the ASGI app on the event loop, and a slow or
huge client costs a socket and at most uvicorn's 64 KiB read-ahead, never a thread. This protocol adds what
uvicorn leaves out:

- a bound on the request head while it arrives (llhttp counts nothing; Node counts 16 KiB itself): 431;
- a deadline for a request still arriving (its headers, then the whole request), after which the connection
  gets a 408 and is closed: a client that trickles a byte a second cannot keep a socket forever; a new
  connection that sends nothing is closed after the idle timeout, as a kept-alive one is;
- the server's own refusals (bad framing, a head over the limit, a request that timed out) in 2.x's JSON
  error shape, ``{"code":<status>,"message":"<reason>"}``, never echoing what the client sent.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

JSON_2X = "application/json; charset=utf-8"  # what Express's res.json sets
# Node's http server refuses more than 16 KiB of request line and headers with 431; the bridge allows four
# times as much, so it never refuses what 2.x would answer, and bounds what one connection may pin.
HEADER_LIMIT_BYTES = 64 * 1024
REASONS = {400: "Bad Request", 408: "Request Timeout", 431: "Request Header Fields Too Large"}


@dataclass(frozen=True)
class RequestDeadlines:
    """How long a request may take to arrive, in seconds (Node's own defaults are 60 and 300)."""

    headers_s: float
    request_s: float


def refusal_body(status: int, reason: str) -> bytes:
    """2.x's error shape with a fixed reason phrase: nothing from the request goes back."""
    return json.dumps({"code": status, "message": reason}, separators=(",", ":")).encode("ascii")


def refusal(status: int) -> bytes:
    """A whole HTTP/1.1 answer (as Node answers, even when the request line could not be read) that closes."""
    reason = REASONS.get(status, "Bad Request")
    body = refusal_body(status, reason)
    return (f"HTTP/1.1 {status} {reason}\r\nContent-Type: {JSON_2X}\r\nContent-Length: {len(body)}\r\n"
            f"Connection: close\r\n\r\n").encode("ascii") + body


def _head_size(target: bytes, headers: list[tuple[bytes, bytes]]) -> int:
    """The head's size as sent: the request line (its method, spaces and version within 20 bytes), then each
    header with its colon, space and line end."""
    return len(target) + 20 + sum(len(k) + len(v) + 4 for k, v in headers)


class CorkedTransport:
    """The connection's transport, with the writes of one event-loop turn sent together: an answer's head and
    its body leave in one segment instead of one syscall each."""

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self.raw = transport
        self._loop = loop
        self._pending: list[bytes] = []

    def write(self, data: bytes) -> None:
        if not self._pending:
            self._loop.call_soon(self.flush)
        self._pending.append(data)

    def flush(self) -> None:
        if self._pending:
            data, self._pending = b"".join(self._pending), []
            if not self.raw.is_closing():
                self.raw.write(data)

    def close(self) -> None:
        self.flush()
        self.raw.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.raw, name)


class BridgeHttpProtocol(HttpToolsProtocol):
    """One client connection: uvicorn's httptools protocol with the bridge's head limit, deadlines and refusals."""

    deadlines = RequestDeadlines(60, 300)  # replaced per server by ``protocol_with``

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.refused_with = 400  # the status of the next refusal: llhttp's errors are 400s, as Node answers them
        self.reading_head = True  # between a request's first byte and the end of its headers
        self.head_bytes = 0  # what of the request head has arrived (an upper bound: counted per read)
        self.request_began: float | None = None
        self.deadline_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(CorkedTransport(transport, self.loop))  # type: ignore[arg-type]
        # A connection that never sends a byte is idle, like a kept-alive one between requests.
        self.timeout_keep_alive_task = self.loop.call_later(self.timeout_keep_alive, self.timeout_keep_alive_handler)

    def data_received(self, data: bytes) -> None:
        if self.request_began is None and data:
            self.request_began = time.monotonic()
            self._arm(self.deadlines.headers_s)
        super().data_received(data)
        if self.reading_head and data and not self.transport.is_closing():
            # llhttp keeps an unfinished head's pieces without a bound (Node counts them itself, as here).
            self.head_bytes += len(data)
            if self.head_bytes > HEADER_LIMIT_BYTES:
                self.refused_with = 431
                self.send_400_response("request head over the limit")

    def on_message_begin(self) -> None:
        self.reading_head = True
        self.head_bytes = 0
        super().on_message_begin()

    def on_headers_complete(self) -> None:
        self.reading_head = False
        if _head_size(self.url, self.headers) > HEADER_LIMIT_BYTES:  # a head that came in a single read
            self.refused_with = 431
            raise ValueError("request head over the limit")  # llhttp stops; data_received refuses
        if self.parser.get_http_version() == "1.1" and not any(name == b"host" for name, _ in self.headers):
            # Node's http server refuses an HTTP/1.1 request without Host itself (requireHostHeader).
            raise ValueError("no Host header")
        super().on_headers_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def on_response_complete(self) -> None:
        # The answer is out: whatever comes next on this connection is a new request with a clock of its own.
        self._disarm()
        self.request_began = None
        super().on_response_complete()

    def handle_websocket_upgrade(self) -> None:
        self._disarm()  # the WebSocket has its own life from here; no request deadline applies to it
        corked = self.transport
        assert isinstance(corked, CorkedTransport)
        corked.flush()
        self.transport = corked.raw  # wsproto writes its frames itself
        super().handle_websocket_upgrade()

    def send_400_response(self, msg: str) -> None:
        """The request could not be read: answer in 2.x's shape (400, or 431 for a head over the limit)."""
        self._disarm()
        cycle = self.cycle
        answering = cycle is not None and cycle.response_started and not cycle.response_complete
        if cycle is not None and not cycle.response_complete:
            cycle.disconnected = True  # the app's further sends go nowhere
        if not answering and not self.transport.is_closing():
            self.transport.write(refusal(self.refused_with))
        self.transport.close()

    # -- request deadlines ------------------------------------------------------------------------

    def _arm(self, after_s: float) -> None:
        self._disarm()
        self.deadline_timer = self.loop.call_later(max(0.0, after_s), self._check_deadline)

    def _disarm(self) -> None:
        if self.deadline_timer is not None:
            self.deadline_timer.cancel()
            self.deadline_timer = None

    def _check_deadline(self) -> None:
        self.deadline_timer = None
        if self.request_began is None or self.transport.is_closing():
            return
        age = time.monotonic() - self.request_began
        headers_done = not self.reading_head
        if headers_done and self.cycle is not None and not self.cycle.more_body:
            return  # the whole request is in: what is left is the answer, which has no deadline here
        limit = self.deadlines.request_s if headers_done else self.deadlines.headers_s
        if age < limit:
            self._arm(limit - age)
            return
        self.refuse_as_timed_out()

    def refuse_as_timed_out(self) -> None:
        """Answer 408 in 2.x's shape (unless an answer has begun) and close."""
        cycle = self.cycle
        answering = cycle is not None and cycle.response_started and not cycle.response_complete
        if cycle is not None and not cycle.response_complete:
            cycle.disconnected = True
            cycle.message_event.set()  # an app waiting for more body sees the disconnect
        if not answering:
            self.transport.write(refusal(408))
        self.transport.close()


def protocol_with(deadlines: RequestDeadlines) -> type[BridgeHttpProtocol]:
    """The protocol class uvicorn instantiates per connection, carrying this server's deadlines."""
    return type("BridgeHttpProtocol", (BridgeHttpProtocol,), {"deadlines": deadlines})
