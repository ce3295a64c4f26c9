"""The hostile suite: a real `bridge serve` in front of the 2.x test double, attacked over loopback.

Each fixture starts what an operator runs (the `bridge serve` command with the environment a deployment
sets), on both stores. Every attack is bounded in count and time so the suite fits in a few minutes of CI.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from bridge.cli.demo import CURL_HEADERS, bridge_process, free_port, read_log, serve_env
from bridge.storage.engine import make_engine
from bridge.storage.migrate import upgrade
from legacy_adapters.callbacks import render_status_body
from legacy_adapters.testing.datadir import LegacyDataDir, create_legacy_data_dir
from legacy_adapters.testing.double import Legacy2xDouble
from tests.bench.stores import fresh_store
from tests.conftest import SQL_BACKENDS


@dataclass
class Site:
    """A running bridge (``proc``) on ``port`` in front of ``double``, shadowing every origin."""

    url: str
    port: int
    data: LegacyDataDir
    double: Legacy2xDouble
    proc: object
    store_url: str
    store_schema: str | None
    cron: int
    _pid_counter: list[int] = field(default_factory=lambda: [40_000])

    def headers(self) -> dict[str, str]:
        return {**CURL_HEADERS, "Authorization": f"Bearer {self.data.system_token}"}

    def next_pid(self) -> int:
        self._pid_counter[0] += 1
        return self._pid_counter[0]

    def callback(self, client: httpx.Client, status: int, pid: int, begin_s: int) -> httpx.Response:
        # As v2.21's task shell sends them: the end with its duration and the script's exit code (0).
        end = (1, 0) if status == 1 else ()
        body = render_status_body(self.cron, status, pid, f"hostile_{pid}.log", begin_s, *end)
        return client.put("/open/crons/status?t=1", content=body, headers=self.headers())

    def log(self) -> str:
        return read_log(self.proc)  # type: ignore[arg-type]

    def store_engine(self):  # type: ignore[no-untyped-def]
        return make_engine(self.store_url, pg_search_path=self.store_schema)


def raw_request(port: int, payload: bytes, *, timeout_s: float = 10) -> bytes:
    """Send bytes on a fresh connection and read until the server closes it (or the timeout)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as sock:
        sock.sendall(payload)
        chunks = []
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                chunk = sock.recv(65536)
            except (TimeoutError, ConnectionResetError):
                break
            if not chunk:
                break
            chunks.append(chunk)
            if _complete(b"".join(chunks)):
                break
        return b"".join(chunks)


def _complete(reply: bytes) -> bool:
    head, sep, body = reply.partition(b"\r\n\r\n")
    if not sep:
        return False
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return len(body) >= int(value.strip())
    return False


def rss_kib(pid: int) -> tuple[int, int]:
    """(VmRSS, VmHWM) in KiB of one process and its children together."""
    total_rss = total_hwm = 0
    for p in [pid, *_children(pid)]:
        try:
            fields = dict(line.split(":", 1) for line in Path(f"/proc/{p}/status").read_text().splitlines())
        except (FileNotFoundError, ProcessLookupError):
            continue
        total_rss += int(fields["VmRSS"].split()[0])
        total_hwm += int(fields["VmHWM"].split()[0])
    return total_rss, total_hwm


def _children(pid: int) -> list[int]:
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            out += [int(c) for c in (task / "children").read_text().split()]
        except (FileNotFoundError, ProcessLookupError):
            continue
    return out


@pytest.fixture(params=SQL_BACKENDS)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, str | None]]:
    """(store URL, PostgreSQL schema or None), migrated to head."""
    backend = "sqlite" if request.param == "sqlite_backend" else "postgres"
    pg_url = request.getfixturevalue("postgres_url") if backend == "postgres" else ""
    with fresh_store(backend, tmp_path, pg_url, name="hostile") as created:
        yield created


PANEL_TOKEN = "panel-session-token"  # a logged-in panel's token, as 2.x keeps it in keyv's authInfo


def start_site(tmp_path: Path, store: tuple[str, str | None], double_options: dict[str, float] | None = None,
               **extra: str) -> Iterator[Site]:
    data = create_legacy_data_dir(tmp_path / "ql")
    cron = data.add_cron("hostile", "task hostile.sh", "0 * * * *")
    data.write_keyv("authInfo", {"username": "admin", "token": PANEL_TOKEN, "tokens": {"desktop": PANEL_TOKEN}})
    url, schema = store
    port = free_port()
    with Legacy2xDouble(data, **(double_options or {})).start() as double:
        env = serve_env(port, double.url, data.root, url, BRIDGE_DATA_DIR=str(tmp_path),
                        BRIDGE_SHADOW_BUDGET_MS="2000", **({"BRIDGE_DATABASE_SCHEMA": schema} if schema else {}),
                        **extra)
        env.pop("BRIDGE_WORKERS", None)
        with bridge_process(env, f"http://127.0.0.1:{port}") as proc:
            yield Site(f"http://127.0.0.1:{port}", port, data, double, proc, url, schema, cron)


@pytest.fixture
def site(tmp_path: Path, store: tuple[str, str | None]) -> Iterator[Site]:
    """A bridge with the default timeouts: an attack stays open for as long as the test holds it."""
    yield from start_site(tmp_path, store)


@pytest.fixture
def impatient_site(tmp_path: Path) -> Iterator[Site]:
    """A bridge on the SQLite default whose request and header timeouts are a few seconds."""
    url = f"sqlite:///{tmp_path / 'bridge.sqlite'}"
    engine = make_engine(url)
    upgrade(engine)
    engine.dispose()
    yield from start_site(tmp_path, (url, None), BRIDGE_REQUEST_TIMEOUT_S="3", BRIDGE_HEADERS_TIMEOUT_S="3")
