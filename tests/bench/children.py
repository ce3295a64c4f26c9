"""What the benchmarks that measure in a child process share: the child's run and its RESULT line, the scratch
folder (kept on request), and how memory figures print."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def run_child(module: str, spec: dict[str, Any], timeout_s: float) -> dict[str, Any]:
    """``python -m <module> --child <spec>`` in a fresh interpreter from the project root (so its peak RSS is
    its own); returns the JSON of its ``RESULT`` line. Raises RuntimeError with its stderr's tail if it failed."""
    proc = subprocess.run([sys.executable, "-m", module, "--child", json.dumps(spec)],
                          cwd=ROOT, capture_output=True, text=True, timeout=timeout_s)
    if proc.returncode != 0 or "RESULT " not in proc.stdout:
        raise RuntimeError(f"child failed ({proc.returncode}): {proc.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(proc.stdout.split("RESULT ", 1)[1])
    return result


@contextmanager
def scratch_dir(prefix: str, keep: bool) -> Iterator[Path]:
    """A temporary folder, removed afterwards unless ``keep`` (then its path is printed)."""
    tmp = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield tmp
    finally:
        if keep:
            print(f"  (kept {tmp})")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


def mib(kib: int | None) -> str:
    return "-" if kib is None else f"{kib / 1024:.1f}"
