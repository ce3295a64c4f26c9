"""The port a 2.x task shell sends its callbacks to, computed by bash exactly as the shell computes it.

`shell/share.sh` `import_config` sources `$dir_config/config.sh` inside a function and then runs
`load_ql_envs` (`ql_port=${QlPort:-"5700"}`); the shell starts from the environment of whatever spawned it
(2.x's backend, for panel, boot and node-scheduled runs). Running bash over the real config.sh, with that
environment, evaluates whatever config.sh does (conditions, variables, the ql-bridge block and its /livez
probe) instead of guessing at it. config.sh runs as this process's user, its output discarded.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

TIMEOUT_S = 5.0
# share.sh's import_config and load_ql_envs, reduced to what decides the port; then what the shell ended with.
_SCRIPT = r"""
file_config_user=$1
import_config() {
  [[ -f $file_config_user ]] && . $file_config_user
  ql_port=${QlPort:-"5700"}
}
inherited=${QlPort-unset}
import_config >/dev/null 2>&1 </dev/null
printf 'ql_port=%s\n' "$ql_port"
[[ ${QlPort-unset} == "$inherited" ]] && echo 'changed=no' || echo 'changed=yes'
"""


@dataclass(frozen=True)
class ShellPort:
    """What a task shell ends up calling; ``error`` says why it could not be computed (then port is None)."""

    port: int | None
    set_by_config_sh: bool = False  # config.sh changed QlPort (else the shell kept the inherited one, or 5700)
    curl_missing: bool = False  # no curl where bash ran: the ql-bridge block's probe cannot answer there
    error: str | None = None


def task_shell_port(config_sh: Path, environ: Mapping[str, str] | None) -> ShellPort:
    """Run bash over ``config_sh`` with ``environ`` (the spawner's; None: nothing inherited) plus this PATH."""
    bash = shutil.which("bash")
    if bash is None:
        return ShellPort(None, error="bash is not installed here")
    env = {**(environ or {}), "PATH": os.environ.get("PATH", os.defpath)}
    try:
        done = subprocess.run([bash, "-c", _SCRIPT, "task-shell", str(config_sh)], env=env, capture_output=True,
                              text=True, timeout=TIMEOUT_S, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return ShellPort(None, error=f"sourcing {config_sh} did not finish within {TIMEOUT_S:g} s")
    values = dict(line.partition("=")[::2] for line in done.stdout.splitlines() if "=" in line)
    port = values.get("ql_port")
    if port is None or "changed" not in values:
        return ShellPort(None, error=f"sourcing {config_sh} ended the shell (exit status {done.returncode})")
    if not port.isdigit() or not 0 < int(port) < 65536:
        return ShellPort(None, error=f"task shells end up with QlPort={port[:20]!r}, which is not a port")
    return ShellPort(int(port), values["changed"] == "yes", shutil.which("curl", path=env["PATH"]) is None)
