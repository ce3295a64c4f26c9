"""Serve the app with waitress in this one process, and stop it gracefully.

Why waitress and one process: the bridge sits on the panel's port, so a client that trickles its request
must not hold a worker thread (waitress reads whole requests on its event loop first, see
``http_channel``), a huge body must not be held in memory (waitress spools it to disk), and no orphaned
worker may keep the port after its parent died (there is no parent). A supervisor — Docker's restart
policy, systemd — restarts the process, and every start runs startup recovery before it listens.

Stopping (SIGTERM or SIGINT): the listening socket closes at once, requests already received are
finished and their answers sent (their shadow writes included), for at most ``drain_timeout_s``; only
then are the upstream client, the write lanes and the store closed.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from waitress import wasyncore

from bridge.config import Settings
from bridge.logging_setup import configure_logging
from bridge.malloc_arenas import limit_malloc_arenas
from bridge.web.app import create_app
from bridge.web.http_channel import HEADER_LIMIT_BYTES, BridgeHttpServer, RequestDeadlines

if TYPE_CHECKING:
    from bridge.bootstrap import Container

ContainerFactory = Callable[[Settings], "Container"]
log = logging.getLogger("bridge.server")
LOOP_TICK_S = 0.2  # how soon the event loop notices a stop request
BUFFER_BYTES = 64 * 1024


def waitress_options(settings: Settings) -> dict[str, Any]:
    """waitress's adjustments for the bridge; nothing is read from a config file or the command line."""
    return {
        "host": settings.listen_host,
        "port": settings.listen_port,
        "threads": settings.threads,
        "connection_limit": settings.connection_limit,
        "channel_timeout": settings.idle_timeout_s,  # an idle keep-alive connection is closed after this
        "cleanup_interval": 1,  # how often idle and overdue connections are looked for
        "max_request_header_size": HEADER_LIMIT_BYTES,
        "max_request_body_size": settings.max_body_bytes,
        # What one connection may hold in memory: its headers (HEADER_LIMIT_BYTES) and BUFFER_BYTES of body
        # on the way in and of answer on the way out; anything more waits in a temporary file.
        "inbuf_overflow": BUFFER_BYTES,
        "outbuf_overflow": BUFFER_BYTES,
        "asyncore_use_poll": True,  # select() stops at 1,024 descriptors
        "asyncore_loop_timeout": LOOP_TICK_S,
        "expose_tracebacks": False,
        "ident": "",  # no Server header: Node sends none either
        "clear_untrusted_proxy_headers": False,  # X-Forwarded-* go to 2.x untouched; the bridge does not use them
        "log_socket_errors": False,  # a peer's reset is not an error of the bridge's
    }


def build_server(app: Any, settings: Settings) -> BridgeHttpServer:
    deadlines = RequestDeadlines(headers_s=settings.headers_timeout_s, request_s=settings.request_timeout_s)
    return BridgeHttpServer(app, deadlines, **waitress_options(settings))


def serve(settings: Settings, container_factory: ContainerFactory) -> None:
    """Run the bridge until SIGTERM or SIGINT, then drain and close; blocks."""
    configure_logging(settings.log_format, [ClientDataFilter()])
    limit_malloc_arenas()  # before the container starts any thread, so the cap holds for all of them
    container = container_factory(settings)
    try:
        server = build_server(create_app(container), settings)
        stop = threading.Event()
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda *_: stop.set())
        log.info("ql-bridge on %s:%d forwarding to %s (%d threads)", settings.listen_host, settings.listen_port,
                 _without_userinfo(settings.legacy_url), settings.threads)
        run_until(server, stop)
        drain(server, settings.drain_timeout_s)
    finally:
        container.close()  # after the drain: in-flight forwards and shadow writes have finished


def run_until(server: BridgeHttpServer, stop: threading.Event) -> None:
    while not stop.is_set():
        wasyncore.loop(timeout=LOOP_TICK_S, map=server._map, use_poll=True, count=1)


def drain(server: BridgeHttpServer, timeout_s: float) -> None:
    """Stop accepting, let received requests finish and their answers go out, then stop the threads."""
    wasyncore.dispatcher.close(server)  # the listening socket only; connections and the trigger stay
    deadline = time.monotonic() + timeout_s
    while server.busy_channels() and time.monotonic() < deadline:
        wasyncore.loop(timeout=LOOP_TICK_S, map=server._map, use_poll=True, count=1)
    left = server.busy_channels()
    if left:
        log.warning("stopping with %d request(s) still in flight after the %.0f s drain", left, timeout_s)
    server.task_dispatcher.shutdown(cancel_pending=True, timeout=max(0.5, deadline - time.monotonic()))
    for channel in list(server.active_channels.values()):
        channel.handle_close()
    server.trigger.close()
    log.info("stopped")


class ClientDataFilter(logging.Filter):
    """waitress quotes the request path in two messages and attaches tracebacks that may quote input:
    keep what happened and the exception's type, never what the client sent."""

    _QUOTING = ("Exception while serving", "Client disconnected while serving")

    def filter(self, record: logging.LogRecord) -> bool:
        if not record.name.startswith("waitress"):
            return True
        message = str(record.msg)
        for prefix in self._QUOTING:
            if message.startswith(prefix):
                message = prefix.lower() + " a request"
        if record.exc_info and record.exc_info[1] is not None:
            message += f": {type(record.exc_info[1]).__name__}"
        record.msg, record.args, record.exc_info, record.exc_text = message, None, None, None
        return True


def _without_userinfo(url: str) -> str:
    parts = urlsplit(url)
    return parts._replace(netloc=parts.netloc.rpartition("@")[2]).geturl()
