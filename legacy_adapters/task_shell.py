"""Where a 2.x task shell sends its status callbacks, computed by bash exactly as the shell sources config.sh.

`shell/share.sh` `import_config` sources `$dir_config/config.sh` inside a function and then sets
`ql_port=${QlPort:-"5700"}` (from v2.20 in `load_ql_envs`); the shell starts from the environment of whatever
spawned it (2.x's backend, for panel, boot and node-scheduled runs). Running bash over the real config.sh,
with that environment, evaluates whatever config.sh does instead of guessing at it, and then asks bash what the
shell ended up with: `ql_port` (where v2.20+ shells call without the bridge; v2.17–v2.19 shells call the literal
port 5600 whatever it says, which the caller knows from the release profile), and whether the ql-bridge block's
`curl` function is defined and to which bridge port its callback URL function sends a status callback. Nothing
is sent anywhere: the block's functions are only defined and asked. config.sh runs as this process's user,
its output discarded.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from legacy_adapters.seam_block import CALLBACK_URL_FUNCTION

TIMEOUT_S = 5.0
SAMPLE_CALLBACK = "http://0.0.0.0:5600/open/crons/status?t=0"  # a v2.17–v2.19 start callback's URL
# share.sh's import_config, reduced to what decides the callbacks; then what the shell ended with.
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
if [[ $(declare -f curl 2>/dev/null) == *ql_bridge_send* ]]; then echo 'curl_function=yes'; fi
if declare -F "$2" >/dev/null && "$2" "$3" >/dev/null 2>&1; then printf 'bridge_url=%s\n' "${ql_bridge_url-}"; fi
"""


@dataclass(frozen=True)
class ShellTargets:
    """What a task shell ends up with; ``error`` says why it could not be computed (then the rest is empty)."""

    qlport: int | None  # ql_port: where v2.20+ shells call without the bridge
    set_by_config_sh: bool = False  # config.sh changed QlPort (else the shell kept the inherited one, or 5700)
    bridge_port: int | None = None  # where the block's curl function sends status callbacks (None: no block)
    error: str | None = None


def task_shell_targets(config_sh: Path, environ: Mapping[str, str] | None) -> ShellTargets:
    """Run bash over ``config_sh`` with ``environ`` (the spawner's; None: nothing inherited) plus this PATH."""
    bash = shutil.which("bash")
    if bash is None:
        return ShellTargets(None, error="bash is not installed here")
    env = {**(environ or {}), "PATH": os.environ.get("PATH", os.defpath)}
    try:
        done = subprocess.run([bash, "-c", _SCRIPT, "task-shell", str(config_sh), CALLBACK_URL_FUNCTION,
                               SAMPLE_CALLBACK], env=env, capture_output=True, text=True, timeout=TIMEOUT_S,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return ShellTargets(None, error=f"sourcing {config_sh} did not finish within {TIMEOUT_S:g} s")
    values = dict(line.partition("=")[::2] for line in done.stdout.splitlines() if "=" in line)
    port = values.get("ql_port")
    if port is None or "changed" not in values:
        return ShellTargets(None, error=f"sourcing {config_sh} ended the shell (exit status {done.returncode})")
    if not port.isdigit() or not 0 < int(port) < 65536:
        return ShellTargets(None, error=f"task shells end up with QlPort={port[:20]!r}, which is not a port")
    return ShellTargets(int(port), values["changed"] == "yes",
                        _port_of(values.get("bridge_url", "")) if values.get("curl_function") == "yes" else None)


def _port_of(url: str) -> int | None:
    try:
        return urlsplit(url).port
    except ValueError:
        return None
