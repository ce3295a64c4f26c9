"""Real listeners on loopback for the seam tests: one answering /livez as ql-bridge does, one answering every
path with a page as 2.x's frontend fallback does, and one that accepts connections and never answers."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

BRIDGE_LIVEZ = (200, "application/json", b'{"status":"ok"}\n')  # bridge/web/health.py
PANEL_PAGE = (200, "text/html; charset=UTF-8", b"<!doctype html><html><body><div id=root></div></body></html>")


@contextmanager
def answering(answer: tuple[int, str, bytes]) -> Iterator[int]:
    """A loopback HTTP server giving ``answer`` (status, content type, body) to every GET; yields its port."""
    status, content_type, body = answer

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the name http.server calls
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@contextmanager
def hung() -> Iterator[int]:
    """A port whose connections the kernel completes but nobody ever reads: a bridge that hangs."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(64)
        yield int(sock.getsockname()[1])


def unused_port() -> int:
    """A loopback port nothing listens on (a bridge that is down): connecting is refused at once."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
