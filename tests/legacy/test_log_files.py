"""legacy_adapters.log_files against the log files 2.x's own task shells write (tests/legacy/release_shells.py)."""

from __future__ import annotations

import time
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from legacy_adapters.callbacks import log_path_digest
from legacy_adapters.log_files import HEAD_BYTES, TAIL_BYTES, LogDirectory, name_start_ms, parse_log
from legacy_adapters.releases import profile_for
from legacy_adapters.testing.datadir import create_legacy_data_dir
from tests.legacy.release_shells import PRE_V221, run_task

SHANGHAI = ZoneInfo("Asia/Shanghai")


def logs_of(root: Path, release: str) -> LogDirectory:
    return LogDirectory(root / "log", SHANGHAI, profile_for(release, "test").stop_marker)


@pytest.mark.parametrize("release", PRE_V221)
def test_a_finished_task_log_gives_its_start_end_and_duration(tmp_path: Path, release: str) -> None:
    data = create_legacy_data_dir(tmp_path / "data", release=release)
    before = int(time.time())
    log_path = run_task(release, data, 7, "job.sh", "echo hi\nsleep 1\n", tz="Asia/Shanghai")
    after = int(time.time())
    logged = logs_of(data.root, release).read(log_path, 7)
    assert logged is not None and logged.start_line
    assert before <= (logged.started_s or 0) <= after  # read in 2.x's zone: the shell wrote Shanghai time
    assert logged.named_start_ms is not None and logged.named_start_ms // 1000 == logged.started_s
    assert logged.ended and not logged.stopped
    assert logged.duration_s == (logged.ended_s or 0) - (logged.started_s or 0) >= 1


@pytest.mark.parametrize("release", PRE_V221)
def test_a_stopped_task_log_carries_the_release_stop_marker(tmp_path: Path, release: str) -> None:
    data = create_legacy_data_dir(tmp_path / "data", release=release)
    log_path = run_task(release, data, 8, "long.sh", "sleep 30\n", tz="Asia/Shanghai", stop_after_s=0.3)
    logged = logs_of(data.root, release).read(log_path, 8)
    assert logged is not None and logged.ended  # the trap writes the end line in every release
    # v2.17 has no marker (docs/legacy-2x.md#stops-and-log-lines-before-v221)
    assert logged.stopped is (release != "v2.17.13")


def test_the_scan_finds_the_window_s_task_logs_by_their_cron(tmp_path: Path) -> None:
    data = create_legacy_data_dir(tmp_path / "data", release="v2.20.2")
    first = run_task("v2.20.2", data, 3, "a.sh", "echo a\n", tz="Asia/Shanghai")
    second = run_task("v2.20.2", data, 4, "b.sh", "echo b\n", tz="Asia/Shanghai")
    (data.log_dir / "update").mkdir()
    (data.log_dir / "update" / "2020-01-01-00-00-00.log").write_text("no start line\n")
    logs = logs_of(data.root, "v2.20.2")
    now_ms = int(time.time() * 1000)
    found = {(x.cron_id, x.log_path) for x in logs.scan(now_ms - 60_000, now_ms + 1000)}
    assert found == {(3, first), (4, second)}
    assert list(logs.scan(now_ms + 60_000)) == []  # outside the window
    assert {x.cron_id for x in logs.scan(0, None, {"a_3": 30})} == {30, 4}  # log_name mapping wins


def test_a_callback_failure_around_the_lines_is_tolerated() -> None:
    head = "## 更新任务状态失败(boom)\n## 开始执行... 2024-05-01 08:00:00, 任务状态更新失败(no)\n\n"
    tail = ("\n## 执行结束(手动停止)... 2024-05-01 08:00:09  耗时 9 秒, 任务状态更新失败(x)　　　　　\n"
            "## 更新任务状态失败(late)\n")
    started, ended, duration, stopped = parse_log(head, tail, tz=SHANGHAI, stop_marker="(手动停止)")
    assert (ended - started, duration, stopped) == (9, 9, True)  # type: ignore[operator]
    assert started == 1714521600  # 2024-05-01 00:00:00 UTC: read in 2.x's zone (Shanghai), not the host's
    assert parse_log(head, tail, tz=SHANGHAI, stop_marker=None)[3] is False  # v2.17: no marker to read


def test_only_the_head_and_tail_of_a_large_log_are_read(tmp_path: Path) -> None:
    folder = tmp_path / "log" / "big_5"
    folder.mkdir(parents=True)
    name = "2024-05-01-08-00-00-123.log"
    middle = "## 执行结束... 2024-05-01 08:00:01  耗时 1 秒\n"  # a script's own output, far from the end
    body = "## 开始执行... 2024-05-01 08:00:00\n\n" + middle + "x" * (HEAD_BYTES + TAIL_BYTES) + "\n"
    (folder / name).write_text(body)
    logged = LogDirectory(tmp_path / "log", SHANGHAI, "(手动停止)").read(f"big_5/{name}", 5)
    assert logged is not None and logged.started_s is not None and not logged.ended  # still being written
    assert logged.named_start_ms == name_start_ms(name, SHANGHAI) == logged.started_s * 1000 + 123


def test_a_missing_unreadable_or_outside_file_is_no_evidence(tmp_path: Path) -> None:
    logs = LogDirectory(tmp_path / "log", SHANGHAI, None)
    (tmp_path / "log").mkdir()
    (tmp_path / "secret.log").write_text("## 开始执行... 2024-05-01 08:00:00\n")
    assert logs.read("gone_1/2024-05-01-08-00-00-000.log") is None
    assert logs.read("/dev/null") is None
    assert logs.read("../secret.log") is None
    partial = tmp_path / "log" / "p_2"
    partial.mkdir()
    (partial / "2024-05-01-08-00-00-000.log").write_bytes(b"")  # created, nothing written yet
    logged = logs.read("p_2/2024-05-01-08-00-00-000.log", 2)
    assert logged is not None and not logged.start_line and not logged.ended
    assert logged.started_s == name_start_ms("2024-05-01-08-00-00-000.log", SHANGHAI) // 1000  # type: ignore[operator]


def _write(log_dir: Path, relative: str, text: str) -> None:
    path = log_dir / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


FOUND_END = "## 执行结束{}... 2026-01-01 00:00:03  耗时 3 秒　　　　　\n"


def test_a_log_is_found_by_its_digest_through_the_row_or_among_its_folders_newest_files(tmp_path: Path) -> None:
    _write(tmp_path, "job_1/2026-01-01-00-00-00-000.log", "## 开始执行... 2026-01-01 00:00:00\n")
    _write(tmp_path, "job_1/2026-01-01-00-01-00-000.log", "## 开始执行... 2026-01-01 00:01:00\n")
    logs = LogDirectory(tmp_path, ZoneInfo("Asia/Shanghai"), "(手动停止)")
    digest = log_path_digest("job_1/2026-01-01-00-00-00-000.log")
    assert digest is not None
    assert logs.find(digest, "job_1/2026-01-01-00-00-00-000.log") == "job_1/2026-01-01-00-00-00-000.log"
    # the row has moved on to the cron's next run: the old log is found beside the new one
    assert logs.find(digest, "job_1/2026-01-01-00-01-00-000.log") == "job_1/2026-01-01-00-00-00-000.log"
    assert logs.find(digest, None) is None and logs.find(digest, "/dev/null") is None


def test_a_found_path_leaving_the_log_folder_is_never_read(tmp_path: Path) -> None:
    _write(tmp_path, "secret/x.log", "## 开始执行... 2026-01-01 00:00:00\n" + FOUND_END.format("(手动停止)"))
    logs = LogDirectory(tmp_path / "log", ZoneInfo("Asia/Shanghai"), "(手动停止)")
    digest = log_path_digest("../secret/x.log")
    assert digest is not None
    assert logs.read(logs.find(digest, "../secret/x.log")) is None


def test_only_the_last_end_line_says_stopped(tmp_path: Path) -> None:
    _write(tmp_path, "a_1/a.log", "## 开始执行... 2026-01-01 00:00:00\n\nwork\n\n" + FOUND_END.format("(手动停止)"))
    _write(tmp_path, "a_1/b.log", "## 开始执行... 2026-01-01 00:00:00\n\necho (手动停止)\n\n" + FOUND_END.format(""))
    logs = LogDirectory(tmp_path, ZoneInfo("Asia/Shanghai"), "(手动停止)")
    stopped, finished = logs.read("a_1/a.log"), logs.read("a_1/b.log")
    assert stopped is not None and stopped.stopped
    assert finished is not None and not finished.stopped
    assert logs.read("a_1/missing.log") is None
