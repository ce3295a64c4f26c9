"""The bridge's HTTP connections under waitress: whole requests before a thread, deadlines, 2.x-shaped refusals.

waitress reads every request on its event loop and hands it to a worker thread only once it is complete,
spooling a body over 512 KiB to a temporary file: a slow or huge client costs a socket and disk, never a
thread or memory. This module adds what waitress leaves out:

- deadlines for a request still arriving (headers, then the whole request), after which the connection
  gets a 408 and is closed: a client that trickles a byte a second cannot keep a socket forever;
- the server's own refusals (bad framing, headers or body over the limits, a request that timed out) in
  2.x's JSON error shape, `{"code":<status>,"message":"<reason>"}`, never echoing what the client sent.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from waitress.channel import HTTPChannel
from waitress.server import TcpWSGIServer
from waitress.task import ErrorTask

JSON_2X = "application/json; charset=utf-8"  # what Express's res.json sets
# Node's http server refuses more than 16 KiB of request line and headers with 431; the bridge allows four
# times as much, so it never refuses what 2.x would answer, and bounds what one connection may pin.
HEADER_LIMIT_BYTES = 64 * 1024


@dataclass(frozen=True)
class RequestDeadlines:
    """How long a request may take to arrive, in seconds (Node's own defaults are 60 and 300)."""

    headers_s: float
    request_s: float


def refusal_body(status: int, reason: str) -> bytes:
    """2.x's error shape with a fixed reason phrase: nothing from the request goes back."""
    return json.dumps({"code": status, "message": reason}, separators=(",", ":")).encode("ascii")


class JsonErrorTask(ErrorTask):  # type: ignore[misc]
    """waitress's refusal (400, 413, 431, 500), in 2.x's JSON shape instead of a text page."""

    def execute(self) -> None:
        error = self.request.error
        body = refusal_body(error.code, error.reason)
        self.version = "1.1"  # as Node answers, even when the request line could not be read
        self.status = f"{error.code} {error.reason}"
        self.response_headers.extend([("Content-Type", JSON_2X), ("Connection", "close")])
        self.set_close_on_finish()
        self.content_length = len(body)
        self.write(body)


class BridgeChannel(HTTPChannel):  # type: ignore[misc]
    """One client connection; remembers when the request it is still reading began."""

    error_task_class = JsonErrorTask
    request_began: float | None = None

    def received(self, data: bytes) -> bool:
        if self.request_began is None and data:
            self.request_began = time.monotonic()
        handled: bool = super().received(data)
        if self.request is None:  # nothing half-read is left: the next request starts its own clock
            self.request_began = None
        return handled

    def overdue(self, now: float, deadlines: RequestDeadlines) -> bool:
        """A request has been arriving for too long (its headers, or the whole of it)."""
        if self.request_began is None or self.request is None or self.requests or self.will_close:
            return False
        age = now - self.request_began
        limit = deadlines.request_s if self.request.headers_finished else deadlines.headers_s
        return age > limit

    def refuse_as_timed_out(self) -> None:
        """Answer 408 in 2.x's shape and close once it is sent (called on the event loop)."""
        body = refusal_body(408, "Request Timeout")
        head = (f"HTTP/1.1 408 Request Timeout\r\nContent-Type: {JSON_2X}\r\nContent-Length: {len(body)}\r\n"
                f"Connection: close\r\n\r\n").encode("ascii")
        with self.outbuf_lock:
            self.outbufs[-1].append(head + body)
            self.total_outbufs_len += len(head) + len(body)
        self.request = None
        self.request_began = None
        self.close_when_flushed = True


class BridgeHttpServer(TcpWSGIServer):  # type: ignore[misc]
    """waitress's TCP server with the bridge's channel and a request deadline check in its maintenance."""

    channel_class = BridgeChannel

    def __init__(self, application: Any, deadlines: RequestDeadlines, **adjustments: Any) -> None:
        self.deadlines = deadlines
        super().__init__(application, **adjustments)

    def maintenance(self, now: float) -> None:
        super().maintenance(now)  # idle keep-alive connections (channel_timeout)
        clock = time.monotonic()
        for channel in list(self.active_channels.values()):
            if isinstance(channel, BridgeChannel) and channel.overdue(clock, self.deadlines):
                channel.refuse_as_timed_out()

    def busy_channels(self) -> int:
        """Connections with a request being served or an answer still being sent."""
        return sum(1 for c in list(self.active_channels.values()) if c.requests or c.total_outbufs_len)
