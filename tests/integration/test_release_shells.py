"""The seam block in each release's REAL task shell (its tag's shell/, unchanged: tests/support/qinglong_source.py),
run as 2.x's scheduler spawns it (release_shells.py), with two recording listeners: the bridge, and 2.x at the
address that release's shell calls (the literal 0.0.0.0:5600 up to v2.19, `QlPort` from v2.20;
docs/legacy-2x.md#callback-target-before-v221). Per release it proves: the bridge gets start and end with 2.x's
own body bytes and headers, plus the exit code where the shell knows it and the trap where it sent the end;
2.x gets nothing while the bridge answers; 2.x gets every callback the bridge could not, byte for byte as
without the block (bridge down from the start, bridge stopped mid-task); a bridge that accepts and never
answers is not failed over; the task's log is the same with and without the block.
"""

from __future__ import annotations

import json
import re
import shutil
import time
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import pytest

from legacy_adapters.releases import profile_for
from legacy_adapters.shell_report import EXIT_CODE_HEADER, TRAPPED_HEADER
from tests.integration.release_shells import Recorder, Request, Sandbox, TaskRun, recording, refused_port, wait_until

pytestmark = pytest.mark.skipif(not all(shutil.which(tool) for tool in ("bash", "curl", "jq")),
                                reason="2.x's task shells need bash, curl and jq")

TAGS = ["v2.17.13", "v2.18.1", "v2.18.3", "v2.19.2", "v2.20.2", "v2.21.0"]
EXIT_3 = "import sys\nprint('the script ran')\nsys.exit(3)\n"
EXIT_0 = "print('the script ran')\n"
# A sourced .sh whose last command fails: its status is 1. It prints what it sees, which the block must not change.
LAST_FAILS = 'echo "sees $# argument(s): $*"\necho "function frames: ${#FUNCNAME[@]}"\nfalse\n'
SH_EXIT_3 = "echo 'about to exit'\nexit 3\n"


@dataclass
class Release:
    sandbox: Sandbox
    legacy: Recorder  # 2.x, where this release's shells call
    bridge: Recorder

    def waiting_script(self, name: str = "wait.py") -> tuple[str, Path]:
        flag = self.sandbox.root / f"{name}.go"
        text = f"import os, time\nwhile not os.path.exists({str(flag)!r}):\n    time.sleep(0.01)\nprint('went on')\n"
        return self.sandbox.script(name, text), flag


@pytest.fixture(params=TAGS)
def release(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Release]:
    profile = profile_for(request.param, "test")
    with ExitStack() as stack:
        if profile.fixed_callback_port is not None:  # to v2.19: the literal http://0.0.0.0:5600, whatever QlPort says
            legacy = stack.enter_context(recording("0.0.0.0", profile.fixed_callback_port))
            qlport = None
        else:
            legacy = stack.enter_context(recording())
            qlport = legacy.port
        bridge = stack.enter_context(recording())
        yield Release(Sandbox(request.param, tmp_path, qlport).prepare(), legacy, bridge)


def shape(body: bytes, run: TaskRun) -> bytes:
    """The body with what differs between two runs (pid, log path, times) named instead of given."""
    text = body.replace(run.log_path.encode(), b"<log>").replace(f'"pid":"{run.pid}"'.encode(), b'"pid":"<pid>"')
    return re.sub(rb'"(last_execution_time|last_running_time)":\d+', rb'"\1":<n>', text)


def log_shape(log: bytes) -> bytes:
    log = re.sub(rb"function frames: \d+", b"function frames: <n>", log)
    text = re.sub(rb"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}", b"<time>", log)
    return re.sub("耗时 \\d+ 秒".encode(), "耗时 <n> 秒".encode(), text)


def twos_headers(request: Request, *, keep_host: bool = False) -> list[tuple[str, str]]:
    """What 2.x's curl sent, in order: without the seam's own headers, Content-Length (the body is compared
    itself: its pid and times differ between runs) and Host (which names the listener) unless ``keep_host``."""
    return [(k, v) for k, v in request.headers if not k.lower().startswith("x-ql-bridge-")
            and k.lower() != "content-length" and (keep_host or k.lower() != "host")]


def seam_headers(request: Request) -> dict[str, str]:
    return {k: v for k, v in request.headers if k.lower().startswith("x-ql-bridge-")}


def test_the_bridge_gets_2xs_callbacks_with_the_exit_code_and_2x_gets_nothing_while_it_answers(
        release: Release) -> None:
    sandbox, legacy, bridge = release.sandbox, release.legacy, release.bridge
    exit_3, last_fails = sandbox.script("exit3.py", EXIT_3), sandbox.script("last_fails.sh", LAST_FAILS)
    without = {name: sandbox.run(name) for name in (exit_3, last_fails)}
    twos_own = legacy.status_calls()
    assert len(twos_own) == 4, [r.body for r in twos_own]  # start and end of each, without the block
    legacy.requests.clear()

    sandbox.install_block(bridge.port)
    runs = {name: sandbox.run(name) for name in (exit_3, sandbox.script("exit0.py", EXIT_0), last_fails)}
    sh_exit = sandbox.run(sandbox.script("sh_exit3.sh", SH_EXIT_3))

    assert legacy.status_calls() == []  # 2.x received nothing: the bridge answered every callback
    got = bridge.status_calls()
    assert len(got) == 7  # start and end of three runs, and only the start of the .sh that calls `exit 3`
    for (name, run), (start, end) in zip(runs.items(), [got[0:2], got[2:4], got[4:6]], strict=True):
        assert json.loads(start.body)["pid"] == str(run.pid) and json.loads(start.body)["log_path"] == run.log_path
        assert json.loads(end.body)["status"] == "1" and json.loads(start.body)["status"] == "0"
        assert start.method == end.method == "PUT"
        assert seam_headers(start) == {}  # a start carries nothing of the seam's
        if name in without:  # 2.x's exact bytes and headers, as 2.x got them from the same script without the block
            reference = twos_own[0:2] if name == exit_3 else twos_own[2:4]
            assert [shape(r.body, run) for r in (start, end)] == [shape(r.body, without[name]) for r in reference]
            assert [twos_headers(r) for r in (start, end)] == [twos_headers(r) for r in reference]
            assert log_shape(run.log) == log_shape(without[name].log)  # the task's own log: unchanged
    # A sourced .sh sees what it saw without the block, but one more function frame (the wrapped `main`).
    with_frames, without_frames = (int(re.search(rb"function frames: (\d+)", r.log)[1])  # type: ignore[index]
                                   for r in (runs[last_fails], without[last_fails]))
    assert with_frames == without_frames + 1
    ends = [seam_headers(got[i]) for i in (1, 3, 5)]
    assert ends == [{EXIT_CODE_HEADER: "3"}, {EXIT_CODE_HEADER: "0"}, {EXIT_CODE_HEADER: "1"}]
    assert b"sees 1 argument(s): last_fails.sh" in runs[last_fails].log  # run_normal's own positional parameters
    assert sh_exit.returncode == 3 and json.loads(got[6].body)["status"] == "0"  # `exit 3` ended it: no end at all


def test_a_stopped_task_reports_its_trap_to_the_bridge(release: Release) -> None:
    sandbox, bridge = release.sandbox, release.bridge
    sandbox.install_block(bridge.port)
    script, _ = release.waiting_script()

    process = sandbox.start(script)
    wait_until(lambda: len(bridge.status_calls()) == 1)
    sandbox.stop(process)  # SIGTERM to the shell and its script, as 2.x's stop sends
    run = sandbox.finish(process)

    start, end = bridge.status_calls()
    assert run.returncode == 1  # the trap's `exit 1`
    assert json.loads(end.body)["status"] == "1" and json.loads(end.body)["pid"] in (str(run.pid), "''")
    # The script was killed mid-run: the trap ran before `main` returned, so no status is known to the block.
    assert seam_headers(end) == {TRAPPED_HEADER: "1"} and seam_headers(start) == {}
    assert release.legacy.status_calls() == []


def test_2x_gets_every_callback_the_bridge_did_not_byte_for_byte(release: Release) -> None:
    sandbox, legacy, bridge = release.sandbox, release.legacy, release.bridge
    exit_3 = sandbox.script("exit3.py", EXIT_3)
    without = sandbox.run(exit_3)
    reference = legacy.status_calls()
    legacy.requests.clear()

    sandbox.install_block(refused_port())  # the bridge down from the start
    down = sandbox.run(exit_3)
    failed_over = legacy.status_calls()
    legacy.requests.clear()

    sandbox.remove_block()
    sandbox.install_block(bridge.port)
    script, flag = release.waiting_script()
    process = sandbox.start(script)
    wait_until(lambda: len(bridge.status_calls()) == 1)
    bridge.stop()  # the bridge stops mid-task: after the start callback, before the end
    flag.touch()
    mid = sandbox.finish(process)

    assert len(reference) == 2 and len(failed_over) == 2
    assert [shape(r.body, down) for r in failed_over] == [shape(r.body, without) for r in reference]
    assert [twos_headers(r, keep_host=True) for r in failed_over] == \
        [twos_headers(r, keep_host=True) for r in reference]  # the very same call: URL, headers and all
    assert [r.path.split("?")[0] for r in failed_over] == [r.path.split("?")[0] for r in reference]
    assert log_shape(down.log) == log_shape(without.log)
    assert mid.returncode == 0
    assert [json.loads(r.body)["status"] for r in bridge.status_calls()] == ["0"]
    (end,) = legacy.status_calls()  # 2.x got the end the bridge could not take
    assert json.loads(end.body)["status"] == "1" and json.loads(end.body)["log_path"] == mid.log_path
    assert twos_headers(end, keep_host=True) == twos_headers(reference[1], keep_host=True)


def test_a_bridge_that_takes_a_start_and_never_answers_it_gets_it_sent_again_only_where_that_changes_nothing(
        release: Release, tmp_path: Path) -> None:
    """The connect succeeded, so the bridge may have forwarded the start: it goes to 2.x again only where a second
    start writes nothing new (before v2.21: the same Crontabs values); on v2.21 it would add an instance row. (The
    bridge answers every callback within its own upstream budget; this hang, of the start callback, is longer
    than the block's connect timeout, and ends with the connection closed unanswered.)"""
    sandbox, legacy = release.sandbox, release.legacy
    with recording(hang_s=1.3) as hung:
        sandbox.install_block(hung.port)
        started = time.monotonic()
        run = sandbox.run(sandbox.script("exit0.py", EXIT_0))
        elapsed = time.monotonic() - started

    assert run.returncode == 0 and elapsed >= 1.3  # the start callback waited for the hung bridge
    assert [json.loads(r.body)["status"] for r in hung.status_calls()] == ["0", "1"]
    again = [] if sandbox.profile.has_running_instances else ["0"]
    assert [json.loads(r.body)["status"] for r in legacy.status_calls()] == again


def test_behind_a_proxy_that_answers_nothing_2x_gets_every_end_and_every_start_it_can_take_twice(
        release: Release) -> None:
    """A bridge that is down behind something that takes the connection (socat, docker-proxy) gives curl an
    empty reply, not a refused connect: the ends still reach 2.x, and the starts wherever a second one is
    harmless (before v2.21)."""
    sandbox, legacy = release.sandbox, release.legacy
    with recording(unanswered=True) as proxy:
        sandbox.install_block(proxy.port)
        run = sandbox.run(sandbox.script("exit3.py", EXIT_3))

    assert run.returncode == 0
    assert [json.loads(r.body)["status"] for r in proxy.status_calls()] == ["0", "1"]
    expected = ["1"] if sandbox.profile.has_running_instances else ["0", "1"]
    assert [json.loads(r.body)["status"] for r in legacy.status_calls()] == expected


@pytest.mark.parametrize("release", ["v2.19.2", "v2.21.0"], indirect=True)
def test_a_concurrent_run_sends_no_exit_code(release: Release) -> None:
    sandbox, bridge = release.sandbox, release.bridge
    preload = sandbox.ql_dir / "shell" / "preload"
    preload.mkdir()
    (preload / "env.sh").write_text('export ACCOUNTS="a&b"\n')  # `conc` runs the script once per account
    sandbox.install_block(bridge.port)

    run = sandbox.run(sandbox.script("conc.py", "import sys\nsys.exit(5)\n"), "conc", "ACCOUNTS")

    assert run.returncode == 0
    assert [seam_headers(r) for r in bridge.status_calls()] == [{}, {}]  # two scripts ran: no single status
