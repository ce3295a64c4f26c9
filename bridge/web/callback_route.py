"""The intercepted routes (status callbacks and stops), served with capacity of their own.

The body (a task shell's is ~250 bytes) is read on the event loop; then the whole exchange, the interceptor's
blocking steps (parsing with 2.x's rules, 2.x's Crontabs read, the shadow write's wait) and the forward between
them, runs in one hop on the callback pool, a thread pool that nothing else uses, with connections to 2.x of
its own (legacy_adapters.http_forward), so no panel request, stream or WebSocket can queue a callback behind it.
2.x's answer goes back unchanged (fail-open); in primary mode the interceptor's LocalAnswer goes back instead
and nothing is forwarded.
"""

from __future__ import annotations

import asyncio
import logging
import time
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import Executor
from contextlib import suppress
from functools import partial
from typing import TypeVar

import httpx

from bridge.callbacks.answers import LocalAnswer
from bridge.callbacks.ports import CallbackInterceptor
from bridge.callbacks.prepared import Forwarded, Prepared
from bridge.callbacks.routes import InterceptedRoute
from bridge.metrics import BridgeMetrics
from bridge.web.asgi_io import ClientGone, Receive, Scope, Send, read_up_to, send_whole
from bridge.web.proxy import (
    PassThrough,
    build_upstream_request,
    downstream_headers,
    path_only,
    send_bad_gateway,
    upstream_headers,
)
from legacy_adapters.http_forward import CallbackForward, ForwardedAnswer

log = logging.getLogger("bridge.proxy")
T = TypeVar("T")
ANSWER_CAP_BYTES = 64 * 1024  # what of a stop's answer is decoded for the interceptor (2.x's is ~50 bytes)


class WireHeaders(Mapping[str, str]):
    """The request's headers as the interceptor reads them: looked up by name in any case, repeated ones joined
    with ", " (as httpx.Headers does), without building a header object per callback."""

    def __init__(self, raw: list[tuple[bytes, bytes]]) -> None:
        self._raw = raw

    def __getitem__(self, name: str) -> str:
        wanted = name.lower().encode("latin-1")
        values = [value for key, value in self._raw if key.lower() == wanted]
        if not values:
            raise KeyError(name)
        return b", ".join(values).decode("latin-1")

    def __iter__(self) -> Iterator[str]:
        return iter(self._names())

    def __len__(self) -> int:
        return len(self._names())

    def _names(self) -> dict[str, None]:
        """Each name once, in the order it first came (repeated ones are one entry, as in __getitem__)."""
        return dict.fromkeys(key.decode("latin-1") for key, _ in self._raw)


class CallbackRoute:
    def __init__(self, interceptor: CallbackInterceptor, pool: Executor, forward: CallbackForward,
                 metrics: BridgeMetrics, body_cap_bytes: int, pass_through: PassThrough) -> None:
        self._interceptor = interceptor
        self._pool = pool
        self._forward = forward
        self._metrics = metrics
        self._cap = body_cap_bytes
        self._pass_through = pass_through

    async def __call__(self, scope: Scope, receive: Receive, send: Send, target: bytes,
                       route: InterceptedRoute) -> None:
        try:
            body, whole = await read_up_to(receive, self._cap)
        except ClientGone:
            return
        if not whole or len(body) > self._cap:
            # The shell's body is ~250 bytes: a huge one is 2.x's to judge, never parsed or held by the bridge.
            self._metrics.callback_body_oversize(path_only(target))
            await self._pass_through(scope, receive, send, target, head=body, head_is_whole=whole)
            return
        # One hop to the callback pool for the whole exchange: the interceptor's steps and the forward between
        # them are blocking work on threads nothing else uses, with 2.x on connections of their own.
        answer = await on_pool(self._pool, partial(self._exchange, scope["method"], target, scope["headers"],
                                                   body, route))
        if isinstance(answer, httpx.TransportError):
            log.warning("forward %s %s failed: 2.x unreachable (%s)", scope["method"], path_only(target),
                        type(answer).__name__)
            await send_bad_gateway(send, answer)
        elif isinstance(answer, LocalAnswer):  # primary mode: the bridge is the truth and answers the shell
            await send_whole(send, answer.status, [(b"content-type", answer.content_type.encode()),
                                                   (b"content-length", str(len(answer.body)).encode())],
                             answer.body)
        else:
            await send_whole(send, answer.status, downstream_headers(answer.headers), answer.content)

    def _exchange(self, method: str, target: bytes, raw_headers: list[tuple[bytes, bytes]], body: bytes,
                  route: InterceptedRoute) -> LocalAnswer | httpx.TransportError | ForwardedAnswer:
        """On the callback pool: before_forward, the forward, after_forward (only when there is something)."""
        prepared = self._before_forward(route, body, WireHeaders(raw_headers))
        if isinstance(prepared, LocalAnswer):
            return prepared
        started = time.perf_counter()
        try:
            answer = self._forward(method, target, upstream_headers(raw_headers, None), body)
        except httpx.TransportError as exc:
            return exc
        finally:
            self._metrics.forward_seconds.observe(time.perf_counter() - started)
        if prepared is not None:
            decoded = answer_body(answer) if route.answer_is_read else None
            self._after_forward(prepared, answer.status, decoded)
        return answer

    def _before_forward(self, route: InterceptedRoute, body: bytes, headers: Mapping[str, str]) -> Prepared | None:
        try:
            return self._interceptor.before_forward(route, body, headers)
        except Exception as exc:  # noqa: BLE001 - fail-open: the callback must reach 2.x regardless
            self._failed("before_forward", exc)
            return None

    def _after_forward(self, prepared: Forwarded, upstream_status: int, answer: bytes | None) -> None:
        try:
            if answer is None:
                self._interceptor.after_forward(prepared, upstream_status)
            else:
                self._interceptor.after_forward(prepared, upstream_status, answer)
        except Exception as exc:  # noqa: BLE001 - fail-open: 2.x's answer goes back unchanged
            self._failed("after_forward", exc)

    def _failed(self, stage: str, exc: Exception) -> None:
        # Type name only: an exception message may quote the body (log_path, pid) or a token.
        log.error("callback interceptor %s failed: %s", stage, type(exc).__name__)
        self._metrics.shadow_write_failed("unknown", "internal")


def on_pool(pool: Executor, work: Callable[[], T]) -> asyncio.Future[T]:
    """``work`` on the pool, its result (or exception) settled on the loop's future with one wake-up: what
    ``run_in_executor`` does without its second future and the copying between them."""
    loop = asyncio.get_running_loop()
    settled: asyncio.Future[T] = loop.create_future()

    def run() -> None:
        try:
            result, exc = work(), None
        except BaseException as caught:  # noqa: BLE001 - handed to the awaiting coroutine, as run_in_executor does
            result, exc = None, caught
        with suppress(RuntimeError):  # a loop closed meanwhile has nobody left to answer
            loop.call_soon_threadsafe(_settle, settled, result, exc)

    pool.submit(run)
    return settled


def _settle(future: asyncio.Future[T], result: T | None, exc: BaseException | None) -> None:
    if future.cancelled():
        return
    if exc is not None:
        future.set_exception(exc)
    else:
        future.set_result(result)  # type: ignore[arg-type]


class HttpxForward:
    """The callbacks' forward through an httpx client (its pool, its TLS): for an ``https://`` 2.x, and for
    tests whose 2.x is an httpx MockTransport."""

    def __init__(self, client: httpx.Client, legacy_url: str) -> None:
        self._client = client
        self._legacy_url = legacy_url

    def __call__(self, method: str, target: bytes, headers: Iterable[tuple[bytes, bytes]],
                 body: bytes) -> ForwardedAnswer:
        request = build_upstream_request(self._legacy_url, method, target, headers, body, len(body))
        response = self._client.send(request, stream=True)
        try:
            content = raw_body(response)  # the wire bytes: a gzip/br body stays compressed, byte for byte
        finally:
            response.close()
        return ForwardedAnswer(response.status_code, list(response.headers.raw), content)

    def close(self) -> None:
        """The client is the container's, which closes it."""


def raw_body(response: httpx.Response) -> bytes:
    """The body as it came off the wire, chunks joined."""
    if response.is_stream_consumed:
        # Built pre-read (a MockTransport handler passing content=...): .content may be decoded already,
        # but the response's stream still holds the raw bytes.
        return b"".join(response.stream)  # type: ignore[arg-type]
    return b"".join(response.iter_raw())


def answer_body(answer: ForwardedAnswer) -> bytes | None:
    """2.x's answer without its content coding (compression() leaves bodies under 1 kB as they are)."""
    coding = (answer.header(b"content-encoding") or b"identity").decode("latin-1").strip().lower()
    content = answer.content
    if coding == "identity":
        return content
    wbits = {"gzip": 16 + zlib.MAX_WBITS, "x-gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}.get(coding)
    if wbits is None:
        return None
    try:
        return zlib.decompressobj(wbits).decompress(content, ANSWER_CAP_BYTES)
    except zlib.error:
        return None
