"""The SockJS channel of 2.x, as a TEST DOUBLE: what back/loaders/sock.ts serves through sockjs-node 0.3.24.

2.x mounts sockjs-node at ``/api/ws`` (``sockJs.createServer({prefix: `${baseUrl}/api/ws`})``) and, on each
new connection, reads the token from the session's first URL (``conn.url.replace(`${pathname}?token=`, '')``),
checks it with ``isValidToken(authInfo, token, platform)``, then echoes every message (``conn.write(message)``);
a bad token gets ``conn.close('404')``. This double serves the transports the panel's sockjs-client uses, with
sockjs-node's framing: ``o`` (open), ``h`` (heartbeat, every 25 s), ``a[...]`` (messages), ``c[code,reason]``
(close):

- ``GET /api/ws/info``: ``{"websocket":true,"origins":["*:*"],"cookie_needed":false,"entropy":N}``;
- ``GET /api/ws/<server>/<session>/websocket``: an RFC 6455 WebSocket (wsproto does the handshake and frames);
- ``POST .../xhr_streaming``: a 2 KiB ``h`` prelude, then one frame a line for as long as the client stays;
- ``POST .../xhr_send``: a JSON array of messages for that session, answered 204 (404 for an unknown session).

It runs inside ``Legacy2xDouble``'s thread-per-connection server: an open session holds a thread of the test
process (Node holds a socket), which is the double's cost, not the bridge's.
"""

from __future__ import annotations

import json
import queue
import re
import secrets
import socket
import threading
from collections.abc import Callable
from typing import Any

from wsproto import ConnectionType, WSConnection
from wsproto.events import AcceptConnection, CloseConnection, Message, Ping, Request, TextMessage

PREFIX = "/api/ws"
HEARTBEAT_S = 25.0  # sockjs-node's heartbeat_delay
PRELUDE = b"h" * 2048 + b"\n"  # xhr_streaming's prelude, so browsers start delivering the stream at once
RESPONSE_LIMIT = 128 * 1024  # sockjs-node closes an xhr_streaming answer after this many bytes
JS_TYPE = "application/javascript; charset=UTF-8"
_SESSION_PATH = re.compile(r"/api/ws/([^/.]+)/([^/.]+)/(websocket|xhr_streaming|xhr_send)")
_CLOSED = object()
TokenCheck = Callable[[str, str], bool]  # (token, user agent) -> valid


def close_frame(code: int | str, reason: str) -> str:
    return "c" + json.dumps([code, reason], separators=(",", ":"))


def message_frame(messages: list[str]) -> str:
    return "a" + json.dumps(messages, separators=(",", ":"), ensure_ascii=False)


def token_of(target: str) -> str:
    """sock.ts: ``conn.url.replace(`${conn.pathname}?token=`, '')``."""
    path, _, _ = target.partition("?")
    return target.replace(f"{path}?token=", "", 1)


class SockJsDouble:
    def __init__(self, token_check: TokenCheck, heartbeat_s: float = HEARTBEAT_S) -> None:
        self._token_check = token_check
        self.heartbeat_s = heartbeat_s
        self._sessions: dict[str, queue.SimpleQueue[object]] = {}
        self._lock = threading.Lock()
        self.opened = 0  # sessions whose token was accepted
        self.close_codes: list[int] = []  # the codes WebSocket clients closed with, in order

    def serves(self, path: str) -> bool:
        return path == f"{PREFIX}/info" or _SESSION_PATH.fullmatch(path) is not None

    def handle(self, handler: Any) -> None:
        """Serve one request on ``handler`` (a BaseHTTPRequestHandler whose request line and headers are read)."""
        path = handler.path.partition("?")[0]
        if path == f"{PREFIX}/info":
            body = json.dumps({"websocket": True, "origins": ["*:*"], "cookie_needed": False,
                               "entropy": secrets.randbits(32)}, separators=(",", ":")).encode()  # JSON.stringify
            _answer(handler, 200, "application/json; charset=UTF-8", body)
            return
        match = _SESSION_PATH.fullmatch(path)
        assert match is not None
        session, transport = match[2], match[3]
        if transport == "websocket":
            self._websocket(handler)
        elif transport == "xhr_streaming" and handler.command == "POST":
            self._xhr_streaming(handler, session)
        elif transport == "xhr_send" and handler.command == "POST":
            self._xhr_send(handler, session)
        else:
            _answer(handler, 404, "text/plain; charset=UTF-8", b"Cannot " + handler.command.encode() + b" " +
                    path.encode())

    def _accepts(self, handler: Any) -> bool:
        accepted = self._token_check(token_of(handler.path), handler.headers.get("User-Agent") or "")
        if accepted:
            with self._lock:
                self.opened += 1
        return accepted

    # -- websocket ---------------------------------------------------------------------------------

    def _websocket(self, handler: Any) -> None:
        if (handler.headers.get("Upgrade") or "").lower() != "websocket":
            _answer(handler, 400, "text/plain; charset=UTF-8", b'Can "Upgrade" only to "WebSocket".')
            return
        ws = WSConnection(ConnectionType.SERVER)
        head = f"{handler.requestline}\r\n{handler.headers.as_string().replace(chr(10), chr(13) + chr(10))}"
        ws.receive_data(head.encode("latin-1"))
        request = next(e for e in ws.events() if isinstance(e, Request))
        sock: socket.socket = handler.connection
        sock.sendall(ws.send(AcceptConnection(subprotocol=request.subprotocols[0] if request.subprotocols
                                              else None)))
        handler.close_connection = True
        sock.sendall(ws.send(TextMessage("o")))
        if not self._accepts(handler):
            sock.sendall(ws.send(TextMessage(close_frame("404", "Normal closure"))))
            sock.sendall(ws.send(CloseConnection(1000)))
            return
        sock.settimeout(self.heartbeat_s)
        while True:
            try:
                data = sock.recv(65536)
            except TimeoutError:
                sock.sendall(ws.send(TextMessage("h")))
                continue
            except OSError:
                return
            if not data:
                return
            ws.receive_data(data)
            for event in ws.events():
                if isinstance(event, Message) and isinstance(event, TextMessage):
                    echoed = _decoded(event.data)
                    if echoed is None:
                        return  # sockjs-node drops a session that sends invalid JSON
                    if echoed:
                        sock.sendall(ws.send(TextMessage(message_frame(echoed))))
                elif isinstance(event, Ping):
                    sock.sendall(ws.send(event.response()))
                elif isinstance(event, CloseConnection):
                    with self._lock:
                        self.close_codes.append(event.code)
                    sock.sendall(ws.send(event.response()))
                    return

    # -- xhr_streaming + xhr_send ------------------------------------------------------------------

    def _xhr_streaming(self, handler: Any, session: str) -> None:
        handler.rfile.read(int(handler.headers.get("Content-Length") or 0))
        handler.send_response(200)
        handler.send_header("Content-Type", JS_TYPE)
        handler.send_header("Cache-Control", "no-store, no-cache, no-transform, must-revalidate, max-age=0")
        handler.send_header("Transfer-Encoding", "chunked")
        handler.end_headers()
        handler.close_connection = True
        write = _chunk_writer(handler)
        try:
            write(PRELUDE)
            write(b"o\n")
            if not self._accepts(handler):
                write(close_frame("404", "Normal closure").encode() + b"\n")
                write(b"")
                return
            inbox: queue.SimpleQueue[object] = queue.SimpleQueue()
            with self._lock:
                self._sessions[session] = inbox
            try:
                self._stream(inbox, write)
            finally:
                with self._lock:
                    self._sessions.pop(session, None)
        except OSError:
            return

    def _stream(self, inbox: queue.SimpleQueue[object], write: Callable[[bytes], None]) -> None:
        sent = 0
        while sent < RESPONSE_LIMIT:
            try:
                item = inbox.get(timeout=self.heartbeat_s)
            except queue.Empty:
                item = "h"
            if item is _CLOSED:
                break
            frame = str(item).encode() + b"\n"
            write(frame)
            sent += len(frame)
        write(b"")

    def _xhr_send(self, handler: Any, session: str) -> None:
        body = handler.rfile.read(int(handler.headers.get("Content-Length") or 0))
        with self._lock:
            inbox = self._sessions.get(session)
        if inbox is None:
            _answer(handler, 404, "text/plain; charset=UTF-8", b"Not Found")
            return
        if not body:
            _answer(handler, 500, "text/plain; charset=UTF-8", b"Payload expected.")
            return
        messages = _decoded(body.decode("utf-8", "replace"))
        if messages is None:
            _answer(handler, 500, "text/plain; charset=UTF-8", b"Broken JSON encoding.")
            return
        if messages:
            inbox.put(message_frame(messages))  # sock.ts: conn.on('data', m => conn.write(m))
        _answer(handler, 204, "text/plain; charset=UTF-8", b"")

    def close_sessions(self) -> None:
        with self._lock:
            for inbox in self._sessions.values():
                inbox.put(_CLOSED)


def _decoded(payload: str) -> list[str] | None:
    """sockjs-node's incoming framing: a JSON array of strings (or one string); None when it is not JSON."""
    try:
        value = json.loads(payload) if payload else []
    except ValueError:
        return None
    values = value if isinstance(value, list) else [value]
    return [v if isinstance(v, str) else json.dumps(v) for v in values]


def _answer(handler: Any, status: int, content_type: str, body: bytes) -> None:
    handler.send_response(status)
    handler.send_header("Content-Type", content_type)
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)


def _chunk_writer(handler: Any) -> Callable[[bytes], None]:
    """One HTTP/1.1 chunk a call, flushed at once (an empty one ends the answer)."""

    def write(data: bytes) -> None:
        handler.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        handler.wfile.flush()

    return write
