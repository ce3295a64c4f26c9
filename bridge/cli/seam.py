"""`ql-bridge seam install | remove | status`: the bridge put on the task shells' path in 2.x's config.sh, and
taken off again, by one marked block (`legacy_adapters.seam_block`) and never by hand.

Each change is refused, with nothing changed, unless it can be made safely: the release can take the block
(`ReleaseProfile.config_sh_after_api_sh`); config.sh exists and this user can replace it keeping its owner and
mode; QlPort is set nowhere else in it (from v2.20 that is where the shells fail over to, and a QlPort naming
the bridge would fail over to the bridge); for install, a ql-bridge answers /livez where the block would send
the callbacks. A change is a timestamped backup beside config.sh, then an atomic replace. Afterwards the seam
lines say what the shells really do (`shells_check`, which the doctor runs too), and the exit status says
whether that is what was meant.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from bridge.cli.doctor import Check, render, seam_checks
from bridge.cli.failures import CommandFailedError
from bridge.cli.seam_shells import (
    SHELLS,
    Probe,
    inherited_environment,
    probe_livez,
    release_of,
    this_install,
    without_bridge,
)
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
    Block,
    SeamBlockError,
    find_blocks,
    qlport_outside_block,
    render_block,
    with_block,
    without_block,
)
from legacy_adapters.task_shell import task_shell_targets

if TYPE_CHECKING:
    from legacy_adapters.releases import ReleaseProfile

Echo = Callable[[str], None]


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


def plan_install(settings: Settings, now: datetime, probe: Probe = probe_livez,
                 release: ReleaseProfile | str | None = None) -> Change:
    """The change install makes. Raises SeamRefusedError when it must not be made."""
    release = release_of(settings) if release is None else release
    if isinstance(release, str):
        raise SeamRefusedError(f"seam install refused: which 2.x release this is cannot be decided: {release}; "
                               "nothing was changed")
    if not release.config_sh_after_api_sh:
        raise SeamRefusedError(f"seam install refused: 2.x {release.name} sources config.sh before api.sh and "
                               "task.sh's own functions (up to v2.17.8), so the block cannot reach its callbacks; "
                               "upgrade 2.x to v2.17.9 or later; nothing was changed")
    config = _read(settings, "install")
    outside = qlport_outside_block(config.text)
    if outside is not None:
        number, line = outside
        raise SeamRefusedError(f"seam install refused: {config.path}:{number} sets QlPort outside the ql-bridge block "
                               f"({line.strip()}): take that line out first; nothing was changed")
    port = settings.listen_port
    why = probe(port)
    if why is not None:
        raise SeamRefusedError(f"seam install refused: no ql-bridge answers 127.0.0.1:{port}/livez, where the block "
                               f"would send the callbacks (BRIDGE_LISTEN): {why}; start `ql-bridge serve` first; "
                               "nothing was changed")
    blocks = find_blocks(config.text)
    block = render_block(port, now, resend_unanswered_starts=not release.has_running_instances)
    if len(blocks) == 1 and _after_first_line(config.text[blocks[0].start:blocks[0].end]) == _after_first_line(block):
        return Change(config, config.text)  # already there, word for word: installing again changes nothing
    _require_replaceable(config, "install")
    return Change(config, with_block(config.text, block))


def _after_first_line(block: str) -> str:
    """A block without its first line, which only stamps when it was installed, and without the final newline,
    which a config.sh that did not end in one does not give it (with_block)."""
    return block.split("\n", 1)[1].removesuffix("\n") if "\n" in block else ""


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
    """`seam install`: the exit status (0: task shells now send their callbacks to the bridge)."""
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
         "shell that sourced an earlier ql-bridge block (the entrypoint, `ql reload`), it still carries the "
         "bridge's port: restart 2.x's container")
    return 1


def status(settings: Settings, echo: Echo, probe: Probe = probe_livez) -> int:
    """`seam status`: installed or not, the release, where task shells send callbacks (bash over config.sh) with
    and without the bridge, and whether a bridge answers where the block sends them. Always 0 once config.sh
    could be read."""
    config = _read(settings, "status")
    path, blocks = config.path, find_blocks(config.text)
    echo(_block_line(blocks[0], path) if blocks else f"block    not installed in {path}")
    release = release_of(settings)
    echo(f"release  {release.describe()}" if not isinstance(release, str) else f"release  cannot be decided: {release}")
    inherited = inherited_environment(this_install(settings, find_backend_processes(), release))
    shell = task_shell_targets(path, inherited)
    if shell.qlport is None:
        echo(f"shells   cannot be computed: {shell.error}")
        return 0
    where = ("with 2.x's backend's environment" if inherited is not None else
             "without 2.x's backend's environment (not visible from here)")
    _, twos = without_bridge(shell, release)
    if shell.bridge_port is not None:
        echo(f"shells   send status callbacks to the bridge at 127.0.0.1:{shell.bridge_port}, and each one the "
             f"bridge cannot take to 2.x on {twos} (bash sourced config.sh {where})")
        why = probe(shell.bridge_port)
        echo(f"bridge   answers 127.0.0.1:{shell.bridge_port}/livez (where the block sends callbacks)" if why is None
             else f"bridge   not at port {shell.bridge_port} (where the block sends callbacks): {why}")
    else:
        echo(f"shells   call 2.x on {twos}: no ql-bridge callback function in config.sh (bash sourced it {where})")
    return 0


def _block_line(block: Block, path: Path) -> str:
    kind = " (the earlier kind, which sets QlPort: `seam install` replaces it)" if block.sets_qlport else ""
    return (f"block    installed {block.installed_at or '(time unknown)'} for port {block.port}, line {block.line} "
            f"of {path}{kind}")


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
