"""WebSocket pass-through: the panel's SockJS channel (`/api/ws/...`) and any other upgrade, relayed to 2.x.

The upgrade goes to 2.x with the client's end-to-end headers; 2.x's refusal comes back as it was (status,
headers, body), and once 2.x has switched protocols, messages flow both ways until either side closes, with the
close code passed on. The framing, masking, ping/pong and fragments are uvicorn's (wsproto) towards the client
and the websockets library's towards 2.x. An open WebSocket is two sockets and two coroutines, never a thread;
no idle timeout applies (2.x's SockJS heartbeat comes every 25 s). On shutdown every relay closes with 1001
("going away") so the panel reconnects.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus

from bridge.web.asgi_io import Receive, Scope, Send
from bridge.web.proxy import HOP_BY_HOP, connection_tokens, path_only, raw_target, upstream_base

log = logging.getLogger("bridge.websocket")
GOING_AWAY = 1001
# Set by each side's WebSocket library for its own hop: the key, its accept, version and extensions.
_HANDSHAKE = frozenset({b"host", b"sec-websocket-key", b"sec-websocket-version", b"sec-websocket-extensions",
                        b"sec-websocket-accept", b"sec-websocket-protocol", b"content-length"})
_UNSENDABLE_CLOSE = frozenset({1005, 1006, 1015})  # reserved: "no code", "abnormal", "TLS": never on the wire
OPEN_TIMEOUT_S = 10.0
CLOSE_TIMEOUT_S = 2.0  # how long 2.x may take to answer a close: a stopping bridge must not wait past its drain
# The panel's SockJS frames are a few hundred bytes; a message over this closes the WebSocket with 1009. It,
# with one message queued from 2.x, bounds what one WebSocket can make the bridge hold (docs/serving.md#memory-bound).
MAX_MESSAGE_BYTES = 256 * 1024


class WebSocketRelay:
    def __init__(self, legacy_url: str) -> None:
        self._legacy_url = legacy_url
        self._open: set[asyncio.Future[None]] = set()
        self._closing = False

    @property
    def open_count(self) -> int:
        return len(self._open)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (await receive())["type"] != "websocket.connect":
            return
        target = raw_target(scope)
        try:
            upstream = await self._connect(scope, target)
        except InvalidStatus as refused:
            await _relay_refusal(send, refused)
            return
        except (OSError, InvalidHandshake, TimeoutError) as exc:
            log.warning("WebSocket %s: 2.x unreachable (%s)", path_only(target), type(exc).__name__)
            await _deny(send, 502, b'{"code":502,"message":"ql-bridge: the QingLong backend is unreachable"}')
            return
        async with upstream:
            accept: dict[str, Any] = {"type": "websocket.accept", "subprotocol": upstream.subprotocol}
            await send(accept)
            session = asyncio.ensure_future(self._relay(receive, send, upstream))
            self._open.add(session)
            try:
                await session
            finally:
                self._open.discard(session)

    async def refuse_busy(self, receive: Receive, send: Send) -> None:
        """The bridge holds as many open panel connections as it may: 503, and the panel retries."""
        if (await receive())["type"] == "websocket.connect":
            await _deny(send, 503, b'{"code":503,"message":"ql-bridge: too many open connections"}')

    async def _connect(self, scope: Scope, target: bytes) -> ClientConnection:
        origin, prefix = upstream_base(self._legacy_url)
        uri = origin.replace("http", "ws", 1) + (prefix + target).decode("ascii")
        items = list(scope["headers"])
        drop = HOP_BY_HOP | _HANDSHAKE | connection_tokens(items)
        headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in items if k not in drop]
        return await connect(uri, additional_headers=headers, user_agent_header=None, compression=None,
                             subprotocols=scope.get("subprotocols") or None, open_timeout=OPEN_TIMEOUT_S,
                             close_timeout=CLOSE_TIMEOUT_S,
                             ping_interval=None, max_size=MAX_MESSAGE_BYTES, max_queue=1, proxy=None)

    async def _relay(self, receive: Receive, send: Send, upstream: ClientConnection) -> None:
        to_2x = asyncio.ensure_future(_client_to_2x(receive, upstream))
        to_client = asyncio.ensure_future(_2x_to_client(upstream, send))
        try:
            await asyncio.wait({to_2x, to_client}, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            # Shutdown: the panel is told "going away" and reconnects to the next bridge.
            await _close_client(send, GOING_AWAY)
            await upstream.close(GOING_AWAY)
            raise
        finally:
            for task in (to_2x, to_client):
                task.cancel()
            await asyncio.gather(to_2x, to_client, return_exceptions=True)

    async def close_all(self) -> int:
        """Close every open relay with 1001 and wait for them; returns how many there were."""
        sessions = list(self._open)
        for session in sessions:
            session.cancel()
        await asyncio.gather(*sessions, return_exceptions=True)
        return len(sessions)


async def _client_to_2x(receive: Receive, upstream: ClientConnection) -> None:
    while True:
        message = await receive()
        if message["type"] == "websocket.receive":
            text = message.get("text")
            await upstream.send(text if text is not None else message.get("bytes") or b"")
        elif message["type"] == "websocket.disconnect":
            code = message.get("code", 1000)
            await upstream.close(1000 if code in _UNSENDABLE_CLOSE else code, message.get("reason") or "")
            return


async def _2x_to_client(upstream: ClientConnection, send: Send) -> None:
    try:
        async for data in upstream:
            await send({"type": "websocket.send", **({"text": data} if isinstance(data, str) else {"bytes": data})})
    except ConnectionClosed:
        pass
    code = upstream.close_code or 1000  # what 2.x closed with (or what the relay sent, if the relay closed first)
    await _close_client(send, 1000 if code in _UNSENDABLE_CLOSE else code, upstream.close_reason or "")


async def _close_client(send: Send, code: int, reason: str = "") -> None:
    try:
        await send({"type": "websocket.close", "code": code, "reason": reason})
    except Exception:  # noqa: BLE001 - the client may already be gone; there is nobody left to tell
        pass


async def _relay_refusal(send: Send, refused: InvalidStatus) -> None:
    response = refused.response
    items = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in response.headers.raw_items()]
    drop = HOP_BY_HOP | connection_tokens(items)
    headers = [(k, v) for k, v in items if k not in drop]
    await send({"type": "websocket.http.response.start", "status": response.status_code, "headers": headers})
    await send({"type": "websocket.http.response.body", "body": response.body or b""})


async def _deny(send: Send, status: int, body: bytes) -> None:
    await send({"type": "websocket.http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json; charset=utf-8"),
                            (b"content-length", str(len(body)).encode())]})
    await send({"type": "websocket.http.response.body", "body": body})
