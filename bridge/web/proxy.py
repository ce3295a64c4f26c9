"""The catch-all pass-through to 2.x: every request not claimed elsewhere is relayed byte for byte.

The task shell's status callbacks are also shown to a CallbackInterceptor (fail-open: 2.x's answer wins).
"""

from __future__ import annotations

import json
import logging
import re
import time
import zlib
from collections.abc import Iterable, Iterator, Mapping
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import quote, urlsplit

import httpx
from flask import Blueprint, Response, request
from werkzeug.datastructures import Headers

from bridge.callbacks.answers import LocalAnswer
from bridge.web import current_container

if TYPE_CHECKING:
    from bridge.bootstrap import Container

log = logging.getLogger("bridge.proxy")

METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")
# Exact and case-sensitive: 2.x answers mixed-case /api/ and /open/ paths with its own 400. The stop
# routes are watched too: a stop 2.x accepted cancels the matching shadow Runs.
CALLBACK_PATHS = frozenset({b"/open/crons/status", b"/api/crons/status", b"/open/crons/stop", b"/api/crons/stop"})
STOP_PATHS = frozenset({b"/open/crons/stop", b"/api/crons/stop"})
# stopInstance answers HTTP 200 whether it stopped anything or not: the interceptor reads its JSON `code`.
STOP_INSTANCE_PATH = re.compile(rb"/(?:open|api)/crons/[0-9]{1,15}/instances/[0-9]{1,15}/stop")
# RFC 9110 7.6.1 hop-by-hop fields, plus the pre-standard ones still seen in the wild.
HOP_BY_HOP = frozenset({"connection", "keep-alive", "proxy-connection", "proxy-authenticate", "proxy-authorization",
                        "te", "trailer", "trailers", "transfer-encoding", "upgrade", "http2-settings"})
# Host and Content-Length are recomputed for the upstream hop; the body is already read, so the
# bridge (waitress) has answered any Expect: 100-continue itself.
_NOT_SENT_UP = HOP_BY_HOP | {"host", "content-length", "expect"}
# The WSGI server writes its own Date and Server; relaying 2.x's would duplicate them.
_NOT_SENT_DOWN = HOP_BY_HOP | {"date", "server"}
# h11 accepts only visible ASCII in a request target; anything else goes up percent-encoded.
_TARGET_SAFE = "".join(chr(c) for c in range(0x21, 0x7F))
_JSON_2X = "application/json; charset=utf-8"  # what Express's res.send(object) sets
STREAM_CHUNK_BYTES = 64 * 1024
ANSWER_CAP_BYTES = 64 * 1024  # what of a stop's answer is decoded for the interceptor (2.x's is ~50 bytes)


class CallbackInterceptor(Protocol):
    """Sees a status callback before and after 2.x does; must not raise and keeps its own time budget."""

    def before_forward(self, path: str, body: bytes, headers: Mapping[str, str]) -> object | None:
        """Return None or a token for after_forward; a LocalAnswer means "answer this yourself" (primary)."""
        ...

    def after_forward(self, prepared: object, upstream_status: int, answer: bytes | None = None) -> None:
        """``answer`` (2.x's body without its content coding) is passed for the stop routes only."""
        ...


class RelayResponse(Response):
    """Upstream's status, headers and body, which Werkzeug must neither complete nor correct."""

    automatically_set_content_length = False  # keeps a HEAD answer's Content-Length, and chunked stays chunked
    default_mimetype = None  # no Content-Type is invented when 2.x sent none

    def get_wsgi_headers(self, environ: Any) -> Headers:
        # Werkzeug would rewrite Location/Content-Location through iri_to_uri; 2.x's bytes win.
        return Headers(self.headers)


proxy = Blueprint("proxy", __name__)
_RULE = {"methods": METHODS, "strict_slashes": False, "merge_slashes": False, "provide_automatic_options": False}


@proxy.route("/", defaults={"path": ""}, **_RULE)
@proxy.route("/<path:path>", **_RULE)
def forward(path: str) -> Response:
    """Relay the request to 2.x (the ``path`` argument is Werkzeug's decoded view and is not used)."""
    container = current_container()
    target = raw_target(request.environ)
    length = request.content_length or 0
    interceptor = container.interceptor if is_intercepted(request.method, target) else None
    if interceptor is not None and length > container.settings.callback_body_cap_bytes:
        # The shell's body is ~250 bytes: a huge one is 2.x's to judge, never parsed or held by the bridge.
        container.metrics.callback_body_oversize(_path_only(target))
        interceptor = None
    if interceptor is None:
        return _relay(container, target, _streamed_body(request.environ, length) if length > 0 else b"", length)
    body = _read_body(request.environ, length)
    prepared = _before_forward(interceptor, target, body)
    if isinstance(prepared, LocalAnswer):  # primary mode: the bridge is the truth and answers the shell
        return Response(prepared.body, status=prepared.status, content_type=prepared.content_type)
    upstream = build_upstream_request(container.settings.legacy_url, request.method, target, request.headers, body)
    try:
        response, content = _send(container, upstream)
    except httpx.TransportError as exc:
        return _unreachable(exc, target)
    if prepared is not None:
        answer = _answer_body(response, content) if is_stop_route(target) else None
        _after_forward(interceptor, prepared, response.status_code, answer)
    return relay_response(response, content)


def _relay(container: Container, target: bytes, body: bytes | Iterator[bytes], length: int) -> Response:
    """Pass-through with the body streamed both ways: the bridge holds at most a chunk of it."""
    upstream = build_upstream_request(container.settings.legacy_url, request.method, target, request.headers, body,
                                      length)
    started = time.perf_counter()
    try:
        response = container.http.send(upstream, stream=True)
    except httpx.TransportError as exc:
        return _unreachable(exc, target)
    finally:
        container.metrics.forward_seconds.observe(time.perf_counter() - started)
    relayed = relay_response(response, _raw_chunks(response))
    relayed.call_on_close(response.close)
    return relayed


def _unreachable(exc: httpx.TransportError, target: bytes) -> Response:
    # Log the path only: 2.x takes client_secret in /open/auth/token's query string.
    log.warning("forward %s %s failed: 2.x unreachable (%s)", request.method, _path_only(target), type(exc).__name__)
    return bad_gateway(exc)


def _read_body(environ: dict[str, Any], length: int) -> bytes:
    """A body the bridge looks at, already bounded by the caller (waitress has read all of it)."""
    return environ["wsgi.input"].read(length) if length > 0 else b""


def _streamed_body(environ: dict[str, Any], length: int) -> Iterator[bytes]:
    stream, left = environ["wsgi.input"], length
    while left > 0:
        chunk = stream.read(min(left, STREAM_CHUNK_BYTES))
        if not chunk:
            return
        left -= len(chunk)
        yield chunk


def is_intercepted(method: str, target: bytes) -> bool:
    """A status callback or a stop: `PUT` to one of CALLBACK_PATHS, or stopInstance's `POST`."""
    path = target.partition(b"?")[0]
    if method == "POST":
        return STOP_INSTANCE_PATH.fullmatch(path) is not None
    return method == "PUT" and path in CALLBACK_PATHS


def is_stop_route(target: bytes) -> bool:
    path = target.partition(b"?")[0]
    return path in STOP_PATHS or STOP_INSTANCE_PATH.fullmatch(path) is not None


def _answer_body(response: httpx.Response, content: bytes) -> bytes | None:
    """2.x's answer without its content coding (compression() leaves bodies under 1 kB as they are)."""
    coding = response.headers.get("content-encoding", "identity").strip().lower()
    if coding == "identity":
        return content
    wbits = {"gzip": 16 + zlib.MAX_WBITS, "x-gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}.get(coding)
    if wbits is None:
        return None
    try:
        return zlib.decompressobj(wbits).decompress(content, ANSWER_CAP_BYTES)
    except zlib.error:
        return None


def raw_target(environ: dict[str, Any]) -> bytes:
    """The request target (path and query) exactly as the client sent it, as ASCII bytes."""
    raw = environ.get("RAW_URI") or environ.get("REQUEST_URI")
    if raw:
        target = raw.encode("latin-1")  # WSGI strings carry the wire bytes as latin-1
        if not target.startswith(b"/"):  # absolute-form ("http://host/p"): keep origin-form only
            parts = urlsplit(raw)
            target = (parts.path or "/").encode("latin-1") + (b"?" + parts.query.encode("latin-1")
                                                              if parts.query else b"")
    else:  # no raw URI from the server: re-quote the decoded path and keep the raw query
        path = (environ.get("SCRIPT_NAME", "") + environ.get("PATH_INFO", "")).encode("latin-1") or b"/"
        query = environ.get("QUERY_STRING", "")
        target = quote(path, safe="/:@!$&'()*+,;=~").encode("ascii") + (b"?" + query.encode("latin-1")
                                                                         if query else b"")
    return quote(target, safe=_TARGET_SAFE).encode("ascii")


def build_upstream_request(legacy_url: str, method: str, target: bytes, headers: Iterable[tuple[str, str]],
                           body: bytes | Iterator[bytes], length: int | None = None) -> httpx.Request:
    """An httpx.Request built directly, so the client adds no default headers (no Accept-Encoding)."""
    origin, prefix = _upstream_base(legacy_url)
    full_target = prefix + target
    try:
        url = httpx.URL(origin + full_target.decode("ascii"))
    except httpx.InvalidURL:
        url = httpx.URL(origin)  # the "target" extension below is what goes on the wire anyway
    # httpx.URL normalises dot segments and re-quotes; the "target" extension sends our bytes as they are.
    body_length = len(body) if isinstance(body, bytes) else length or 0
    return httpx.Request(method, url, headers=upstream_headers(headers, body_length), content=body,
                         extensions={"target": full_target})


def upstream_headers(headers: Iterable[tuple[str, str]], body_length: int) -> list[tuple[bytes, bytes]]:
    """End-to-end request headers as wire bytes; Content-Length is recomputed when the client framed a body."""
    items = list(headers)
    drop = _NOT_SENT_UP | _connection_tokens(items)
    out = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in items if k.lower() not in drop]
    if any(k.lower() in ("content-length", "transfer-encoding") for k, _ in items):
        out.append((b"Content-Length", str(body_length).encode("ascii")))
    return out


def relay_response(upstream: httpx.Response, body: bytes | Iterator[bytes]) -> Response:
    """A Flask response carrying upstream's status line, end-to-end headers and body bytes unchanged."""
    items = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in upstream.headers.raw]
    drop = _NOT_SENT_DOWN | _connection_tokens(items)
    kept = [(k, v) for k, v in items if k.lower() not in drop]
    reason = upstream.reason_phrase
    status_line = f"{upstream.status_code} {reason}" if reason else upstream.status_code
    return RelayResponse(body, status=status_line, headers=kept, direct_passthrough=True)


def bad_gateway(exc: Exception) -> Response:
    """2.x's error shape, so the shell's jq `.code`/`.message` handling still works."""
    message = f"ql-bridge: the QingLong backend is unreachable ({type(exc).__name__})"
    body = json.dumps({"code": 502, "message": message}, separators=(",", ":")).encode("utf-8")
    return Response(body, status=502, content_type=_JSON_2X)


def _send(container: Container, upstream: httpx.Request) -> tuple[httpx.Response, bytes]:
    started = time.perf_counter()
    try:
        response = container.http.send(upstream, stream=True)
        try:
            content = _raw_body(response)
        finally:
            response.close()
        return response, content  # status and headers stay readable after close()
    finally:
        container.metrics.forward_seconds.observe(time.perf_counter() - started)


def _raw_body(response: httpx.Response) -> bytes:
    """The body as it came off the wire: a gzip/br body stays compressed, byte for byte."""
    return b"".join(_raw_chunks(response))


def _raw_chunks(response: httpx.Response) -> Iterator[bytes]:
    """The body's wire bytes chunk by chunk; 2.x failing midway ends the answer early (logged, not raised)."""
    if response.is_stream_consumed:
        # Built pre-read (a MockTransport handler passing content=...): .content is already decoded,
        # but the response's stream still holds the raw bytes.
        yield from response.stream  # type: ignore[misc]
        return
    try:
        yield from response.iter_raw()
    except httpx.TransportError as exc:
        log.warning("2.x's answer broke off midway (%s)", type(exc).__name__)


def _before_forward(interceptor: CallbackInterceptor, target: bytes, body: bytes) -> object | None:
    try:
        return interceptor.before_forward(target.partition(b"?")[0].decode("ascii"), body, request.headers)
    except Exception as exc:  # noqa: BLE001 - fail-open: the callback must reach 2.x regardless
        _interceptor_failed("before_forward", exc)
        return None


def _after_forward(interceptor: CallbackInterceptor, prepared: object, upstream_status: int,
                   answer: bytes | None = None) -> None:
    try:
        if answer is None:
            interceptor.after_forward(prepared, upstream_status)
        else:
            interceptor.after_forward(prepared, upstream_status, answer)
    except Exception as exc:  # noqa: BLE001 - fail-open: 2.x's answer goes back unchanged
        _interceptor_failed("after_forward", exc)


def _interceptor_failed(stage: str, exc: Exception) -> None:
    # Type name only: an exception message may quote the body (log_path, pid) or a token.
    log.error("callback interceptor %s failed: %s", stage, type(exc).__name__)
    current_container().metrics.shadow_write_failed("unknown", "internal")


def _connection_tokens(headers: list[tuple[str, str]]) -> frozenset[str]:
    """Header names listed in Connection are hop-by-hop too (RFC 9110 7.6.1)."""
    return frozenset(token.strip().lower() for k, v in headers if k.lower() == "connection" for token in v.split(","))


@lru_cache(maxsize=8)
def _upstream_base(legacy_url: str) -> tuple[str, bytes]:
    """("scheme://host:port", path prefix) of the 2.x URL; the prefix covers a QlBaseUrl-style mount."""
    parts = urlsplit(legacy_url)
    return f"{parts.scheme}://{parts.netloc}", parts.path.rstrip("/").encode("ascii")


def _path_only(target: bytes) -> str:
    return target.partition(b"?")[0].decode("ascii")
