"""docker/entrypoint.sh, run as the image runs it: with a stand-in ql-bridge on PATH that records its calls
(and, as `serve`, waits for SIGTERM), and once with the real ql-bridge and the Dockerfile's health check."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.deploy.files import ENTRYPOINT, dockerfile_instructions

WAIT_S = 15.0

FAKE_QL_BRIDGE = '''#!{python}
"""Stand-in for ql-bridge: one JSON line per event in $FAKE_LOG; as `serve`, waits for SIGTERM."""
import json, os, signal, sys, time

def record(event, **extra):
    with open(os.environ["FAKE_LOG"], "a") as log:
        log.write(json.dumps({{"event": event, "pid": os.getpid(), "argv": sys.argv[1:], **extra}}) + "\\n")

args = sys.argv[1:]
record("called")
if args == ["db", "upgrade"]:
    release = os.environ.get("FAKE_UPGRADE_RELEASE")
    if release:
        record("upgrade-waiting")
        while not os.path.exists(release):
            time.sleep(0.02)
    code = int(os.environ.get("FAKE_UPGRADE_EXIT", "0"))
    record("upgrade-done", code=code)
    sys.exit(code)
if args[:1] == ["serve"]:
    def stop(signum, frame):
        record("serve-got-sigterm")
        sys.exit(int(os.environ.get("FAKE_SERVE_EXIT", "0")))
    signal.signal(signal.SIGTERM, stop)
    record("serving")
    while True:
        signal.pause()
sys.exit(int(os.environ.get("FAKE_OTHER_EXIT", "0")))
'''

# How the script is started: through its shebang (/bin/sh, dash on Debian as in python:*-slim), and by
# bash in POSIX mode where bash exists, so the script does not lean on one shell's leniency.
SHELLS = [pytest.param([], id="shebang")]
if shutil.which("bash"):
    SHELLS.append(pytest.param(["bash", "--posix"], id="bash-posix"))


class Entrypoint:
    """Runs the entrypoint with the fake ql-bridge first on PATH, and reads what the fake recorded."""

    def __init__(self, tmp_path: Path, shell: list[str], script: Path = ENTRYPOINT) -> None:
        self.bin = tmp_path / "bin"
        self.bin.mkdir()
        fake = self.bin / "ql-bridge"
        fake.write_text(FAKE_QL_BRIDGE.format(python=sys.executable))
        fake.chmod(0o755)
        self.log = tmp_path / "calls.jsonl"
        self.shell, self.script = shell, script
        self.env = {**os.environ, "PATH": f"{self.bin}{os.pathsep}{os.environ.get('PATH', '')}",
                    "FAKE_LOG": str(self.log)}
        self.started: list[subprocess.Popen[str]] = []

    def start(self, *args: str, **env: str) -> subprocess.Popen[str]:
        proc = subprocess.Popen([*self.shell, str(self.script), *args], env={**self.env, **env}, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.started.append(proc)
        return proc

    def run(self, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
        proc = self.start(*args, **env)
        out, err = proc.communicate(timeout=WAIT_S)
        return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)

    def events(self) -> list[dict]:
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines()]

    def calls(self) -> list[list[str]]:
        return [event["argv"] for event in self.events() if event["event"] == "called"]

    def wait_for(self, name: str) -> dict:
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            found = [event for event in self.events() if event["event"] == name]
            if found:
                return found[0]
            time.sleep(0.02)
        raise AssertionError(f"no {name!r} event within {WAIT_S} s; events: {self.events()}")

    def stop_all(self) -> None:
        pids = {event["pid"] for event in self.events()} | {proc.pid for proc in self.started}
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for proc in self.started:
            proc.communicate(timeout=WAIT_S)


@pytest.fixture(params=SHELLS)
def entrypoint(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Entrypoint]:
    runner = Entrypoint(tmp_path, request.param)
    yield runner
    runner.stop_all()


def test_without_arguments_the_store_is_upgraded_and_then_serve_takes_over_the_process(entrypoint: Entrypoint):
    proc = entrypoint.start()
    serving = entrypoint.wait_for("serving")

    assert entrypoint.calls() == [["db", "upgrade"], ["serve"]]
    names = [event["event"] for event in entrypoint.events()]
    assert names.index("upgrade-done") < names.index("serving")
    assert serving["pid"] == proc.pid  # exec: the process Docker started IS the serving process


@pytest.mark.parametrize("serve_exit", [0, 7])
def test_sigterm_to_the_started_process_reaches_serve_and_the_exit_code_is_serves(entrypoint: Entrypoint,
                                                                                 serve_exit: int):
    proc = entrypoint.start("serve", FAKE_SERVE_EXIT=str(serve_exit))
    entrypoint.wait_for("serving")

    proc.send_signal(signal.SIGTERM)  # what `docker stop` does to the container's main process
    proc.communicate(timeout=WAIT_S)

    got = entrypoint.wait_for("serve-got-sigterm")
    assert got["pid"] == proc.pid
    assert proc.returncode == serve_exit


def test_serve_arguments_are_passed_through_unchanged(entrypoint: Entrypoint):
    args = ["--threads", "4", "two words", "*", "", "$HOME"]
    proc = entrypoint.start("serve", *args)
    entrypoint.wait_for("serving")
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=WAIT_S)

    assert entrypoint.calls() == [["db", "upgrade"], ["serve", *args]]


def test_a_failing_upgrade_exits_with_its_code_in_one_line_and_never_serves(entrypoint: Entrypoint):
    done = entrypoint.run(FAKE_UPGRADE_EXIT="3")

    assert done.returncode == 3
    assert entrypoint.calls() == [["db", "upgrade"]]
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "db upgrade" in lines[0] and "3" in lines[0] and "not starting serve" in lines[0]


@pytest.mark.parametrize("args", [["status"], ["doctor", "--json"], ["flags", "show"],
                                  ["db", "upgrade", "--revision", "0009"], ["--help"]])
def test_another_command_line_runs_alone_in_the_started_process_without_an_upgrade(entrypoint: Entrypoint,
                                                                                   args: list[str]):
    done = entrypoint.run(*args, FAKE_OTHER_EXIT="5", FAKE_UPGRADE_EXIT="5")

    assert entrypoint.calls() == [args]
    assert done.returncode == 5
    assert entrypoint.events()[0]["pid"] == entrypoint.started[-1].pid  # exec'd as well


@pytest.mark.parametrize(("args", "expected"), [
    (["ql-bridge", "status"], [["status"]]),
    (["ql-bridge", "serve", "--x"], [["db", "upgrade"], ["serve", "--x"]]),
])
def test_a_leading_ql_bridge_is_the_program_name_and_is_dropped(entrypoint: Entrypoint, args: list[str],
                                                                expected: list[list[str]]):
    proc = entrypoint.start(*args)
    if expected[-1][0] == "serve":
        entrypoint.wait_for("serving")
        proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=WAIT_S)

    assert entrypoint.calls() == expected


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)],
                         ids=["SIGTERM", "SIGINT"])
def test_a_stop_during_the_upgrade_lets_it_finish_and_never_serves(entrypoint: Entrypoint, tmp_path: Path,
                                                                 signum: int, code: int):
    release = tmp_path / "release"
    proc = entrypoint.start(FAKE_UPGRADE_RELEASE=str(release))
    entrypoint.wait_for("upgrade-waiting")

    proc.send_signal(signum)
    time.sleep(0.3)  # the shell holds the signal while the upgrade runs
    assert proc.poll() is None
    release.touch()
    _, err = proc.communicate(timeout=WAIT_S)

    assert entrypoint.wait_for("upgrade-done")["code"] == 0
    assert entrypoint.calls() == [["db", "upgrade"]]
    assert proc.returncode == code
    assert "not starting serve" in err


def test_the_pid_check_tells_a_missing_exec_apart(tmp_path: Path):
    without_exec = tmp_path / "entrypoint-without-exec.sh"
    text = ENTRYPOINT.read_text()
    assert 'exec ql-bridge serve "$@"' in text
    without_exec.write_text(text.replace('exec ql-bridge serve "$@"', 'ql-bridge serve "$@"'))
    runner = Entrypoint(tmp_path, ["sh"], script=without_exec)
    try:
        proc = runner.start()
        serving = runner.wait_for("serving")
        assert serving["pid"] != proc.pid
    finally:
        runner.stop_all()


# --- the real ql-bridge ------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def healthcheck_command() -> list[str]:
    (check,) = [item for item in dockerfile_instructions() if item.keyword == "HEALTHCHECK"]
    command = check.exec_form()
    assert command is not None and command[0] == "python"
    return [sys.executable, *command[1:]]


def test_the_real_bridge_upgrades_serves_passes_the_health_check_and_drains_on_sigterm(tmp_path: Path):
    program = Path(sys.executable).parent / "ql-bridge"
    assert program.exists(), "ql-bridge is installed beside this Python (pip install -e .)"
    port = free_port()
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("BRIDGE_")},
           "PATH": f"{program.parent}{os.pathsep}{os.environ.get('PATH', '')}",
           "BRIDGE_DATA_DIR": str(tmp_path / "store"), "BRIDGE_LISTEN": f"127.0.0.1:{port}",
           "BRIDGE_LEGACY_URL": f"http://127.0.0.1:{free_port()}", "BRIDGE_DRAIN_TIMEOUT_S": "2",
           "HTTP_PROXY": "http://127.0.0.1:9", "http_proxy": "http://127.0.0.1:9"}
    proc = subprocess.Popen([str(ENTRYPOINT)], env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while subprocess.run(healthcheck_command(), env=env, capture_output=True).returncode != 0:
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the health check never passed"
            time.sleep(0.2)
        cmdline = Path(f"/proc/{proc.pid}/cmdline").read_bytes().split(b"\0")
        assert b"serve" in cmdline and not any(part.endswith(b"entrypoint.sh") for part in cmdline)

        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()

    assert proc.returncode == 0, err
    assert "is at revision" in out  # `ql-bridge db upgrade` ran first
    assert (tmp_path / "store" / "bridge.sqlite").exists()
