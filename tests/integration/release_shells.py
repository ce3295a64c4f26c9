"""A sandbox that runs a 2.x release's REAL task shell (its tag's shell/task.sh, unchanged:
tests/support/qinglong_source.py) the way 2.x's scheduler spawns it, and two recording HTTP listeners: one standing
for the bridge, one for 2.x.

Everything 2.x's shell touches lives under the test's tmp_path: `QL_DIR` (the tag's shell scripts and version.yaml,
copied), `QL_DATA_DIR` (config.sh, token.json, the scripts, the logs). Nothing here edits one of 2.x's files.
What cannot run here is replaced on PATH by a stand-in: `pnpm` (v2.19+ `init_env` and v2.21 `otask.sh` ask
`pnpm root -g` and would link its global modules into `$QL_DIR/node_modules`; the stand-in has none) and `node`
(only `create_token` would call it, and the sandbox's token.json is valid, so a call fails the run loudly).
The spawn is the crond line `real_time=false no_tee=true ID=<id> task <script>`
(docs/legacy-2x.md#boot-and-scheduling-before-v221): the task's output goes to its log file,
`$dir_log/<dir>_<id>/<time>.log`.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from legacy_adapters.releases import ReleaseProfile, profile_for
from legacy_adapters.seam_block import render_block
from tests.support.qinglong_source import install, stand_in

TOKEN = "sandbox-token"
CRON_ID = "12"
STATUS_PATH = "/open/crons/status"
ANSWER_200 = b'{"code":200,"data":[12]}'  # what 2.x's status handler answers (back/api/cron.ts)


@dataclass(frozen=True)
class Request:
    method: str
    path: str  # with its query
    headers: list[tuple[str, str]]
    body: bytes

    def header(self, name: str) -> str | None:
        return next((v for k, v in self.headers if k.lower() == name.lower()), None)


class Recorder:
    """An HTTP listener that records every request (raw body bytes, headers in order) and answers as 2.x does.

    ``hang_s``: accept and read the first request, then wait that long and close without answering (a hung
    bridge); later requests are answered. ``unanswered``: close every connection without an answer (a proxy in
    front of a bridge that is down).
    """

    def __init__(self, host: str = "127.0.0.1", port: int = 0, hang_s: float | None = None,
                 unanswered: bool = False) -> None:
        self.requests: list[Request] = []
        self.hang_s = hang_s
        self.unanswered = unanswered
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _any(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length)
                recorder.requests.append(Request(self.command, self.path, list(self.headers.items()), body))
                if recorder.unanswered or (recorder.hang_s is not None and len(recorder.requests) == 1):
                    time.sleep(recorder.hang_s or 0)
                    self.close_connection = True
                    return
                self.send_response(200)
                self.send_header("Content-Type", "application/json; charset=utf-8")
                self.send_header("Content-Length", str(len(ANSWER_200)))
                self.end_headers()
                self.wfile.write(ANSWER_200)

            do_PUT = do_POST = do_GET = _any  # noqa: N815 - the names http.server calls

            def log_message(self, *_: object) -> None:
                pass

        class Server(ThreadingHTTPServer):
            allow_reuse_address = True
            daemon_threads = True

        self._server = Server((host, port), Handler)
        self.port = int(self._server.server_address[1])
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        self._stopped = False

    def stop(self) -> None:
        """Close the listening socket: from now on connections are refused (a bridge that is down)."""
        if not self._stopped:
            self._stopped = True
            self._server.shutdown()
            self._server.server_close()
            self._thread.join()

    def status_calls(self) -> list[Request]:
        return [r for r in self.requests if r.path.split("?", 1)[0] == STATUS_PATH]


@contextmanager
def recording(host: str = "127.0.0.1", port: int = 0, hang_s: float | None = None,
              unanswered: bool = False) -> Iterator[Recorder]:
    recorder = Recorder(host, port, hang_s, unanswered)
    try:
        yield recorder
    finally:
        recorder.stop()


def refused_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class TaskRun:
    returncode: int
    stdout: str
    stderr: str
    pid: int
    log: bytes  # the task's log file
    log_path: str  # as the callbacks name it, relative to the log folder


@dataclass
class Sandbox:
    """One release's task shell, ready to run scripts, with or without the ql-bridge block in config.sh."""

    tag: str
    root: Path
    qlport: int | None = None  # v2.20+: where 2.x's backend listens, in the spawning environment
    extra_env: dict[str, str] = field(default_factory=dict)

    @property
    def profile(self) -> ReleaseProfile:
        return profile_for(self.tag, str(self.ql_dir / "version.yaml"))

    @property
    def ql_dir(self) -> Path:
        return self.root / "ql"

    @property
    def data_dir(self) -> Path:
        return self.root / "data"

    @property
    def config_sh(self) -> Path:
        return self.data_dir / "config" / "config.sh"

    def prepare(self) -> Sandbox:
        install(self.tag, self.ql_dir)
        for folder in ("config", "scripts", "log"):
            (self.data_dir / folder).mkdir(parents=True)
        self.config_sh.write_text("## 2.x's config.sh (sandbox)\nRandomDelay=\"\"\n")
        for hook in ("task_before.sh", "task_after.sh"):
            (self.data_dir / "config" / hook).write_text("#!/usr/bin/env bash\n")
        far = int(time.time()) + 365 * 86400
        (self.data_dir / "config" / "token.json").write_text(json.dumps({"value": TOKEN, "expiration": far}))
        bin_dir = self.root / "bin"
        stand_in(bin_dir / "pnpm", "exit 1")  # no global pnpm modules here
        stand_in(bin_dir / "node", 'echo "node stand-in: the sandbox must not need node ($*)" >&2; exit 97')
        (bin_dir / "python3").symlink_to(sys.executable)
        return self

    def install_block(self, bridge_port: int) -> None:
        text = self.config_sh.read_text()
        self.config_sh.write_text(text + render_block(
            bridge_port, datetime.now(UTC), resend_unanswered_starts=not self.profile.has_running_instances))

    def remove_block(self) -> None:
        from legacy_adapters.seam_block import without_block

        self.config_sh.write_text(without_block(self.config_sh.read_text()))

    def script(self, name: str, text: str) -> str:
        (self.data_dir / "scripts" / name).write_text(text)
        return name

    def environment(self) -> dict[str, str]:
        path = os.pathsep.join([str(self.root / "bin"), "/usr/local/bin", "/usr/bin", "/bin"])
        env = {"PATH": path, "HOME": str(self.root), "LANG": "C.UTF-8", "TZ": "UTC", "QL_DIR": str(self.ql_dir),
               "QL_DATA_DIR": str(self.data_dir), "real_time": "false", "no_tee": "true", "ID": CRON_ID}
        if self.qlport is not None:
            env["QlPort"] = str(self.qlport)
        return env | self.extra_env

    def start(self, *args: str) -> subprocess.Popen[str]:
        """Spawn `task <args>` as 2.x's scheduler does, in its own process group (what a stop signals)."""
        return subprocess.Popen(["bash", str(self.ql_dir / "shell" / "task.sh"), *args], env=self.environment(),
                                cwd=self.root, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                start_new_session=True)

    def finish(self, process: subprocess.Popen[str], timeout_s: float = 20) -> TaskRun:
        out, err = process.communicate(timeout=timeout_s)
        logs = sorted((self.data_dir / "log").glob("*/*.log"), key=lambda p: p.stat().st_mtime_ns)
        log = logs[-1] if logs else None
        return TaskRun(process.returncode, out, err, process.pid, log.read_bytes() if log else b"",
                       str(log.relative_to(self.data_dir / "log")) if log else "")

    def run(self, *args: str, timeout_s: float = 20) -> TaskRun:
        return self.finish(self.start(*args), timeout_s)

    def clear_logs(self) -> None:
        for log in (self.data_dir / "log").glob("*/*.log"):
            log.unlink()

    def stop(self, process: subprocess.Popen[str]) -> None:
        """What 2.x's stop does to a running task: SIGTERM to the shell and its descendants."""
        os.killpg(process.pid, signal.SIGTERM)


def wait_until(condition, timeout_s: float = 10.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting")
        time.sleep(0.01)
