"""``OlderLegacy2xDouble``: a QingLong v2.17–v2.20 backend TEST DOUBLE, its rules chosen by a ReleaseProfile.

The v2.21.0 double (legacy_adapters.testing.double) with the older backend's run-state rules in its place
(docs/legacy-2x.md#older-releases), each ported from 2.x's code at the tag named beside it:

- no ``RunningInstances``, no ``CrontabStats`` (dropped from the data dir) and no ``/dashboard/record`` route,
  which Express then answers with finalhandler's 404 page (``back/data/``, ``back/api/`` at v2.20.2);
- ``PUT /crons/status``: the Joi schema without ``exit_code`` (a body carrying it is a 400
  ``"exit_code" is not allowed``), the route's parseInt, and ``status()`` writing only ``Crontabs``: a pid of
  ``''`` (NaN) is never written, status 1 with a bad pid is a 200, an unknown id is skipped from v2.17.7 and a 500
  before (``back/api/cron.ts``, ``back/services/cron.ts`` at v2.17.6, v2.17.7, v2.20.2);
- ``PUT /crons/run``: queued (0.5), then ``runSingle`` spawns the child: running with its pid and log path;
  ``child_exited`` is its exit handler: idle whatever the log path (``back/services/cron.ts`` at v2.20.2);
- ``PUT /crons/stop``: ``killTask(doc.pid)`` (not v2.20.0), ``killAllTasks(command)`` (v2.20.0+), then every row
  idle (``back/services/cron.ts`` at v2.19.2, v2.20.0, v2.20.1);
- ``simulate_run_cron``: runCron's single-instance kill (v2.20, ``back/shared/runCron.ts`` at v2.20.2);
  ``simulate_boot_reset``: every row idle (``back/loaders/initData.ts``);
- v2.17 has no keyv cache and no i18n: an ``/open/*`` token is looked up in the ``Apps`` table
  (``OpenService.findTokenByValue``), then ``config/auth.json``; every refusal is express-jwt's English message
  (``back/loaders/express.ts``, ``back/services/open.ts`` at v2.17.13).

No process is killed: ``on_kill``'s hook stands for each signal, as in the v2.21.0 double. What ``killAllTasks``
finds by command line is modelled by the shells the double has heard of and not yet heard end (``live_pids``).
"""

from __future__ import annotations

import itertools
import json
import math
import re
import sqlite3
from contextlib import closing
from datetime import datetime
from typing import Any

from legacy_adapters.callbacks import STATUS_KEYS, joi_error, validate_id_array, validate_status_payload
from legacy_adapters.releases import ReleaseProfile
from legacy_adapters.schema import CrontabStatus
from legacy_adapters.testing.datadir import LegacyDataDir, connect, immediate, uniq_path
from legacy_adapters.testing.double import API_WHITE_LIST, Legacy2xDouble
from legacy_adapters.testing.express_rules import (
    Reply,
    ServiceError,
    get_platform,
    get_token,
    is_valid_token,
    json_reply,
    kept,
    status_options,
)

OLDER_STATUS_KEYS = tuple(key for key in STATUS_KEYS if key != "exit_code")  # back/api/cron.ts@v2.20.2
FIRST_CHILD_PID = 30_000


class OlderLegacy2xDouble(Legacy2xDouble):
    """A v2.17–v2.20 2.x test double: ``release`` says which rules it follows."""

    def __init__(self, data_dir: LegacyDataDir, release: ReleaseProfile, **kwargs: Any) -> None:
        if release.has_running_instances:
            raise ValueError(f"{release.name} is the v2.21 double's (legacy_adapters.testing.double)")
        super().__init__(data_dir, **kwargs)
        self.release = release
        with closing(connect(data_dir.database_path)) as conn:
            conn.execute("DROP TABLE IF EXISTS RunningInstances")
            conn.execute("DROP TABLE IF EXISTS CrontabStats")
        for prefix in ("/api", "/open"):
            self._routes.pop(("POST", f"{prefix}/dashboard/record"), None)
        self._live: dict[int, set[int]] = {}  # cron id -> shells started and not heard to end
        self._children: dict[int, int] = {}  # runSingle's child pid -> cron id
        self._pids = itertools.count(FIRST_CHILD_PID)

    # --- routes --------------------------------------------------------------------------------------------

    def handle(self, request: Any) -> Reply:
        if request.method == "POST" and request.path.lower().rstrip("/").endswith("/dashboard/record"):
            with self._lock:
                self._requests.append(request)
            denied = self._authenticate(request)  # the token middleware runs before any route
            return denied or _express_not_found(request.method, request.path, request.raw_query)
        return super().handle(request)

    # --- v2.17's token middleware: no keyv cache, no i18n (back/loaders/express.ts at v2.17.13) ---------------

    def _authenticate_open(self, request: Any) -> Reply | None:
        if self.release.keeps_keyv_cache:
            return super()._authenticate_open(request)
        token = get_token(request.header("authorization"))
        owner = next((app for app in self._apps() if any(t.get("value") == token for t in app["tokens"])), None)
        if owner is not None:
            current = next(t for t in owner["tokens"] if t.get("value") == token)
            match = re.search(r"/open/([a-z]+)/*", request.path)
            expiration = current.get("expiration")
            if match and match.group(1) in owner["scopes"] and isinstance(expiration, int | float) \
                    and expiration >= math.floor(self._clock() + 0.5):  # Math.round(Date.now() / 1000)
                return None
        if not token and request.path in API_WHITE_LIST:
            return None
        if is_valid_token(self._auth_file(), token, get_platform(request.header("user-agent") or "")):
            return None
        return json_reply(401, {"code": 401,
                                "message": "jwt malformed" if token else "No authorization token was found"})

    def _set_lang(self, lang: str | None) -> None:
        if self.release.keeps_keyv_cache:
            super()._set_lang(lang)
        else:  # v2.17 translates nothing and stores no language
            self._current_lang = lang or "zh"

    def _apps(self) -> list[dict[str, Any]]:
        """OpenService.find({}): the Apps rows, their JSON columns parsed (bad JSON reads as none)."""
        with closing(connect(self.data_dir.database_path)) as conn:
            rows = conn.execute("SELECT scopes, tokens FROM Apps").fetchall()
        apps = []
        for row in rows:
            scopes, tokens = (_json_list(row["scopes"]), _json_list(row["tokens"]))
            apps.append({"scopes": scopes, "tokens": [t for t in tokens if isinstance(t, dict)]})
        return apps

    def _auth_file(self) -> Any:
        """``config/auth.json`` (config.authConfigFile), None when absent or not JSON."""
        try:
            return json.loads((self.data_dir.root / "config" / "auth.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None

    def _status(self, payload: Any) -> Reply:
        if isinstance(payload, dict):
            # Joi: the schema's keys first, then the first key it does not know.
            unknown = next((key for key in payload if key not in OLDER_STATUS_KEYS), None)
            callback = validate_status_payload({k: v for k, v in payload.items() if k in OLDER_STATUS_KEYS})
            if unknown is not None:
                raise joi_error([unknown], "is not allowed")
        else:
            callback = validate_status_payload(payload)
        if callback.ids is None:
            raise ServiceError("ids is not iterable")
        with self._status_writes, closing(connect(self.data_dir.database_path)) as conn:
            self._apply_older_status(conn, callback)
        return json_reply(200, {"code": 200})  # res.send({code: 200, data: undefined})

    def _apply_older_status(self, conn: sqlite3.Connection, cb: Any) -> None:
        """CronService.status, back/services/cron.ts@v2.20.2 (the same from v2.17.7; v2.17.6 throws on an
        unknown id)."""
        options, _ = status_options(cb)
        for cron_id in cb.ids:
            row = conn.execute("SELECT log_path FROM Crontabs WHERE id = ?", (cron_id,)).fetchone()
            if row is None:
                if not self.release.status_skips_unknown_ids:
                    raise ServiceError(f"Cannot read properties of null (reading 'log_path') [{cron_id}]")
                continue
            if cb.status == CrontabStatus.IDLE and cb.log_path != row["log_path"]:
                options = {k: v for k, v in options.items() if k not in ("status", "log_path", "pid")}
            self._hear(int(cron_id), cb.status, cb.pid)
            fields = {k: v for k, v in options.items() if kept(v)}
            if fields:
                with immediate(conn):
                    sets = ", ".join(f"`{k}` = ?" for k in fields)
                    conn.execute(f"UPDATE Crontabs SET {sets}, updatedAt = ? WHERE id = ?",
                                 (*fields.values(), self._stamp(), cron_id))

    def _hear(self, cron_id: int, status: int | None, pid: int | None) -> None:
        """The shells the double knows alive, for killAllTasks: a start adds its pid, an end removes it."""
        if pid is None:
            return
        with self._lock:
            if status == CrontabStatus.RUNNING:
                self._live.setdefault(cron_id, set()).add(pid)
            elif status == CrontabStatus.IDLE:
                self._live.get(cron_id, set()).discard(pid)

    def _run(self, payload: Any) -> Reply:
        """CronService.run: queued, then runSingle for each id (back/services/cron.ts@v2.20.2)."""
        ids = validate_id_array(payload)
        self._set_status(ids, self.release.queued_status)
        for cron_id in ids:
            self._run_single(int(cron_id))
        return json_reply(200, {"code": 200})

    def _run_single(self, cron_id: int) -> None:
        """runSingle: skipped unless still queued; spawns the child, then running with its pid and log path."""
        with closing(connect(self.data_dir.database_path)) as conn:
            row = conn.execute("SELECT * FROM Crontabs WHERE id = ?", (cron_id,)).fetchone()
            if row is None or row["status"] != self.release.queued_status:
                return
            pid = next(self._pids)
            stamp = datetime.fromtimestamp(self._clock(), self.data_dir.tz).strftime("%Y-%m-%d-%H-%M-%S-%f")[:-3]
            # v2.20 names the folder log_name when set; before, the column does not exist and it is the uniq path
            # (back/services/cron.ts at v2.19.2, v2.20.2)
            log_name = row["log_name"] if "log_name" in row.keys() else None
            log_path = f"{log_name or uniq_path(row['command'], cron_id)}/{stamp}.log"
            with immediate(conn):
                conn.execute("UPDATE Crontabs SET status = ?, pid = ?, log_path = ?, updatedAt = ? WHERE id = ?",
                             (int(CrontabStatus.RUNNING), pid, log_path, self._stamp(), cron_id))
        with self._lock:
            self._children[pid] = cron_id
            self._live.setdefault(cron_id, set()).add(pid)

    def spawned(self, cron_id: int) -> tuple[int, str]:
        """The pid and log path runSingle gave ``cron_id``'s newest child (what its task shell calls back with)."""
        row = self.data_dir.cron_row(cron_id)
        assert row is not None and row["pid"] in self._children, "runSingle spawned no child for this cron"
        return int(row["pid"]), str(row["log_path"])

    def child_exited(self, pid: int) -> None:
        """runSingle's ``cp.on('exit')`` (v2.17.0–v2.20.2): the cron idle whatever its log path; pid undefined."""
        with self._lock:
            cron_id = self._children.pop(pid)
            self._live.get(cron_id, set()).discard(pid)
        self._set_status([cron_id], CrontabStatus.IDLE)

    def _stop(self, payload: Any) -> Reply:
        """CronService.stop as the release has it, then every given row idle, pid undefined (left as it was)."""
        ids = validate_id_array(payload)
        with closing(connect(self.data_dir.database_path)) as conn:
            docs = [(int(r["id"]), r["pid"]) for r in conn.execute(
                f"SELECT id, pid FROM Crontabs WHERE id IN ({', '.join('?' * len(ids))})", ids).fetchall()]
        for cron_id, pid in docs:
            killed: set[int] = set()
            if pid and self.release.stop_kills_row_pid:
                killed.add(pid)
                self._kill(cron_id, pid)
            if self.release.stop_kills_every_instance:  # killAllTasks(command): every shell of the cron
                for other in sorted(self.live_pids(cron_id) - killed):
                    self._kill(cron_id, other)
        self._set_status(ids, CrontabStatus.IDLE)
        self._before_stop_answer()
        return json_reply(200, {"code": 200})

    def live_pids(self, cron_id: int) -> set[int]:
        with self._lock:
            return set(self._live.get(cron_id, ()))

    # --- what Node does without a request ---------------------------------------------------------------------

    def simulate_run_cron(self, cron_id: int) -> bool:
        """runCron before it spawns (back/shared/runCron.ts@v2.20.2): a single-instance cron (v2.20) running or
        queued with a pid has that pid killed and is set idle. True if it did; never before v2.20."""
        if not self.release.kills_single_instance:
            return False
        cron = self.data_dir.cron_row(cron_id)
        if cron is None or cron["allow_multiple_instances"] != 0 or not cron["pid"] \
                or cron["status"] not in (CrontabStatus.RUNNING, self.release.queued_status):
            return False
        self._kill(cron_id, cron["pid"])
        self._set_status([cron_id], CrontabStatus.IDLE)
        return True

    def simulate_boot_reset(self) -> None:
        """initData at start: every cron idle, nothing else (back/loaders/initData.ts@v2.20.2)."""
        with closing(connect(self.data_dir.database_path)) as conn, immediate(conn):
            conn.execute("UPDATE Crontabs SET status = ?, updatedAt = ?", (int(CrontabStatus.IDLE), self._stamp()))

    def simulate_run_single(self, cron_id: int, pid: int, log_path: str) -> bool:
        raise NotImplementedError("PUT /crons/run runs runSingle on this double; see spawned() and child_exited()")

    def _set_status(self, ids: Any, status: float) -> None:
        with closing(connect(self.data_dir.database_path)) as conn, immediate(conn):
            conn.executemany("UPDATE Crontabs SET status = ?, updatedAt = ? WHERE id = ?",
                             [(status, self._stamp(), i) for i in ids])


def _json_list(text: Any) -> list[Any]:
    try:
        value = json.loads(text) if isinstance(text, str) else None
    except ValueError:
        return []
    return value if isinstance(value, list) else []


def _express_not_found(method: str, path: str, query: str) -> Reply:
    """finalhandler's 404 for a route nobody serves (express 4): an HTML page naming the original URL."""
    url = path + (f"?{query}" if query else "")
    page = ("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>Error</title>\n</head>\n"
            f"<body>\n<pre>Cannot {method} {_escape(url)}</pre>\n</body>\n</html>\n")
    return Reply(404, page.encode("utf-8"), "text/html; charset=utf-8")


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;") \
        .replace("'", "&#39;")

