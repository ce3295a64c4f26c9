"""``Legacy2xDouble``: a QingLong v2.21.0 backend TEST DOUBLE on a local port, for tests and demos.

It follows docs/legacy-2x.md#request-routing, #the-status-callback, #authentication, #run-state-routes over a
``LegacyDataDir``; it is never a production 2.x. Its ``/open/*`` check is its own port of back/loaders/express.ts (never
the bridge's), and its messages go through a port of back/shared/i18n.ts: ``t()`` answers in the process language that
``start()`` sets as initData does and ``PUT /api/system/config/lang`` changes, each time also writing ``keyv:lang``.
"""

from __future__ import annotations

import base64
import json
import math
import re
import sqlite3
import threading
import time
from collections.abc import Callable
from contextlib import closing
from datetime import datetime
from http.server import ThreadingHTTPServer
from typing import Any

from legacy_adapters.callbacks import (
    StatusCallback,
    decode_json_body,
    joi_error,
    validate_id_array,
    validate_status_payload,
)
from legacy_adapters.errors import LegacyCallbackParseError
from legacy_adapters.schema import CrontabStatus, InstanceStatus, format_updated_at
from legacy_adapters.testing.datadir import LegacyDataDir, connect, immediate
from legacy_adapters.testing.express_rules import (
    UNDEFINED,
    RecordedRequest,
    Reply,
    RequestHandler,
    ServiceError,
    close_instances,
    get_platform,
    get_token,
    is_valid_token,
    joi_param_number,
    js_lt,
    json_reply,
    kept,
    open_instance,
    static_asset,
    status_options,
)
from legacy_adapters.testing.sockjs_double import HEARTBEAT_S, SockJsDouble

# back/shared/i18n.ts messages.en, for the messages this double can answer with.
_MESSAGES_EN = {
    "暂无权限": "Access denied",
    "Token 已失效": "Token expired",
    "请先登录": "Please login first",
    "实例不存在或已停止": "Instance does not exist or stopped",  # back/shared/i18n.ts
    "实例已停止": "Instance stopped",
}
# config.apiWhiteList: these pass the token middleware without a token.
API_WHITE_LIST = frozenset({
    "/api/user/login", "/api/health", "/open/auth/token", "/api/user/two-factor/login", "/api/system",
    "/api/user/init", "/api/user/notification/init", "/open/user/login", "/open/user/two-factor/login",
    "/open/system", "/open/user/init", "/open/user/notification/init",
})


class Legacy2xDouble:
    """A 2.x test double: status/run/stop/record/health routes, echo for everything else."""

    def __init__(
        self,
        data_dir: LegacyDataDir,
        *,
        panel_token: str | None = None,
        clock: Callable[[], float] = time.time,
        host: str = "127.0.0.1",
        port: int = 0,
        lang: str | None = None,
        system_lang: str = "zh",
        sockjs_heartbeat_s: float = HEARTBEAT_S,
    ) -> None:
        """``lang`` is the system setting (``systemConfig.info.lang``; None: never set) and ``system_lang``
        what ``systemLang()`` gives the 2.x process ("en" when Node's Intl locale is English, else "zh")."""
        self.data_dir = data_dir
        self.panel_token = panel_token
        self._clock = clock
        self._config_lang = lang
        self._system_lang = system_lang
        self._current_lang = "zh"  # i18n.ts: let currentLang = 'zh', until initData sets it
        self._address = (host, port)
        self._lock = threading.Lock()
        # Sequelize's SQLite connection manager runs every query outside a transaction on one 'default'
        # connection, and CronService.status opens no transaction: 2.x applies concurrent status callbacks one
        # after another and never waits on its own lock. (The other routes keep a connection per request.)
        self._status_writes = threading.Lock()
        self._requests: list[RecordedRequest] = []
        self._failures: list[str] = []
        self._kill_hook: Callable[[int, int], None] | None = None
        self._stop_answer_hook: Callable[[], None] | None = None
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._routes: dict[tuple[str, str], Callable[[Any], Reply]] = {}
        # back/loaders/sock.ts: the SockJS channel at /api/ws, its token checked as isValidToken does.
        self.sockjs = SockJsDouble(self._panel_token_valid, sockjs_heartbeat_s)
        for prefix in ("/api", "/open"):  # rewrite('/open/*', '/api/$1'): one handler each
            self._routes[("PUT", f"{prefix}/crons/status")] = self._status
            self._routes[("PUT", f"{prefix}/crons/run")] = self._run
            self._routes[("PUT", f"{prefix}/crons/stop")] = self._stop
            self._routes[("POST", f"{prefix}/dashboard/record")] = self._record
            self._routes[("PUT", f"{prefix}/system/config/lang")] = self._update_language

    # --- lifecycle and test hooks --------------------------------------------------------

    def start(self) -> Legacy2xDouble:
        """Boot (initData's language step), then listen on a free 127.0.0.1 port in a background thread."""
        self._set_lang(self._config_lang or self._system_lang)  # systemConfig.info?.lang || systemLang()
        server = ThreadingHTTPServer(self._address, RequestHandler)
        server.daemon_threads = True
        server.double = self  # type: ignore[attr-defined]
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever, name="legacy-2x-double", kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop listening and wait for the server thread."""
        self.sockjs.close_sessions()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._server = self._thread = None

    def __enter__(self) -> Legacy2xDouble:
        return self if self._server is not None else self.start()  # `with Legacy2xDouble(d).start()` too

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        """Base URL, e.g. ``http://127.0.0.1:54321``."""
        if self._server is None:
            raise RuntimeError("the double is not started")
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def requests(self) -> list[RecordedRequest]:
        """Every request received so far, in arrival order."""
        with self._lock:
            return list(self._requests)

    def clear_requests(self) -> None:
        """Forget the recorded requests."""
        with self._lock:
            self._requests.clear()

    def fail_next_status_calls(self, count: int, message: str = "SQLITE_BUSY: database is locked") -> None:
        """Make the next ``count`` valid status calls answer 500 like a Sequelize error."""
        with self._lock:
            self._failures.extend([message] * count)

    def simulate_status(self, body: bytes) -> int:
        """What an authenticated ``PUT /open/crons/status`` with ``body`` does to 2.x's database, without HTTP
        (for a test that needs 2.x's writes back to back); returns the status code 2.x would answer. A body
        2.x would refuse raises the error the HTTP route turns into its answer."""
        return self._status(decode_json_body(body)).status

    def simulate_run_single(self, cron_id: int, pid: int, log_path: str) -> bool:
        """runSingle at dequeue: skip unless still queued, else running + pid + log_path."""
        with closing(connect(self.data_dir.database_path)) as conn:
            row = conn.execute("SELECT status FROM Crontabs WHERE id = ?", (cron_id,)).fetchone()
            if row is None or row["status"] != CrontabStatus.QUEUED:
                return False
            with immediate(conn):
                conn.execute(
                    "UPDATE Crontabs SET status = ?, pid = ?, log_path = ?, updatedAt = ? WHERE id = ?",
                    (int(CrontabStatus.RUNNING), pid, log_path, self._stamp(), cron_id),
                )
        return True

    def on_kill(self, hook: Callable[[int, int], None] | None) -> None:
        """Call ``hook(cron_id, pid)`` wherever 2.x's killTask signals a process (the double has none): stop,
        stopInstance and simulate_run_cron. A hook may send the killed shell's end callback, as its trap does,
        before 2.x goes on to mark the rows."""
        self._kill_hook = hook

    def on_stop_answer(self, hook: Callable[[], None] | None) -> None:
        """Call ``hook()`` once stop or stopInstance has written its rows, just before it answers."""
        self._stop_answer_hook = hook

    def simulate_run_cron(self, cron_id: int) -> bool:
        """What back/shared/runCron.ts does at a fire before it spawns the command: when the cron is single
        instance (``allow_multiple_instances === 0``) with a pid and running or queued, kill that pid, mark the
        cron's running instances stopped (finished_at, no exit code) and set the cron idle. True if it did."""
        with closing(connect(self.data_dir.database_path)) as conn:
            # fetchall: a statement left open would hold its read lock while the kill hook calls back into 2.x
            cron = next(iter(conn.execute("SELECT pid, status, allow_multiple_instances FROM Crontabs WHERE id = ?",
                                          (cron_id,)).fetchall()), None)
            if cron is None or cron["allow_multiple_instances"] != 0 or not cron["pid"] \
                    or cron["status"] not in (CrontabStatus.RUNNING, CrontabStatus.QUEUED):
                return False
            self._kill(cron_id, cron["pid"])
            now_s, stamp = int(self._clock()), self._stamp()
            with immediate(conn):
                conn.execute("UPDATE RunningInstances SET status = ?, finished_at = ?, updatedAt = ? "
                             "WHERE cron_id = ? AND status = ?",
                             (int(InstanceStatus.STOPPED), now_s, stamp, cron_id, int(InstanceStatus.RUNNING)))
            with immediate(conn):  # pid: undefined is a no-op
                conn.execute("UPDATE Crontabs SET status = ?, updatedAt = ? WHERE id = ?",
                             (int(CrontabStatus.IDLE), stamp, cron_id))
        return True

    def simulate_boot_reset(self) -> None:
        """back/loaders/initData.ts at start: every cron idle, every running instance stopped with neither
        finish time nor exit code (docs/legacy-2x.md#startup-reset)."""
        stamp = self._stamp()
        with closing(connect(self.data_dir.database_path)) as conn:
            with immediate(conn):
                conn.execute("UPDATE Crontabs SET status = ?, updatedAt = ?", (int(CrontabStatus.IDLE), stamp))
            with immediate(conn):
                conn.execute("UPDATE RunningInstances SET status = ?, updatedAt = ? WHERE status = ?",
                             (int(InstanceStatus.STOPPED), stamp, int(InstanceStatus.RUNNING)))

    def _kill(self, cron_id: int, pid: int) -> None:
        if self._kill_hook is not None:
            self._kill_hook(cron_id, pid)

    def handle(self, request: RecordedRequest) -> Reply:
        """The request pipeline: answer one request as 2.x's Express app does (docs/legacy-2x.md#request-routing;
        its RequestHandler calls this), recording it."""
        with self._lock:
            self._requests.append(request)
        path, lower = request.path, request.path.lower()
        if any(lower.startswith(p) and not path.startswith(p) for p in ("/api/", "/open/")):
            return json_reply(400, {"code": 400, "message": "Invalid path format"})
        if request.method == "GET" and path.rstrip("/") == "/api/health":
            return json_reply(200, {"code": 200, "data": {"status": "ok"}})
        if request.method == "GET" and path.startswith("/static/"):
            return Reply(200, static_asset(path[len("/static/") :]), "application/octet-stream")
        # Express routes are case-insensitive and accept one trailing slash.
        route = self._routes.get((request.method, (path[:-1] if path.endswith("/") else path).lower()))
        if route is None and request.method == "POST":
            route = self._instance_stop_route(path[:-1] if path.endswith("/") else path)
        if route is None:
            return self._echo(request)
        try:
            media = (request.header("content-type") or "").split(";")[0].strip().lower()
            payload = decode_json_body(request.body) if media == "application/json" else {}
            denied = self._authenticate(request)
            return denied or route(payload)
        except LegacyCallbackParseError as error:
            return Reply(400, error.legacy_body)
        except ServiceError as error:
            return json_reply(500, {"code": 500, "message": str(error)})

    def _authenticate(self, request: RecordedRequest) -> Reply | None:
        authorization = request.header("authorization")
        if request.path.startswith("/open/"):
            return self._authenticate_open(request)
        # express-jwt (HS384) on /api/*: the double knows one valid panel JWT, not the secret.
        parts = (authorization or "").split(" ")
        if not authorization:
            message = "No authorization token was found"
        elif len(parts) != 2 or parts[0].lower() != "bearer":
            message = "Format is Authorization: Bearer [token]"
        elif parts[1] == self.panel_token:
            return None
        else:
            message = "jwt malformed" if parts[1].count(".") != 2 else "invalid signature"
        return json_reply(401, {"code": 401, "message": message})

    def _authenticate_open(self, request: RecordedRequest) -> Reply | None:
        """The token middleware of back/loaders/express.ts for a ``/open/`` path (no baseUrl)."""
        token = get_token(request.header("authorization"))
        path = request.path.lower()
        apps = self._keyv("apps")
        owner = next((a for a in apps or [] if isinstance(a, dict)
                      and any(isinstance(t, dict) and t.get("value") == token for t in a.get("tokens") or [])), None)
        if owner is not None and owner.get("tokens"):
            current = next(t for t in owner["tokens"] if isinstance(t, dict) and t.get("value") == token)
            match = re.search(r"/open/([a-z]+)/*", path)
            if not match or match.group(1) not in (owner.get("scopes") or []):
                return self._unauthorized("暂无权限")
            if js_lt(current.get("expiration", UNDEFINED), math.floor(self._clock() + 0.5)):  # Math.round
                return self._unauthorized("Token 已失效")
            return None
        if not token and path in API_WHITE_LIST:
            return None
        if is_valid_token(self._keyv("authInfo"), token, get_platform(request.header("user-agent") or "")):
            return None
        return self._unauthorized("Token 已失效" if token else "请先登录")

    def _panel_token_valid(self, token: str, user_agent: str) -> bool:
        """back/loaders/sock.ts: ``isValidToken(authInfo, token, getPlatform(user-agent) || 'desktop')``."""
        return is_valid_token(self._keyv("authInfo"), token, get_platform(user_agent))

    def _unauthorized(self, key: str) -> Reply:
        # UnauthorizedError -> res.status(401).send({code: 401, message: err.message})
        return json_reply(401, {"code": 401, "message": self._t(key)})

    # --- i18n (back/shared/i18n.ts) and the keyv cache (back/shared/store.ts) ------------------

    def _t(self, key: str) -> str:
        return _MESSAGES_EN.get(key, key) if self._current_lang == "en" else key

    def _set_lang(self, lang: str | None) -> None:
        self._current_lang = lang or "zh"
        self.data_dir.write_keyv("lang", self._current_lang)  # shareStore.setLang

    @property
    def language(self) -> str:
        """The process language ``t()`` translates into."""
        return self._current_lang

    def _keyv(self, key: str) -> Any:
        """Keyv get: the value under ``keyv:<key>``, None when absent or expired (read on every request)."""
        with closing(sqlite3.connect(self.data_dir.keyv_path, timeout=5.0)) as conn:
            row = conn.execute("SELECT value FROM keyv WHERE key = ?", (f"keyv:{key}",)).fetchone()
        if row is None:
            return None
        envelope = json.loads(row[0])
        expires = envelope.get("expires")
        if isinstance(expires, (int, float)) and self._clock() * 1000 > expires:
            return None
        return envelope.get("value")

    def _echo(self, request: RecordedRequest) -> Reply:
        return json_reply(
            200,
            {
                "method": request.method,
                "path": request.path,
                "query": request.raw_query,
                "headers": [list(h) for h in request.headers],
                "body_b64": base64.b64encode(request.body).decode("ascii"),
            },
        )

    def _stamp(self) -> str:
        return format_updated_at(int(self._clock() * 1000))

    # --- CronService (back/services/cron.ts) ---------------------------------------------

    def _status(self, payload: Any) -> Reply:
        callback = validate_status_payload(payload)
        with self._lock:
            failure = self._failures.pop(0) if self._failures else None
        if failure is not None:
            return json_reply(500, {"code": 400, "message": failure, "errors": []})
        if callback.ids is None:
            raise ServiceError("ids is not iterable")
        with self._status_writes, closing(connect(self.data_dir.database_path)) as conn:
            self._apply_status(conn, callback)
        return json_reply(200, {"code": 200})

    def _apply_status(self, conn: sqlite3.Connection, cb: StatusCallback) -> None:
        options, started = status_options(cb)
        log_path = cb.log_path if "log_path" in cb.present_keys else UNDEFINED
        now_s, stamp = int(self._clock()), self._stamp()
        for cron_id in cb.ids or ():
            cron = conn.execute("SELECT log_path FROM Crontabs WHERE id = ?", (cron_id,)).fetchone()
            if cron is None:
                continue  # unknown ids are skipped silently
            if cb.status == CrontabStatus.IDLE and log_path != cron["log_path"]:
                # The mismatch rule; `options` is reassigned and never restored for later ids.
                options = {k: v for k, v in options.items() if k not in ("status", "log_path", "pid")}
            if cb.status == CrontabStatus.RUNNING:
                open_instance(conn, cron_id, cb, started or now_s, stamp)
            elif cb.status == CrontabStatus.IDLE:
                close_instances(conn, cron_id, cb, now_s, stamp)
            fields = {k: v for k, v in options.items() if kept(v)}
            if fields:  # Sequelize skips an UPDATE that would only set updatedAt
                with immediate(conn):
                    assignments = ", ".join(f"`{k}` = ?" for k in fields)
                    conn.execute(
                        f"UPDATE Crontabs SET {assignments}, updatedAt = ? WHERE id = ?",
                        (*fields.values(), stamp, cron_id),
                    )

    def _run(self, payload: Any) -> Reply:
        ids = validate_id_array(payload)
        with closing(connect(self.data_dir.database_path)) as conn, immediate(conn):
            conn.executemany(
                "UPDATE Crontabs SET status = ?, updatedAt = ? WHERE id = ?",
                [(int(CrontabStatus.QUEUED), self._stamp(), i) for i in ids],
            )
        return json_reply(200, {"code": 200})

    def _stop(self, payload: Any) -> Reply:
        # No process is killed: on_kill's hook stands for each killTask, first of the cron's pid, then of what
        # killAllTasks(command) finds (here: the pids of the cron's running instances). pid is left alone
        # (`pid: undefined` is a no-op).
        ids = validate_id_array(payload)
        with closing(connect(self.data_dir.database_path)) as conn:
            for cron_id, pid in [(row["id"], row["pid"]) for row in conn.execute(
                    f"SELECT id, pid FROM Crontabs WHERE id IN ({', '.join('?' * len(ids))})", ids)]:
                killed = {pid} if pid else set()
                if pid:
                    self._kill(cron_id, pid)
                for (other,) in conn.execute("SELECT DISTINCT pid FROM RunningInstances WHERE cron_id = ? "
                                             "AND status = ? AND pid IS NOT NULL",
                                             (cron_id, int(InstanceStatus.RUNNING))).fetchall():
                    if other not in killed:
                        killed.add(other)
                        self._kill(cron_id, other)
            now_s, stamp = int(self._clock()), self._stamp()
            with immediate(conn):
                conn.executemany(
                    "UPDATE RunningInstances SET status = ?, finished_at = ?, "
                    "updatedAt = ? WHERE cron_id = ? AND status = ?",
                    [(int(InstanceStatus.STOPPED), now_s, stamp, i, int(InstanceStatus.RUNNING)) for i in ids],
                )
            with immediate(conn):
                conn.executemany(
                    "UPDATE Crontabs SET status = ?, updatedAt = ? WHERE id = ?",
                    [(int(CrontabStatus.IDLE), stamp, i) for i in ids],
                )
        self._before_stop_answer()
        return json_reply(200, {"code": 200})

    def _instance_stop_route(self, path: str) -> Callable[[Any], Reply] | None:
        """``POST /crons/:id/instances/:instanceId/stop``: celebrate's Joi.number() on both params, then
        stopInstance(instanceId) (``:id`` is never checked against the instance's cron)."""
        parts = path.lower().split("/")  # Express: ":param" is one non-empty segment
        if len(parts) != 7 or parts[0] or parts[1] not in ("api", "open") or parts[2] != "crons" \
                or parts[4] != "instances" or parts[6] != "stop" or not parts[3] or not parts[5]:
            return None
        return lambda _payload: self._stop_instance(joi_param_number("id", parts[3]),
                                                    joi_param_number("instanceId", parts[5]))

    def _stop_instance(self, _cron_id: float, instance_id: float) -> Reply:
        with closing(connect(self.data_dir.database_path)) as conn:
            row = next(iter(conn.execute("SELECT cron_id, pid FROM RunningInstances WHERE id = ? AND status = ?",
                                         (instance_id, int(InstanceStatus.RUNNING))).fetchall()), None)
            if row is None:
                return json_reply(200, {"code": 400, "message": self._t("实例不存在或已停止")})
            if row["pid"]:
                self._kill(row["cron_id"], row["pid"])
            stamp = self._stamp()
            with immediate(conn):
                conn.execute("UPDATE RunningInstances SET status = ?, finished_at = ?, exit_code = ?, updatedAt = ? "
                             "WHERE id = ?", (int(InstanceStatus.STOPPED), int(self._clock()), 143, stamp, instance_id))
            running = conn.execute("SELECT count(*) FROM RunningInstances WHERE cron_id = ? AND status = ?",
                                   (row["cron_id"], int(InstanceStatus.RUNNING))).fetchone()[0]
            if running == 0:
                with immediate(conn):
                    conn.execute("UPDATE Crontabs SET status = ?, updatedAt = ? WHERE id = ?",
                                 (int(CrontabStatus.IDLE), self._stamp(), row["cron_id"]))
        self._before_stop_answer()
        return json_reply(200, {"code": 200, "message": self._t("实例已停止")})

    def _before_stop_answer(self) -> None:
        if self._stop_answer_hook is not None:
            self._stop_answer_hook()

    # --- SystemService.updateLanguage (back/services/system.ts, PUT /system/config/lang) ------

    def _update_language(self, payload: Any) -> Reply:
        body = payload if isinstance(payload, dict) else {}
        for key in body:
            if key != "lang":
                raise joi_error([key], "is not allowed")
        lang = body.get("lang")
        if lang is not None and not isinstance(lang, str):
            raise joi_error(["lang"], "must be a string")
        lang = lang or "zh"  # the Auths row is not modelled: the double has no systemConfig to rewrite
        self._set_lang(lang)
        return json_reply(200, {"code": 200, "data": {"lang": lang}})

    def _record(self, payload: Any) -> Reply:
        body = payload if isinstance(payload, dict) else {}
        ref_id, code, elapsed = body.get("ref_id"), body.get("code"), body.get("elapsed")
        if not ref_id:
            return json_reply(200, {"code": 400, "message": "ref_id required"})
        try:
            elapsed_ms = float(elapsed or 0) * 1000
        except (TypeError, ValueError):
            return json_reply(200, {"code": 500})
        ok = 1 if code == 0 and not isinstance(code, bool) else 0
        day = datetime.fromtimestamp(self._clock(), self.data_dir.tz).strftime("%Y-%m-%d")
        stamp = self._stamp()
        with closing(connect(self.data_dir.database_path)) as conn, immediate(conn):
            conn.execute(
                "INSERT INTO CrontabStats (ref_id, date, run_count, success_count, fail_count, "
                "total_time, max_time, createdAt, updatedAt) VALUES (?, ?, 1, ?, ?, ?, ?, ?, ?) "
                "ON CONFLICT (ref_id, date) DO UPDATE SET run_count = run_count + 1, "
                "success_count = success_count + excluded.success_count, "
                "fail_count = fail_count + excluded.fail_count, "
                "total_time = total_time + excluded.total_time, "
                "max_time = MAX(max_time, excluded.max_time), updatedAt = excluded.updatedAt",
                (ref_id, day, ok, 1 - ok, elapsed_ms, elapsed_ms, stamp, stamp),
            )
        return json_reply(200, {"code": 200})
