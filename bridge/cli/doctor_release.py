"""The doctor's checks and evidence that depend on which 2.x release the bridge fronts.

- "2.x release": the release profile (legacy_adapters/releases.py) as bootstrap decides it, ok when the evidence
  named the patch, a warning when it only narrowed the line (the schema), a failure naming a release the bridge
  does not support (the other checks still run).
- "2.x over HTTP": the request that release's backend serves (before v2.19 `/api/health` is not the backend's).
- Which backend is the install's: a host may run two 2.x installs; the one the bridge fronts is the one whose
  data directory is BRIDGE_LEGACY_DATA_DIR (legacy_adapters/install.py says how 2.x resolves it).
- Time-zone evidence: log names beside the begin time of the same execution, from `RunningInstances` (v2.21) or
  from the `Crontabs` rows (before v2.21, where that table does not exist).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from bridge.cli.doctor_check import Check
from bridge.config import ConfigError, Settings
from legacy_adapters.install import BackendProcess, backend_probe, same_directory

if TYPE_CHECKING:
    from legacy_adapters.releases import ReleaseProfile

RELEASE, UPSTREAM = "2.x release", "2.x over HTTP"
LogEvidence = list[tuple[str | None, float | None]]  # (log_path, begin in unix s), newest first


def release_evidence(settings: Settings) -> tuple[ReleaseProfile | None, Check]:
    """The profile bootstrap would decide (None when it refuses or cannot decide), and its check."""
    from bridge.bootstrap.release import decide_legacy_release

    try:
        profile = decide_legacy_release(settings)
    except ConfigError as exc:  # a release the bridge does not support: the message names it
        return None, Check(RELEASE, "fail", str(exc))
    except Exception as exc:  # noqa: BLE001 - the doctor reports, it never raises
        return None, Check(RELEASE, "fail", f"cannot be decided: {getattr(exc, 'code', None) or type(exc).__name__}",
                           "set BRIDGE_LEGACY_RELEASE to 2.x's version, e.g. v2.19.2")
    return profile, check_release(profile)


def check_release(profile: ReleaseProfile) -> Check:
    if profile.patch is not None:
        return Check(RELEASE, "ok", profile.describe())
    return Check(RELEASE, "warn",
                 f"{profile.describe()}: the patch is not known, so every fact that changes between patches takes "
                 "the value that claims least",
                 "set BRIDGE_LEGACY_RELEASE to 2.x's version (the `version:` of version.yaml in its install "
                 "directory, or BRIDGE_LEGACY_INSTALL_DIR pointing there), e.g. v2.19.2")


def check_upstream(settings: Settings, profile: ReleaseProfile | None, http_get: Callable[[str], int]) -> Check:
    """2.x's backend over HTTP, with the request its release serves (``backend_probe``)."""
    probe = backend_probe(profile)
    where = _without_userinfo(settings.legacy_url) + probe.path
    why = f" ({probe.why})" if probe.why else ""
    try:
        status = http_get(settings.legacy_url + probe.path)
    except Exception as exc:  # noqa: BLE001
        return Check(UPSTREAM, "fail", f"{_without_userinfo(settings.legacy_url)} does not answer "
                     f"({type(exc).__name__})", "start 2.x, or set BRIDGE_LEGACY_URL to where its backend listens")
    if status == 200:
        return Check(UPSTREAM, "ok", f"{where} answers 200{why}")
    return Check(UPSTREAM, "fail", f"{where} answers {status}{why}",
                 "set BRIDGE_LEGACY_URL to where 2.x's backend listens (see seam: 2.x's backend)")


@dataclass(frozen=True)
class InstallBackends:
    """The visible backends split into the install the bridge fronts and the others."""

    ours: list[BackendProcess]
    others: list[tuple[BackendProcess, Path | None]]  # with the data directory each serves, when known

    def note(self, default_port: int) -> str:
        """What was left out, for the check's line ('' when nothing was): one entry per other install (its data
        directory and port), with the pids of its processes (a backend runs as several: its cluster's workers)."""
        if not self.others:
            return ""
        installs: dict[tuple[str, int | None], list[int]] = {}
        for backend, data in self.others:
            installs.setdefault((str(data or "not known"), backend.listen_port_or(default_port)), []).append(
                backend.pid)
        listed = "; ".join(f"data {data}, port {port} (pid {', '.join(map(str, sorted(pids)))})"
                           for (data, port), pids in installs.items())
        which = "another 2.x install" if len(installs) == 1 else f"{len(installs)} other 2.x installs"
        return f"; ignored {which} (not BRIDGE_LEGACY_DATA_DIR's): {listed}"


def install_backends(backends: Sequence[BackendProcess], data_dir: Path | None,
                     profile: ReleaseProfile | None) -> InstallBackends:
    """The readable backends serving ``data_dir`` (BRIDGE_LEGACY_DATA_DIR), and the rest.

    Without ``data_dir`` every readable backend is taken. When no backend's data directory can be told from here
    (its cwd unreadable, a relative path), they are taken as they are, as before this choice existed."""
    readable = [b for b in backends if b.environ is not None]
    if data_dir is None:
        return InstallBackends(readable, [])
    reads = profile.reads_ql_data_dir if profile is not None else True
    served = [(b, b.data_dir(reads_ql_data_dir=reads)) for b in readable]
    ours = [b for b, d in served if d is not None and same_directory(d, data_dir)]
    if not ours and all(d is None for _, d in served):
        return InstallBackends(readable, [])
    return InstallBackends(ours, [(b, d) for b, d in served if b not in ours])


def _without_userinfo(url: str) -> str:
    parts = urlsplit(url)
    return parts._replace(netloc=parts.netloc.rpartition("@")[2]).geturl()
