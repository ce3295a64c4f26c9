"""Where 2.x's task shells send their status callbacks, with the ql-bridge block and without it: the doctor's
"seam: task shells" line and what `ql-bridge seam status` prints (both ask this module; it imports neither)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from bridge.cli.doctor_check import Check
from bridge.config import ConfigError, Settings
from legacy_adapters.config_sh import config_sh_path, read_config_sh
from legacy_adapters.install import BackendProcess
from legacy_adapters.seam_block import Block, SeamBlockError, find_blocks
from legacy_adapters.task_shell import ShellTargets, task_shell_targets

if TYPE_CHECKING:
    from legacy_adapters.releases import ReleaseProfile

SHELLS = "seam: task shells"
LIVEZ_TIMEOUT_S = 1.0
Probe = Callable[[int], str | None]


def probe_livez(port: int, timeout_s: float = LIVEZ_TIMEOUT_S) -> str | None:
    """None when a ql-bridge answers 127.0.0.1:<port>/livez (where the block sends callbacks); else why not."""
    import httpx

    try:
        response = httpx.get(f"http://127.0.0.1:{port}/livez", timeout=timeout_s, trust_env=False)
    except httpx.TimeoutException:
        return f"no answer within {timeout_s:g} s"
    except httpx.HTTPError as exc:
        return f"nothing answers there ({type(exc).__name__})"
    try:
        body = response.json()
    except ValueError:
        body = None
    if response.status_code == 200 and isinstance(body, dict) and body.get("status") == "ok":
        return None
    return f"something else answers there (HTTP {response.status_code}, not ql-bridge's /livez)"


def release_of(settings: Settings) -> ReleaseProfile | str:
    """The release profile bootstrap decides (bridge.bootstrap.release), or why it cannot be decided."""
    from bridge.bootstrap.release import decide_legacy_release

    try:
        return decide_legacy_release(settings)
    except ConfigError as exc:
        return str(exc)


def inherited_environment(backends: Sequence[BackendProcess]) -> dict[str, str] | None:
    """The environment every task shell starts from: the backend's, when it is readable and unambiguous."""
    readable = [b for b in backends if b.environ is not None]
    if len({b.inherited_qlport for b in readable}) != 1:
        return None
    return readable[0].environ


def this_install(settings: Settings, backends: Sequence[BackendProcess],
                  release: ReleaseProfile | str) -> list[BackendProcess]:
    """The backends serving BRIDGE_LEGACY_DATA_DIR: another 2.x install's environment says nothing of these shells."""
    from bridge.cli.doctor_release import install_backends

    return install_backends(backends, settings.legacy_data_dir, None if isinstance(release, str) else release).ours


def shells_check(settings: Settings, backends: Sequence[BackendProcess], probe: Probe = probe_livez,
                 release: ReleaseProfile | str | None = None) -> Check:
    """The doctor's "seam: task shells" line: where task shells send their status callbacks, as bash computes it
    over config.sh with the backend's environment, and where they call without the bridge (the release's)."""
    if settings.legacy_data_dir is None:
        return Check(SHELLS, "warn", "BRIDGE_LEGACY_DATA_DIR is not set: config.sh cannot be read",
                     "set BRIDGE_LEGACY_DATA_DIR to 2.x's data directory")
    release = release_of(settings) if release is None else release
    path = config_sh_path(settings.legacy_data_dir)
    listen = settings.listen_port
    install = f"run `ql-bridge seam install` (it adds a fail-safe callback block to {path}, which every task " \
              "shell sources)"
    if not isinstance(release, str) and not release.config_sh_after_api_sh:
        return Check(SHELLS, "warn", f"2.x {release.name} sources config.sh before its callback functions exist: "
                     "no block can send its callbacks to the bridge", "upgrade 2.x to v2.17.9 or later")
    inherited = inherited_environment(this_install(settings, backends, release))
    shell = task_shell_targets(path, inherited)
    if shell.qlport is None:
        return Check(SHELLS, "warn", f"cannot compute where task shells call: {shell.error}", install)
    twos_port, twos = without_bridge(shell, release)
    if shell.bridge_port is not None:
        if shell.bridge_port != listen:
            return Check(SHELLS, "fail", f"config.sh's ql-bridge block sends callbacks to port {shell.bridge_port}, "
                         f"but the bridge listens on {listen}; they go to 2.x on {twos}",
                         "run `ql-bridge seam install` again")
        why = probe(listen)
        if why is not None:
            return Check(SHELLS, "fail", f"config.sh's ql-bridge block sends callbacks to 127.0.0.1:{listen}, where "
                         f"no ql-bridge answers ({why}): each one fails over to 2.x on {twos}, bypassing the bridge",
                         f"start the bridge on port {listen}")
        return Check(SHELLS, "ok", f"task shells send status callbacks to the bridge at 127.0.0.1:{listen} "
                     f"(config.sh's ql-bridge block), and each one it cannot take to 2.x on {twos}")
    block = installed_block(path)
    if block is not None and block.sets_qlport:
        install = "run `ql-bridge seam install` to replace config.sh's earlier ql-bridge block (it exported QlPort)"
    if not shell.set_by_config_sh and inherited is None and follows_qlport(release):
        return Check(SHELLS, "warn", f"bash sourcing {path} defines no ql-bridge callback function and the "
                     "backend's environment is not readable: task shells call whatever QlPort they inherit", install)
    if twos_port == listen:
        return Check(SHELLS, "ok", f"task shells call {twos}, where the bridge listens (no fail-over: with the "
                     "bridge down 2.x gets no callback)", install)
    return Check(SHELLS, "fail", f"task shells call 2.x on {twos}: bash sourcing {path} defines no ql-bridge "
                 f"callback function, so callbacks bypass the bridge (it listens on {listen})", install)


def without_bridge(shell: ShellTargets, release: ReleaseProfile | str) -> tuple[int | None, str]:
    """Where the release's shells call without the bridge, and how to say it: the literal 0.0.0.0:5600 up to
    v2.19 (whatever QlPort says), else QlPort's port (docs/legacy-2x.md#callback-target-before-v221)."""
    if isinstance(release, str):
        return shell.qlport, f"port {shell.qlport} (QlPort; 5600 if 2.x is older than v2.20)"
    port = release.fixed_callback_port or shell.qlport
    source = "the literal URL in its api.sh" if release.fixed_callback_port else "QlPort"
    return port, f"port {port} ({release.callback_host}:{port}, {source}, 2.x {release.name})"


def follows_qlport(release: ReleaseProfile | str) -> bool:
    return isinstance(release, str) or release.callbacks_follow_qlport


def installed_block(path: Path) -> Block | None:
    try:
        blocks = find_blocks(read_config_sh(path).text)
    except (OSError, SeamBlockError):
        return None
    return blocks[0] if blocks else None


