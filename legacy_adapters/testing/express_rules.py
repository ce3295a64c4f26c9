"""2.x's own rules as the backend TEST DOUBLE applies them (legacy_adapters.testing.double): what a request and
a reply are, 2.x's token and platform checks, JavaScript's comparisons, and the instance rows a status callback
opens and closes. Ported from back/loaders/express.ts and back/services/cron.ts; for tests and demos only.
"""

from __future__ import annotations

import re
import sqlite3
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from typing import Any

from legacy_adapters.callbacks import (
    StatusCallback,
)
from legacy_adapters.errors import LegacyCallbackParseError, node_json
from legacy_adapters.schema import InstanceStatus
from legacy_adapters.testing.datadir import immediate

JSON_TYPE = "application/json; charset=utf-8"  # what Express res.send(object) sets
UNDEFINED_PID = 'WHERE parameter "pid" has invalid "undefined" value'
UNDEFINED = object()  # a JS undefined, which 2.x compares differently from null

def static_asset(name: str) -> bytes:
    """The fixed bytes ``GET /static/<name>`` answers, including every byte value."""
    return bytes(range(256)) * 4 + name.encode("utf-8")


@dataclass(frozen=True)
class RecordedRequest:
    """One request exactly as the double received it."""

    method: str
    path: str
    raw_query: str
    headers: tuple[tuple[str, str], ...]
    body: bytes

    def header(self, name: str) -> str | None:
        """The first header called ``name`` (case-insensitive), or None."""
        return next((v for k, v in self.headers if k.lower() == name.lower()), None)


@dataclass(frozen=True)
class Reply:
    status: int
    body: bytes
    content_type: str = JSON_TYPE


class ServiceError(Exception):
    """A plain Error thrown inside CronService: 2.x answers 500 {"code":500,"message":...}."""


def json_reply(status: int, value: Any) -> Reply:
    return Reply(status, node_json(value))


def kept(value: Any) -> bool:
    # lodash pickBy(v => v === 0 || !!v): NaN (None here), null and undefined are dropped.
    return value is not None and (value == 0 or bool(value)) and not isinstance(value, bool)


def status_options(cb: StatusCallback) -> tuple[dict[str, Any], Any]:
    # Destructuring defaults: an absent time is 0 (and 0 is written), a null one stays null.
    started = cb.last_execution_time if "last_execution_time" in cb.present_keys else 0
    runtime = cb.last_running_time if "last_running_time" in cb.present_keys else 0
    options: dict[str, Any] = {"status": cb.status, "pid": cb.pid, "log_path": cb.log_path}
    options["last_execution_time"] = started
    if runtime is not None and runtime > 0:
        options["last_running_time"] = runtime
    return options, started


def get_token(authorization: str | None) -> str:
    """back/config/util.ts getToken: a Bearer token with each prefix replaced once."""
    if authorization and authorization.split(" ")[0] == "Bearer":
        return authorization.replace("Bearer ", "", 1).replace("mobile-", "", 1).replace("desktop-", "", 1)
    return ""


def get_platform(user_agent: str) -> str:
    """back/config/util.ts getPlatform."""
    ua = user_agent.lower()
    if re.search(r"windows|win32|win64|wow32|wow64|macintosh|macintel|x11", ua):
        return "desktop"
    if re.search(r"android|adr|ios|iphone|ipad|ipod|iwatch|openharmony", ua) or "mobile" in ua:
        return "mobile"
    return "desktop"


def js_lt(left: Any, right: float) -> bool:
    """JavaScript ``left < right`` (right a number): ToNumber on the left, and NaN compares false."""
    if left is UNDEFINED:
        return False
    if left is None or isinstance(left, bool):
        left = int(left or 0)
    elif isinstance(left, str):
        text = left.strip()
        if text and not re.fullmatch(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?", text):
            return False
        left = float(text) if text else 0.0
    elif not isinstance(left, (int, float)):
        return False
    return bool(left < right)


def is_valid_token(auth_info: Any, token: str, platform: str) -> bool:
    """back/shared/auth.ts isValidToken."""
    if not isinstance(auth_info, dict) or not auth_info or not token:
        return False
    if token == auth_info.get("token", ""):
        return True
    tokens = auth_info.get("tokens")
    per_platform = (tokens if isinstance(tokens, dict) else {}).get(platform)
    if isinstance(per_platform, str):
        return token == per_platform
    if isinstance(per_platform, list):
        return any(isinstance(t, dict) and t.get("value") == token for t in per_platform)
    return False


def open_instance(conn: sqlite3.Connection, cron_id: float, cb: StatusCallback, started: Any, stamp: str) -> None:
    # pid || undefined and log_path || undefined: falsy values are left NULL.
    with immediate(conn):
        conn.execute(
            "INSERT INTO RunningInstances (cron_id, pid, log_path, started_at, status, createdAt, updatedAt) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)",
            (cron_id, cb.pid or None, cb.log_path or None, started, int(InstanceStatus.RUNNING), stamp, stamp),
        )


def close_instances(conn: sqlite3.Connection, cron_id: float, cb: StatusCallback, now_s: int, stamp: str) -> None:
    if not cb.pid:  # where: {pid: pid || undefined} -> Sequelize throws before Crontabs
        raise ServiceError(UNDEFINED_PID)
    failed = cb.exit_code is not None and cb.exit_code != 0
    values: dict[str, Any] = {
        "finished_at": now_s,
        "status": int(InstanceStatus.ERROR if failed else InstanceStatus.FINISHED),
    }
    if cb.exit_code is not None:  # exit_code ?? undefined: an absent one is not written
        values["exit_code"] = cb.exit_code
    sets = ", ".join(f"{k} = ?" for k in values)
    with immediate(conn):
        conn.execute(
            f"UPDATE RunningInstances SET {sets}, updatedAt = ? WHERE cron_id = ? AND pid = ? AND status = ?",
            (*values.values(), stamp, cron_id, cb.pid, int(InstanceStatus.RUNNING)),
        )


def joi_param_number(name: str, text: str) -> float:
    """celebrate's ``params: Joi.number().required()`` on one path parameter: a decimal string converts."""
    try:
        value = float(text) if set(text) <= set("0123456789+-.eE \t") else float("nan")
    except ValueError:
        value = float("nan")
    if value != value or value in (float("inf"), float("-inf")):  # NaN: not a number Joi converts
        message = f'"{name}" must be a number'
    elif abs(value) > 2**53 - 1:
        message = f'"{name}" must be a safe number'
    else:
        return int(value) if value.is_integer() else value
    body = {"statusCode": 400, "error": "Bad Request", "message": "Validation failed",
            "validation": {"params": {"source": "params", "keys": [name], "message": message}}}
    raise LegacyCallbackParseError(name, message, node_json(body))


class RequestHandler(BaseHTTPRequestHandler):
    """One HTTP/1.1 connection to the double: SockJS first, then the double's Express-like handling."""

    protocol_version = "HTTP/1.1"
    timeout = 10  # idle keep-alive connections end instead of pinning a thread

    def _serve(self) -> None:
        path, _, query = self.path.partition("?")
        double = self.server.double  # type: ignore[attr-defined]
        if double.sockjs.serves(path):
            double.sockjs.handle(self)  # sockjs-node answers before Express sees the request
            return
        request = RecordedRequest(self.command, path, query, tuple(self.headers.items()), self._read_body())
        reply = self.server.double.handle(request)  # type: ignore[attr-defined]
        self.send_response(reply.status)
        self.send_header("Content-Type", reply.content_type)
        self.send_header("Content-Length", str(len(reply.body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(reply.body)

    do_GET = do_PUT = do_POST = do_DELETE = do_PATCH = do_HEAD = do_OPTIONS = _serve

    def _read_body(self) -> bytes:
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            chunks = []
            while size := int(self.rfile.readline().split(b";")[0].strip() or b"0", 16):
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
            while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                pass  # trailers
            return b"".join(chunks)
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length > 0 else b""

    def log_message(self, format: str, *args: Any) -> None:  # the stdlib's signature
        pass
