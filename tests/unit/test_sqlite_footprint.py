"""On the SQLite default the serving process never loads the PostgreSQL driver (psycopg and libpq cost MiB)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

BUILD_AND_WRITE = textwrap.dedent("""
    import sys
    from bridge.bootstrap import build_container
    from bridge.config import Settings
    from bridge.storage.migrate import upgrade
    container = build_container(Settings.from_env({"BRIDGE_DATA_DIR": sys.argv[1]}))
    upgrade(container.store.engine)
    container.store.uow.write(lambda store: store.get_run("0190-none"))
    container.close()
    print("loaded" if "psycopg" in sys.modules else "not loaded")
""")


def test_a_sqlite_bridge_never_imports_psycopg(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-c", BUILD_AND_WRITE, str(tmp_path)], capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "not loaded"
