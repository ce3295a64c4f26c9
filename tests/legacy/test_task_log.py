"""A task's log found by its path's digest, and whether its end line carries 2.x's stop marker."""

from __future__ import annotations

from pathlib import Path

from legacy_adapters.callbacks import log_path_digest
from legacy_adapters.task_log import ends_with_stop_marker, find_task_log

END = "## 执行结束{}... 2026-01-01 00:00:03  耗时 3 秒　　　　　\n"


def write(log_dir: Path, relative: str, text: str) -> Path:
    path = log_dir / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def test_the_log_is_found_through_the_row_or_among_its_directorys_newest_files(tmp_path: Path) -> None:
    old = write(tmp_path, "job_1/2026-01-01-00-00-00-000.log", "## 开始执行...\n")
    write(tmp_path, "job_1/2026-01-01-00-01-00-000.log", "## 开始执行...\n")
    digest = log_path_digest("job_1/2026-01-01-00-00-00-000.log")
    assert digest is not None
    assert find_task_log(tmp_path, digest, "job_1/2026-01-01-00-00-00-000.log") == old.resolve()
    # the row has moved on to the cron's next run: the old log is found beside the new one
    assert find_task_log(tmp_path, digest, "job_1/2026-01-01-00-01-00-000.log") == old.resolve()
    assert find_task_log(tmp_path, digest, None) is None
    assert find_task_log(tmp_path, digest, "/dev/null") is None


def test_a_path_leaving_the_log_directory_is_never_read(tmp_path: Path) -> None:
    log_dir = tmp_path / "log"
    write(tmp_path, "secret/x.log", "## 执行结束(手动停止)...")
    digest = log_path_digest("../secret/x.log")
    assert digest is not None and find_task_log(log_dir, digest, "../secret/x.log") is None


def test_only_the_last_end_line_speaks(tmp_path: Path) -> None:
    stopped = write(tmp_path, "a.log", "## 开始执行...\n\nwork\n\n" + END.format("(手动停止)"))
    finished = write(tmp_path, "b.log", "## 开始执行...\n\necho (手动停止)\n\n" + END.format(""))
    assert ends_with_stop_marker(stopped, "(手动停止)") is True
    assert ends_with_stop_marker(finished, "(手动停止)") is False
    assert ends_with_stop_marker(tmp_path / "missing.log", "(手动停止)") is False
