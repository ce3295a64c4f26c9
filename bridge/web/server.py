"""Serve the ASGI app with uvicorn in this one process, and stop it gracefully.

Why uvicorn (httptools, wsproto) and one process: the bridge sits on the panel's port, so a client that trickles
its request, an answer that streams for hours and an open WebSocket must each cost a socket, never a thread;
a huge body must never be held in memory (uvicorn reads at most 64 KiB ahead of the app, which streams it to
2.x); and no orphaned worker may keep the port after its parent died (there is no parent). A supervisor —
Docker's restart policy, systemd — restarts the process, and every start runs startup recovery before it
listens. See docs/serving.md ("Why this stack") for the measurements that chose this stack.

Stopping (SIGTERM or SIGINT): the listening socket closes at once; every WebSocket is closed with 1001 so the
panel reconnects, and every open stream of unknown length is ended; requests already received (callbacks
and their shadow writes included) finish and their answers go out, for at most ``drain_timeout_s``; only
then are the upstream client, the pools, the write lanes and the store closed.
"""

from __future__ import annotations

import contextlib
import logging
import signal
from collections.abc import Callable, Generator
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import uvicorn
import uvloop

from bridge.config import Settings
from bridge.logging_setup import configure_logging
from bridge.malloc_arenas import limit_malloc_arenas
from bridge.web.asgi import BridgeAsgi
from bridge.web.http_protocol import RequestDeadlines, protocol_with
from bridge.web.websocket_relay import MAX_MESSAGE_BYTES

if TYPE_CHECKING:
    from bridge.bootstrap import Container

ContainerFactory = Callable[[Settings], "Container"]
log = logging.getLogger("bridge.server")


def uvicorn_config(app: BridgeAsgi, settings: Settings) -> uvicorn.Config:
    """uvicorn's settings for the bridge; nothing is read from a config file or the command line."""
    deadlines = RequestDeadlines(headers_s=settings.headers_timeout_s, request_s=settings.request_timeout_s)
    return uvicorn.Config(
        app, host=settings.listen_host, port=settings.listen_port,
        http=protocol_with(deadlines),  # llhttp (httptools) with the bridge's head limit, deadlines, refusals
        ws="wsproto", ws_max_size=MAX_MESSAGE_BYTES,
        ws_ping_interval=None,  # no idle timeout of the bridge's own: 2.x's SockJS heartbeat keeps the channel
        ws_per_message_deflate=False,  # 2.x's sockjs-node offers none either; it would cost CPU per message
        lifespan="on", loop="uvloop", interface="asgi3",  # uvloop: the same asyncio API, less CPU per event
        timeout_keep_alive=settings.idle_timeout_s,  # an idle keep-alive connection is closed after this
        timeout_graceful_shutdown=settings.drain_timeout_s,
        limit_max_requests=None, backlog=2048,
        access_log=False,  # an access line would quote the request target: 2.x takes secrets in query strings
        server_header=False, date_header=False,  # 2.x's own Date goes back; Node sends no Server header
        proxy_headers=False,  # X-Forwarded-* go to 2.x untouched; the bridge does not use them
        log_config=None,  # the bridge's logging_setup formats uvicorn's lines too
    )


class BridgeServer(uvicorn.Server):
    """uvicorn's server, with the bridge's stop: WebSockets close with 1001 and open streams end first."""

    def __init__(self, config: uvicorn.Config, app: BridgeAsgi) -> None:
        super().__init__(config)
        self.bridge = app

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        # uvicorn re-raises the signal after serving, which would end the process with -15 instead of 0.
        previous = {sig: signal.signal(sig, self.handle_exit) for sig in (signal.SIGTERM, signal.SIGINT)}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    async def shutdown(self, sockets: Any = None) -> None:
        for server in self.servers:
            server.close()  # stop accepting before anything else
        closed = await self.bridge.websockets.close_all()
        ended = self.bridge.pass_through.end_streams()
        if closed or ended:
            log.info("closed %d WebSocket(s) with 1001 and ended %d stream(s)", closed, ended)
        await super().shutdown(sockets)
        left = len(self.server_state.tasks)
        if left:
            log.warning("stopping with %d request(s) still in flight after the %d s drain", left,
                        self.config.timeout_graceful_shutdown)


def serve(settings: Settings, container_factory: ContainerFactory) -> None:
    """Run the bridge until SIGTERM or SIGINT, then drain and close; blocks."""
    from bridge.bootstrap import build_async_http_client

    configure_logging(settings.log_format, [ClientDataFilter()])
    limit_malloc_arenas()  # before the container starts any thread, so the cap holds for all of them
    container = container_factory(settings)
    try:
        async def run() -> None:
            app = BridgeAsgi(container, build_async_http_client(settings))
            log.info("ql-bridge on %s:%d forwarding to %s (%d callback threads)", settings.listen_host,
                     settings.listen_port, _without_userinfo(settings.legacy_url), settings.threads)
            await BridgeServer(uvicorn_config(app, settings), app).serve()

        uvloop.run(run())
        log.info("stopped")
    finally:
        container.close()  # after the drain: in-flight forwards and shadow writes have finished


class ClientDataFilter(logging.Filter):
    """uvicorn attaches tracebacks that may quote input: keep what happened and the exception's type, never
    what the client sent. (uvicorn's access log, which quotes request targets, is off.)"""

    def filter(self, record: logging.LogRecord) -> bool:
        if not record.name.startswith(("uvicorn", "asyncio", "websockets")):
            return True
        message = record.getMessage() if not record.exc_info else str(record.msg)
        if record.exc_info and record.exc_info[1] is not None:
            message = f"{message.rstrip()}: {type(record.exc_info[1]).__name__}"
        record.msg, record.args, record.exc_info, record.exc_text = message, None, None, None
        return True


def _without_userinfo(url: str) -> str:
    parts = urlsplit(url)
    return parts._replace(netloc=parts.netloc.rpartition("@")[2]).geturl()
