"""The pass-through to 2.x on the event loop: every request the bridge does not answer itself is relayed byte
for byte, both ways, as it arrives.

A request body goes up chunk by chunk as the client sends it, and 2.x's answer comes back chunk by chunk as 2.x
writes it: a 1-byte heartbeat on an xhr_streaming answer reaches the client at once, and a download or an upload
of any size holds at most a chunk in memory. An open stream costs a socket and a coroutine, never a thread.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Iterable
from functools import lru_cache
from urllib.parse import quote, urlsplit

import httpx

from bridge.metrics import BridgeMetrics
from bridge.web.asgi_io import (
    BodyTooLarge,
    ClientGone,
    Receive,
    Scope,
    Send,
    body_stream,
    declared_length,
    has_body,
    send_json,
    wait_for_disconnect,
)
from legacy_adapters.shell_report import FOR_THE_BRIDGE_ONLY

log = logging.getLogger("bridge.proxy")

# RFC 9110 7.6.1 hop-by-hop fields, plus the pre-standard ones still seen in the wild.
HOP_BY_HOP = frozenset({b"connection", b"keep-alive", b"proxy-connection", b"proxy-authenticate",
                        b"proxy-authorization", b"te", b"trailer", b"trailers", b"transfer-encoding", b"upgrade",
                        b"http2-settings"})
# Host and Content-Length are set for the upstream hop; uvicorn has answered any Expect: 100-continue itself
# (when the app first read the body).
_NOT_SENT_UP = HOP_BY_HOP | {b"host", b"content-length", b"expect"}
# h11 accepts only visible ASCII in a request target; anything else goes up percent-encoded.
_TARGET_SAFE = "".join(chr(c) for c in range(0x21, 0x7F))
SMALL_ANSWER_BYTES = 64 * 1024  # an answer this size or smaller is sent without watching for the client leaving


def raw_target(scope: Scope) -> bytes:
    """The request target (path and query) exactly as the client sent it, as ASCII bytes."""
    path = scope.get("raw_path") or quote(scope["path"]).encode("ascii")
    query = scope.get("query_string") or b""
    if not path.startswith(b"/"):  # absolute-form ("http://host/p"): keep origin-form only
        path = urlsplit(path.decode("latin-1")).path.encode("latin-1") or b"/"
    target = path + (b"?" + query if query else b"")
    return quote(target, safe=_TARGET_SAFE).encode("ascii")


def path_only(target: bytes) -> str:
    """The target's path, for matching and for logs (2.x takes client_secret in a query string)."""
    return target.partition(b"?")[0].decode("ascii")


def upstream_headers(headers: Iterable[tuple[bytes, bytes]], body_length: int | None) -> list[tuple[bytes, bytes]]:
    """End-to-end request headers as wire bytes; Content-Length is set when the body's length is known."""
    items = list(headers)
    drop = _NOT_SENT_UP | connection_tokens(items)
    # The seam block's reports are for the bridge alone (legacy_adapters/shell_report.py): 2.x gets its own bytes.
    out = [(k, v) for k, v in items if k.lower() not in drop and not k.lower().startswith(FOR_THE_BRIDGE_ONLY)]
    if body_length is not None:
        out.append((b"Content-Length", str(body_length).encode("ascii")))
    return out


def downstream_headers(headers: Iterable[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """2.x's end-to-end answer headers, unchanged (the server adds neither Date nor Server of its own)."""
    items = list(headers)
    drop = HOP_BY_HOP | connection_tokens(items)
    return [(k, v) for k, v in items if k.lower() not in drop]


def connection_tokens(headers: list[tuple[bytes, bytes]]) -> frozenset[bytes]:
    """Header names listed in Connection are hop-by-hop too (RFC 9110 7.6.1)."""
    return frozenset(token.strip().lower() for k, v in headers if k.lower() == b"connection"
                     for token in v.split(b","))


def build_upstream_request(legacy_url: str, method: str, target: bytes, headers: Iterable[tuple[bytes, bytes]],
                           body: bytes | AsyncIterator[bytes], length: int | None) -> httpx.Request:
    """An httpx.Request built directly, so the client adds no default headers (no Accept-Encoding)."""
    origin, prefix = upstream_base(legacy_url)
    full_target = prefix + target
    try:
        url = httpx.URL(origin + full_target.decode("ascii"))
    except httpx.InvalidURL:
        url = httpx.URL(origin)  # the "target" extension below is what goes on the wire anyway
    # httpx.URL normalises dot segments and re-quotes; the "target" extension sends our bytes as they are.
    return httpx.Request(method, url, headers=upstream_headers(headers, length), content=body,
                         extensions={"target": full_target})


@lru_cache(maxsize=8)
def upstream_base(legacy_url: str) -> tuple[str, bytes]:
    """("scheme://host:port", path prefix) of the 2.x URL; the prefix covers a QlBaseUrl-style mount."""
    parts = urlsplit(legacy_url)
    return f"{parts.scheme}://{parts.netloc}", parts.path.rstrip("/").encode("ascii")


async def send_bad_gateway(send: Send, exc: Exception) -> None:
    """2.x's error shape, so the shell's jq `.code`/`.message` handling still works."""
    message = f"ql-bridge: the QingLong backend is unreachable ({type(exc).__name__})"
    await send_json(send, 502, {"code": 502, "message": message})


class PassThrough:
    """Relays one request to 2.x and 2.x's answer back, both streamed."""

    def __init__(self, client: httpx.AsyncClient, legacy_url: str, metrics: BridgeMetrics, max_body_bytes: int):
        self._client = client
        self._legacy_url = legacy_url
        self._metrics = metrics
        self._max_body = max_body_bytes
        self._streams: set[asyncio.Future[None]] = set()  # answers of unknown length being relayed
        self.in_flight = 0  # requests being relayed (uploads, downloads, streams): what the panel holds open

    def end_streams(self) -> int:
        """End every open answer of unknown length (xhr_streaming, eventsource) cleanly: the server is stopping
        and the panel reopens them. Downloads of a known length keep the drain to finish."""
        streams = list(self._streams)
        for pump in streams:
            pump.cancel()
        return len(streams)

    async def __call__(self, scope: Scope, receive: Receive, send: Send, target: bytes, head: bytes = b"",
                       head_is_whole: bool = False) -> None:
        """``head``: what the caller already read of the body (the whole of it when ``head_is_whole``)."""
        length = declared_length(scope)
        if length is not None and length > self._max_body:
            await send_json(send, 413, {"code": 413, "message": "Payload Too Large"})
            return
        self.in_flight += 1
        try:
            await self._relay(scope, receive, send, target, head, head_is_whole, length)
        finally:
            self.in_flight -= 1

    async def _relay(self, scope: Scope, receive: Receive, send: Send, target: bytes, head: bytes,
                     head_is_whole: bool, length: int | None) -> None:
        if head_is_whole:
            body: bytes | AsyncIterator[bytes] = head
        else:
            body = body_stream(receive, head, self._max_body) if has_body(scope) else b""
        upstream = build_upstream_request(self._legacy_url, scope["method"], target, scope["headers"], body,
                                          length if length is not None or not has_body(scope) else None)
        started = time.perf_counter()
        try:
            response = await self._client.send(upstream, stream=True)
        except (ClientGone, BodyTooLarge, httpx.TransportError) as exc:
            await self._refuse(send, scope, target, _cause(exc))
            return
        finally:
            self._metrics.forward_seconds.observe(time.perf_counter() - started)
        try:
            await relay_answer(response, receive, send, self._streams)
        finally:
            await response.aclose()

    async def _refuse(self, send: Send, scope: Scope, target: bytes, exc: BaseException) -> None:
        if isinstance(exc, ClientGone):
            return  # nobody to answer
        if isinstance(exc, BodyTooLarge):
            await send_json(send, 413, {"code": 413, "message": "Payload Too Large"})
            return
        # Log the path only: 2.x takes client_secret in /open/auth/token's query string.
        log.warning("forward %s %s failed: 2.x unreachable (%s)", scope["method"], path_only(target),
                    type(exc).__name__)
        await send_bad_gateway(send, exc)  # type: ignore[arg-type]


def _cause(exc: BaseException) -> BaseException:
    """httpx wraps what the request body's iterator raised; the bridge's own reasons are found under it."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, (ClientGone, BodyTooLarge)):
            return seen
        seen = seen.__cause__ or seen.__context__
    return exc


async def relay_answer(response: httpx.Response, receive: Receive, send: Send,
                       streams: set[asyncio.Future[None]] | None = None) -> None:
    """2.x's status, end-to-end headers and body bytes as they arrive; stops when either side goes away.
    An answer of unknown length is registered in ``streams`` while it runs, so a stopping server can end it."""
    await send({"type": "http.response.start", "status": response.status_code,
                "headers": downstream_headers(response.headers.raw)})
    length = response.headers.get("content-length")
    if length is not None and length.isdigit() and int(length) <= SMALL_ANSWER_BYTES:
        await _pump(response, send)  # a short answer: no watcher task for a client that would leave
        return
    pump = asyncio.ensure_future(_pump(response, send))
    gone = asyncio.ensure_future(wait_for_disconnect(receive))
    if length is None and streams is not None:
        streams.add(pump)
    try:
        await asyncio.wait({pump, gone}, return_when=asyncio.FIRST_COMPLETED)
        if pump.cancelled() and not gone.done():  # ended by the stopping server: the chunked answer ends cleanly
            await send({"type": "http.response.body", "body": b"", "more_body": False})
    finally:
        if streams is not None:
            streams.discard(pump)
        for task in (pump, gone):
            task.cancel()
        await asyncio.gather(pump, gone, return_exceptions=True)


async def raw_chunks(response: httpx.Response) -> AsyncIterator[bytes]:
    """The body's wire bytes chunk by chunk: a gzip/br body stays compressed, byte for byte."""
    if response.is_stream_consumed:
        # Built pre-read (a MockTransport handler passing content=...): .content may be decoded already,
        # but the response's stream still holds the raw bytes.
        async for chunk in response.stream:  # type: ignore[union-attr]
            yield chunk
        return
    async for chunk in response.aiter_raw():
        yield chunk


async def _pump(response: httpx.Response, send: Send) -> None:
    try:
        async for chunk in raw_chunks(response):
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
    except httpx.TransportError as exc:
        # 2.x failed midway: the answer ends early (the client sees a truncated body), logged, not raised.
        log.warning("2.x's answer broke off midway (%s)", type(exc).__name__)
        return
    await send({"type": "http.response.body", "body": b"", "more_body": False})
