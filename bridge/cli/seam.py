"""`ql-bridge seam install | remove | status`: the bridge put on the task shells' path in 2.x's config.sh, and
taken off again, by one marked block (`legacy_adapters.seam_block`) and never by hand.

Each change is refused, with nothing changed, unless it can be made safely: config.sh exists and this user
can replace it keeping its owner and mode; QlPort is set nowhere else in it (the block would not be the
only thing deciding the port); for install, a ql-bridge answers /livez where the block would send the
shells. A change is a timestamped backup beside config.sh, then an atomic replace. Afterwards the doctor's
seam lines say what the shells really do, and the exit status says whether that is what was meant.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from bridge.cli.doctor import SHELLS, Check, inherited_environment, render, seam_checks
from bridge.cli.failures import CommandFailedError
from bridge.config import Settings
from legacy_adapters.config_sh import (
    ConfigSh,
    back_up,
    config_sh_path,
    read_config_sh,
    replace_config_sh,
    why_not_writable,
)
from legacy_adapters.install import find_backend_processes
from legacy_adapters.seam_block import (
    PROBE_TIMEOUT_S,
    SeamBlockError,
    find_blocks,
    qlport_outside_block,
    render_block,
    with_block,
    without_block,
)
from legacy_adapters.task_shell import task_shell_port

Echo = Callable[[str], None]
Probe = Callable[[int], str | None]


class SeamRefusedError(CommandFailedError):
    """A seam change that cannot be made safely; nothing was changed. The message is the whole line."""


@dataclass(frozen=True)
class Change:
    """config.sh as it is, and as the command would leave it."""

    config: ConfigSh
    after: str

    @property
    def changes(self) -> bool:
        return self.after != self.config.text

    def diff(self) -> str:
        path = str(self.config.path)
        lines = difflib.unified_diff(self.config.text.splitlines(keepends=True), self.after.splitlines(keepends=True),
                                     fromfile=path, tofile=f"{path} (after)")
        return "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines)


def probe_livez(port: int, timeout_s: float = PROBE_TIMEOUT_S) -> str | None:
    """None when a ql-bridge answers localhost:<port>/livez within the block's bound; else why not."""
    import httpx

    try:
        response = httpx.get(f"http://localhost:{port}/livez", timeout=timeout_s, trust_env=False)
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


def plan_install(settings: Settings, now: datetime, probe: Probe = probe_livez) -> Change:
    """The change install makes. Raises SeamRefusedError when it must not be made."""
    config = _read(settings, "install")
    outside = qlport_outside_block(config.text)
    if outside is not None:
        number, line = outside
        raise SeamRefusedError(f"seam install refused: {config.path}:{number} sets QlPort outside the ql-bridge block "
                               f"({line.strip()}): take that line out first; nothing was changed")
    port = settings.listen_port
    why = probe(port)
    if why is not None:
        raise SeamRefusedError(f"seam install refused: no ql-bridge answers localhost:{port}/livez, where the block "
                               f"would point task shells (BRIDGE_LISTEN): {why}; start `ql-bridge serve` first; "
                               "nothing was changed")
    blocks = find_blocks(config.text)
    if len(blocks) == 1 and blocks[0].port == port:
        return Change(config, config.text)  # already there: installing again changes nothing
    _require_replaceable(config, "install")
    return Change(config, with_block(config.text, render_block(port, now)))


def plan_remove(settings: Settings) -> Change:
    """The change remove makes. Raises SeamRefusedError when it must not be made."""
    config = _read(settings, "remove")
    change = Change(config, without_block(config.text))
    if change.changes:
        _require_replaceable(config, "remove")
    return change


def apply(change: Change, now: datetime) -> Path | None:
    """Back config.sh up beside itself and replace it; the backup's path, or None when nothing changes."""
    if not change.changes:
        return None
    backup = back_up(change.config, now)
    replace_config_sh(change.config, change.after)
    return backup


def install(settings: Settings, echo: Echo, *, dry_run: bool = False, probe: Probe = probe_livez) -> int:
    """`seam install`: the exit status (0: task shells now call the bridge)."""
    from bridge.bootstrap.release import decide_legacy_release

    decide_legacy_release(settings)  # refuses, naming it, a release the bridge does not support; nothing changed
    now = datetime.now(UTC)
    change = plan_install(settings, now, probe)
    if dry_run:
        echo(change.diff() or f"{change.config.path}: already installed for port {settings.listen_port}, no change")
        return 0
    backup = apply(change, now)
    echo(f"{change.config.path}: " + (f"ql-bridge block installed (backup: {backup.name})" if backup else
                                       f"ql-bridge block already installed for port {settings.listen_port}"))
    checks = seam_checks(settings)
    _echo_checks(checks, echo)
    # What install means is the shells' line; the backend's line is about where the bridge forwards, shown too.
    if _shells(checks).verdict == "ok":
        return 0
    echo("the seam is not in place: task shells do not reach the bridge (see above)")
    return 1


def remove(settings: Settings, echo: Echo, *, dry_run: bool = False) -> int:
    """`seam remove`: the exit status (0: task shells no longer call the bridge, as far as can be seen)."""
    now = datetime.now(UTC)
    change = plan_remove(settings)
    if dry_run:
        echo(change.diff() or f"{change.config.path}: no ql-bridge block, no change")
        return 0
    backup = apply(change, now)
    echo(f"{change.config.path}: " + (f"ql-bridge block removed (backup: {backup.name})" if backup
                                       else "no ql-bridge block, nothing to remove"))
    checks = seam_checks(settings)
    _echo_checks(checks, echo)
    if _shells(checks).verdict != "ok":
        return 0
    echo("task shells still call the bridge: QlPort comes from elsewhere. If 2.x's backend was restarted from a "
         "shell that sourced the block (the entrypoint, `ql reload`), it still carries the bridge's port: restart "
         "2.x's container")
    return 1


def status(settings: Settings, echo: Echo, probe: Probe = probe_livez) -> int:
    """`seam status`: installed or not, the port task shells call now (bash over config.sh), whether a bridge
    answers there. Always 0 once config.sh could be read."""
    config = _read(settings, "status")
    path, blocks = config.path, find_blocks(config.text)
    echo(f"block    installed {blocks[0].installed_at or '(time unknown)'} for port {blocks[0].port}, line "
         f"{blocks[0].line} of {path}" if blocks else f"block    not installed in {path}")
    inherited = inherited_environment(find_backend_processes())
    shell = task_shell_port(path, inherited)
    if shell.port is None:
        echo(f"shells   cannot be computed: {shell.error}")
        return 0
    where = "with 2.x's backend's environment" if inherited is not None else \
        "without 2.x's backend's environment (not visible from here)"
    echo(f"shells   call port {shell.port} (bash sourced config.sh {where}"
         + ("; curl is not installed here, so the block's probe cannot answer" if shell.curl_missing else "") + ")")
    for port in dict.fromkeys([shell.port] + [b.port for b in blocks[:1] if b.port is not None]):
        why = probe(port)
        role = "where the shells call" if port == shell.port else "where the block points"
        echo(f"bridge   answers localhost:{port}/livez ({role})" if why is None else
             f"bridge   not at port {port} ({role}): {why}")
    return 0


def _read(settings: Settings, command: str) -> ConfigSh:
    """config.sh, refused when it is missing or its ql-bridge markers do not pair up."""
    if settings.legacy_data_dir is None:
        raise SeamRefusedError(f"seam {command}: BRIDGE_LEGACY_DATA_DIR is not set: set it to 2.x's data directory")
    path = config_sh_path(settings.legacy_data_dir)
    try:
        config = read_config_sh(path)
    except FileNotFoundError:
        raise SeamRefusedError(f"seam {command} refused: there is no {path} (2.x creates it at its first start); "
                               "nothing was changed") from None
    try:
        find_blocks(config.text)
    except SeamBlockError as exc:
        raise SeamRefusedError(f"seam {command} refused: {config.path}: {exc}; mend it by hand (the block's lines "
                               "begin with '# >>> ql-bridge seam' and '# <<< ql-bridge seam'); nothing was changed"
                               ) from None
    return config


def _require_replaceable(config: ConfigSh, command: str) -> None:
    why = why_not_writable(config)
    if why is not None:
        raise SeamRefusedError(f"seam {command} refused: {config.path} cannot be replaced: {why}; nothing was changed")


def _shells(checks: list[Check]) -> Check:
    return next(check for check in checks if check.name == SHELLS)


def _echo_checks(checks: list[Check], echo: Echo) -> None:
    for line in render(checks):
        echo(line)
