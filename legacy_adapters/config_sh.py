"""2.x's `config/config.sh` on disk: read it, say whether it may be rewritten, back it up beside itself, and
replace it atomically with its owner and mode kept.

The text is decoded with `surrogateescape`, so bytes that are not UTF-8 come back out unchanged: a file the
bridge rewrites differs from the original only where the bridge changed it.
"""

from __future__ import annotations

import errno
import os
import stat
import tempfile
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

ENCODING = "utf-8"
ERRORS = "surrogateescape"


@dataclass(frozen=True)
class ConfigSh:
    """config.sh as read: where it really is (a symlink resolved), its text, and its owner and mode."""

    path: Path
    text: str
    uid: int
    gid: int
    mode: int


def config_sh_path(data_dir: Path) -> Path:
    """Where 2.x keeps it: `$dir_config/config.sh`, dir_config being `<data>/config` (shell/share.sh)."""
    return data_dir / "config" / "config.sh"


def read_config_sh(path: Path) -> ConfigSh:
    """Raises FileNotFoundError when it is missing (or not a regular file)."""
    real = path.resolve()
    info = real.stat()
    if not stat.S_ISREG(info.st_mode):
        raise FileNotFoundError(errno.ENOENT, "not a regular file", str(path))
    text = real.read_bytes().decode(ENCODING, ERRORS)
    return ConfigSh(real, text, info.st_uid, info.st_gid, stat.S_IMODE(info.st_mode))


def why_not_writable(config: ConfigSh) -> str | None:
    """Why this process cannot replace config.sh and keep its owner and mode; None when it can."""
    folder = config.path.parent
    if not os.access(config.path, os.W_OK):
        return "the file is not writable by this user (read-only, immutable, or on a read-only mount)"
    if not os.access(folder, os.W_OK | os.X_OK):
        return f"its folder {folder} is not writable by this user (the new file is written beside it, then renamed)"
    if os.geteuid() != 0 and (config.uid != os.geteuid() or config.gid not in os.getgroups() + [os.getegid()]):
        return (f"it belongs to uid {config.uid} gid {config.gid}, which this user (uid {os.geteuid()}) cannot "
                "give a new file: run as its owner (in Docker: --user 0:0)")
    return None


def back_up(config: ConfigSh, now: datetime) -> Path:
    """A copy of config.sh as it is now, beside it, named with the UTC time; the same owner and mode."""
    stamp = now.astimezone(UTC).strftime("%Y%m%dT%H%M%SZ")
    data = config.text.encode(ENCODING, ERRORS)
    for attempt in range(100):
        suffix = f".{attempt}" if attempt else ""
        target = config.path.with_name(f"{config.path.name}.ql-bridge-backup-{stamp}{suffix}")
        try:
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            continue
        _write_and_settle(fd, target, data, config)
        _sync_folder(target.parent)
        return target
    raise FileExistsError(errno.EEXIST, "too many backups with this time stamp", str(config.path))


def replace_config_sh(config: ConfigSh, text: str) -> None:
    """Write ``text`` to a temporary file beside config.sh, fsync it, give it config.sh's owner and mode, and
    rename it over config.sh: a shell that sources config.sh meanwhile reads the old file or the new, never
    half of one. On any failure the temporary file is removed and config.sh is untouched."""
    fd, name = tempfile.mkstemp(prefix=f".{config.path.name}.ql-bridge-", dir=config.path.parent)
    temporary = Path(name)
    try:
        _write_and_settle(fd, temporary, text.encode(ENCODING, ERRORS), config)
        os.replace(temporary, config.path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    _sync_folder(config.path.parent)


def _write_and_settle(fd: int, path: Path, data: bytes, like: ConfigSh) -> None:
    with os.fdopen(fd, "wb") as file:
        file.write(data)
        file.flush()
        os.fsync(file.fileno())
    if (os.stat(path).st_uid, os.stat(path).st_gid) != (like.uid, like.gid):
        os.chown(path, like.uid, like.gid)
    os.chmod(path, like.mode)  # after chown, which may clear set-id bits


def _sync_folder(folder: Path) -> None:
    """Make the rename itself durable (the new directory entry), not only the file's bytes."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
