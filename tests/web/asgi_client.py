"""A test client for the bridge's ASGI app, shaped like Flask's, so the web tests drive the real front door.

Each call builds the ASGI scope a server would (method, raw target, headers, body in one message), runs the app
on an event loop of its own (nothing in the app is bound to a loop), and answers a Werkzeug response (status,
headers, ``get_data()``, ``json``) built from what the app sent. ``environ_overrides={"RAW_URI": ...}`` sets
the raw target, as a WSGI server's raw URI did.
"""

from __future__ import annotations

import asyncio
from typing import Any
from urllib.parse import unquote

import httpx
from flask import Response

from bridge.bootstrap import Container
from bridge.web.asgi import BridgeAsgi


class RelayedResponse(Response):
    default_mimetype = None  # no Content-Type is invented when the app sent none
    automatically_set_content_length = False


class AsgiTestClient:
    def __init__(self, app: BridgeAsgi) -> None:
        self.app = app

    def open(self, path: str, method: str = "GET", *, data: bytes | str | None = None,
             headers: dict[str, str] | list[tuple[str, str]] | None = None, json: Any = None,
             environ_overrides: dict[str, str] | None = None, **_: Any) -> Response:
        target = (environ_overrides or {}).get("RAW_URI", path).encode("latin-1")
        body = data.encode() if isinstance(data, str) else data or b""
        items = list(headers.items()) if isinstance(headers, dict) else list(headers or [])
        if json is not None:
            body = httpx.Request("POST", "http://x", json=json).content
            items.append(("Content-Type", "application/json"))
        if body or method in ("PUT", "POST", "PATCH"):
            items.append(("Content-Length", str(len(body))))
        return asyncio.run(self._call(method, target, items, body))

    async def _call(self, method: str, target: bytes, items: list[tuple[str, str]], body: bytes) -> Response:
        raw_path, _, query = target.partition(b"?")
        scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method,
                 "scheme": "http", "path": unquote(raw_path.decode("latin-1")), "raw_path": raw_path,
                 "query_string": query, "root_path": "", "server": ("bridge.test", 80),
                 "client": ("127.0.0.1", 50000),
                 "headers": [(b"host", b"bridge.test")] + [(k.lower().encode("latin-1"), v.encode("latin-1"))
                                                           for k, v in items]}
        sent: list[dict[str, Any]] = []
        delivered = asyncio.Event()

        async def receive() -> dict[str, Any]:
            if not delivered.is_set():
                delivered.set()
                return {"type": "http.request", "body": body, "more_body": False}
            await asyncio.Event().wait()  # the client stays connected until the answer is complete
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        await self.app(scope, receive, send)
        start = next(m for m in sent if m["type"] == "http.response.start")
        content = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
        headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in start.get("headers", [])]
        return RelayedResponse(content, status=start["status"], headers=headers)

    def get(self, path: str, **kwargs: Any) -> Response:
        return self.open(path, "GET", **kwargs)

    def put(self, path: str, **kwargs: Any) -> Response:
        return self.open(path, "PUT", **kwargs)

    def post(self, path: str, **kwargs: Any) -> Response:
        return self.open(path, "POST", **kwargs)

    def delete(self, path: str, **kwargs: Any) -> Response:
        return self.open(path, "DELETE", **kwargs)

    def head(self, path: str, **kwargs: Any) -> Response:
        return self.open(path, "HEAD", **kwargs)

    def close(self) -> None:
        asyncio.run(self.app.close())


def bridge_client(container: Container) -> AsgiTestClient:
    """The front door over ``container``; 2.x is whatever transport the container's sync client has (the
    tests' MockTransport handlers serve the async client as well)."""
    transport = container.http._transport  # noqa: SLF001 - test wiring: the same recorded fake upstream
    return AsgiTestClient(BridgeAsgi(container, httpx.AsyncClient(transport=transport)))
