"""The ASGI app uvicorn serves: one front door that sends each request where it belongs.

- the bridge's own endpoints (/livez, /readyz, /healthz, /metrics, /v3, /bridge/flags) go to the Flask app,
  run as WSGI on a small thread pool of its own;
- the intercepted routes (status callbacks, stops) go to the callback route, whose blocking steps run on the
  callback pool, which nothing else uses;
- WebSocket upgrades go to the WebSocket relay, and everything else to the streamed pass-through: both on the
  event loop, so an open stream or WebSocket costs a socket, never a thread.
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

import httpx
from a2wsgi import WSGIMiddleware

from bridge.callbacks.routes import intercepted_route
from bridge.web.app import create_app
from bridge.web.asgi_io import Receive, Scope, Send, send_json
from bridge.web.callback_route import CallbackRoute, HttpxForward
from bridge.web.proxy import PassThrough, path_only, raw_target
from bridge.web.readiness import ReadinessWatch
from bridge.web.websocket_relay import WebSocketRelay

if TYPE_CHECKING:
    from bridge.bootstrap import Container

log = logging.getLogger("bridge.asgi")
_READ = frozenset({"GET", "HEAD"})
_HEALTH = frozenset({"/livez", "/readyz", "/healthz", "/metrics"})
OWN_ENDPOINT_THREADS = 4  # /v3 reads, health, metrics and the admin: an operator's traffic, not the panel's


def is_own_endpoint(method: str, path: str) -> bool:
    """The requests the bridge answers itself (as the Flask app routes them); every other method on the same
    paths goes to 2.x."""
    if path in _HEALTH or path == "/bridge/flags":
        return method in _READ
    if path == "/v3" or path.startswith("/v3/"):
        return True  # /v3 is the bridge's whole: 2.x has no such prefix
    if path.startswith("/bridge/flags/"):
        return method == "PUT" and "/" not in path[len("/bridge/flags/"):] and path != "/bridge/flags/"
    return False


class BridgeAsgi:
    def __init__(self, container: Container, upstream: httpx.AsyncClient) -> None:
        """``upstream`` carries the panel's traffic; the callbacks use the container's client (a pool of its own)."""
        settings = container.settings
        self.container = container
        self.upstream = upstream
        # Flask's __call__ is a WSGI app; a2wsgi's annotation spells the environ type its own way.
        # /readyz reads what this watch last found, so that it answers at once whatever the store and 2.x do.
        self.readiness = ReadinessWatch(container).start()
        own = create_app(container, self.readiness)
        self.own = WSGIMiddleware(own, workers=OWN_ENDPOINT_THREADS)  # type: ignore[arg-type]
        self.pass_through = PassThrough(upstream, settings.legacy_url, container.metrics, settings.max_body_bytes)
        self.callback_pool = ThreadPoolExecutor(settings.threads, thread_name_prefix="callback-")
        self.callbacks = None if container.interceptor is None else CallbackRoute(
            container.interceptor, self.callback_pool,
            container.callback_forward or HttpxForward(container.http, settings.legacy_url), container.metrics,
            settings.callback_body_cap_bytes, self.pass_through)
        self.websockets = WebSocketRelay(settings.legacy_url)
        # What the panel may hold open at once (relayed requests and WebSockets): the memory bound's count.
        # Callbacks and the bridge's own endpoints are never counted and never refused for it.
        self.panel_limit = settings.connection_limit

    def panel_is_full(self) -> bool:
        return self.pass_through.in_flight + self.websockets.open_count >= self.panel_limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "http":
            await self._http(scope, receive, send)
        elif kind == "websocket":
            if self.panel_is_full():
                await self.websockets.refuse_busy(receive, send)
            else:
                await self.websockets(scope, receive, send)
        elif kind == "lifespan":
            await self._lifespan(receive, send)

    async def _http(self, scope: Scope, receive: Receive, send: Send) -> None:
        if is_own_endpoint(scope["method"], scope["path"]):
            await self.own(scope, receive, send)  # type: ignore[arg-type]
            return
        target = raw_target(scope)
        route = intercepted_route(scope["method"], path_only(target)) if self.callbacks is not None else None
        try:
            if route is not None and self.callbacks is not None:
                await self.callbacks(scope, receive, send, target, route)
            elif self.panel_is_full():
                log.warning("%d panel requests and WebSockets open: refusing another", self.panel_limit)
                await send_json(send, 503, {"code": 503, "message": "ql-bridge: too many open connections"})
            else:
                await self.pass_through(scope, receive, send, target)
        except Exception as exc:  # noqa: BLE001 - one request's bug must not reach uvicorn's text/plain 500
            log.error("request %s %s failed: %s", scope["method"], path_only(target), type(exc).__name__)
            try:
                await send_json(send, 500, {"code": 500, "message": "ql-bridge internal error"})
            except Exception:  # noqa: BLE001 - the answer had begun: the connection is closed instead
                raise exc from None

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.close()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def close(self) -> None:
        """After the drain: the upstream client and the pools (the shadow lanes close with the container)."""
        self.readiness.close()
        await self.websockets.close_all()
        await self.upstream.aclose()
        self.callback_pool.shutdown(wait=True)
        self.own.executor.shutdown(wait=True)
