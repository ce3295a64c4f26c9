"""Small ASGI helpers shared by the pass-through, the callback route and the WebSocket relay.

A request's body is read from ``receive`` as it arrives, never all at once unless the caller bounds it; an
answer is sent as the events uvicorn turns into bytes on the socket.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, MutableMapping
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
JSON_2X = "application/json; charset=utf-8"  # what Express's res.send(object) sets


class ClientGone(Exception):
    """The client closed its connection before its request had arrived."""


class BodyTooLarge(Exception):
    """The request's body went over the bridge's limit while it was arriving (a chunked body has no length)."""


def header(scope: Scope, name: bytes) -> bytes | None:
    """The first value of header ``name`` (lower case), or None."""
    for key, value in scope["headers"]:
        if key == name:
            return value  # type: ignore[no-any-return]
    return None


def declared_length(scope: Scope) -> int | None:
    """Content-Length as an int when the client framed its body so (llhttp has already validated it)."""
    value = header(scope, b"content-length")
    return int(value) if value is not None else None


def has_body(scope: Scope) -> bool:
    length = declared_length(scope)
    return header(scope, b"transfer-encoding") is not None or (length is not None and length > 0)


async def read_up_to(receive: Receive, cap: int) -> tuple[bytes, bool]:
    """(what arrived, whether that was the whole body), reading no more than just past ``cap`` bytes."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientGone
        chunk = message.get("body", b"")
        chunks.append(chunk)
        size += len(chunk)
        more = message.get("more_body", False)
        if not more or size > cap:
            return b"".join(chunks), not more


async def body_stream(receive: Receive, head: bytes, limit: int) -> AsyncIterator[bytes]:
    """The rest of the body after ``head``, chunk by chunk as the client sends it, up to ``limit`` bytes."""
    sent = len(head)
    if head:
        yield head
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientGone
        chunk = message.get("body", b"")
        sent += len(chunk)
        if sent > limit:
            raise BodyTooLarge
        if chunk:
            yield chunk
        if not message.get("more_body", False):
            return


async def wait_for_disconnect(receive: Receive) -> None:
    """Returns once the client has gone (call it only after the request body has been read)."""
    while (await receive())["type"] != "http.disconnect":
        pass


async def send_whole(send: Send, status: int, headers: Iterable[tuple[bytes, bytes]], body: bytes) -> None:
    await send({"type": "http.response.start", "status": status, "headers": list(headers)})
    await send({"type": "http.response.body", "body": body, "more_body": False})


async def send_json(send: Send, status: int, document: Any) -> None:
    """An answer in 2.x's JSON shape (Express's compact JSON)."""
    body = json.dumps(document, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    await send_whole(send, status, [(b"content-type", JSON_2X.encode()),
                                    (b"content-length", str(len(body)).encode())], body)
