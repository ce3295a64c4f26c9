"""A 2.x install of a given release for doctor tests: its install directory (the tag's own version.yaml), its data
directory (the test double's, shaped to the release's tables), a process that looks like its backend to /proc,
the tag's own shell functions to name a log, and a double of a pre-v2.19 backend's HTTP answers. The tag's files
come from 2.x's source at test time (tests/support/qinglong_source.py)."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Iterator, Mapping
from contextlib import closing, contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from legacy_adapters.testing.datadir import LegacyDataDir, create_legacy_data_dir
from tests.support.qinglong_source import release_dir

# What 2.x's shells name a log and send as its begin, by the tag's own functions: format_params, handle_log_path's
# clock reading, format_log_time and init_begin_time (task.sh, share.sh). Prints "<log time> <begin unix s>".
_LOG_NAME_SH = r"""
is_macos=0
eval "$(sed -n '/^format_params()/,/^}/p;/^init_begin_time()/,/^}/p' "$1/task.sh")"
eval "$(sed -n '/^format_time()/,/^}/p;/^format_log_time()/,/^}/p;/^format_timestamp()/,/^}/p' "$1/share.sh")"
format_params
eval "$(grep -m1 'time=$(date' "$1/task.sh")"
log_time=$(format_log_time "$mtime_format" "$time")
init_begin_time
echo "$log_time $begin_timestamp"
"""


@dataclass(frozen=True)
class Install:
    root: Path  # QL_DIR: version.yaml, .env, static/build/app.js
    data: LegacyDataDir  # <root>/data


def make_install(where: Path, tag: str, *, version: str | None = None) -> Install:
    """``where`` laid out as 2.x's image lays /ql out at ``tag``; ``version`` overrides version.yaml's version.
    Before v2.21 the database has no RunningInstances or CrontabStats (docs/legacy-2x.md#status-handler-before-v221)."""
    text = (release_dir(tag) / "version.yaml").read_text(encoding="utf-8")
    where.mkdir(parents=True)
    if version is not None:
        text = "\n".join(f"version: {version}" if line.startswith("version:") else line for line in text.splitlines())
    (where / "version.yaml").write_text(text, encoding="utf-8")
    data = create_legacy_data_dir(where / "data")
    if tag != "v2.21.0":
        with closing(sqlite3.connect(data.database_path)) as conn:
            conn.executescript("DROP TABLE IF EXISTS RunningInstances; DROP TABLE IF EXISTS CrontabStats;")
    return Install(where, data)


def shell_log_name(tag: str, zone: str) -> tuple[str, int]:
    """(log file name, begin unix s) as ``tag``'s task.sh computes them now in ``zone``."""
    out = subprocess.run(["bash", "-c", _LOG_NAME_SH, "log-name", str(release_dir(tag) / "shell")],
                         env={"PATH": os.environ["PATH"], "TZ": zone}, capture_output=True, text=True, check=True)
    log_time, begin = out.stdout.split()
    return f"{log_time}.log", int(begin)


@contextmanager
def backend_process(script: str, environ: Mapping[str, str], cwd: Path) -> Iterator[int]:
    """A process /proc shows as 2.x's backend (`node <script>`, pm2's way), with ``environ`` and ``cwd``; its pid."""
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", script],
                               env={**environ, "PATH": os.environ["PATH"]}, cwd=cwd)
    try:
        yield process.pid
    finally:
        process.kill()
        process.wait()


class PreV219BackendDouble:
    """A double of the HTTP answers of a v2.17/v2.18 backend (`app.js` on BACK_PORT) to the requests the doctor
    sends: `GET /api/system` is in config.apiWhiteList and answers 200 with the version (back/api/system.ts);
    any other `/api/` path without a token is refused by expressjwt, 401 `{"code":401,"message":...}`
    (back/loaders/express.ts at v2.18.3). `/api/health` is not the backend's there: public.js serves it."""

    def __init__(self, version: str) -> None:
        double = self
        self.paths: list[str] = []

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                double.paths.append(self.path)
                if self.path == "/api/system":
                    self._send(200, {"code": 200, "data": {"isInitialized": True, "version": version}})
                else:
                    self._send(401, {"code": 401, "message": "No authorization token was found"})

            def _send(self, status: int, body: object) -> None:
                raw = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json; charset=utf-8")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def log_message(self, *_args: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self._server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> PreV219BackendDouble:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()


def run_doctor(tmp_path: Path, install: Install, legacy_url: str, **env: str) -> subprocess.CompletedProcess[str]:
    """`ql-bridge doctor` in a subprocess, on a migrated store, in front of ``install``."""
    from bridge.cli.demo import migrated

    store = tmp_path / "bridge.sqlite"
    url = f"sqlite:///{store}" if store.exists() else migrated(f"sqlite:///{store}")
    base = {k: v for k, v in os.environ.items() if not k.startswith("BRIDGE_")}
    base |= {"BRIDGE_DATABASE_URL": url, "BRIDGE_DATA_DIR": str(tmp_path),
             "BRIDGE_LEGACY_DATA_DIR": str(install.data.root), "BRIDGE_LEGACY_URL": legacy_url,
             "BRIDGE_LISTEN": "0.0.0.0:5701", "BRIDGE_LEGACY_TZ": "UTC"}
    return subprocess.run([sys.executable, "-m", "bridge.cli", "doctor"], env=base | env, capture_output=True,
                          text=True, timeout=60)


def line_of(result: subprocess.CompletedProcess[str], name: str) -> str:
    [line] = [line for line in result.stdout.splitlines() if line[6:].startswith(f"{name}:")]
    return line
