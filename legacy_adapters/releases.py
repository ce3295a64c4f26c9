"""Which 2.x release the bridge fronts, and what that release line says and does not say.

One home for every difference between v2.17 and v2.21 (docs/legacy-2x.md#older-releases): the rest of the code
asks a ``ReleaseProfile`` (does the end callback carry an exit code? is there a ``RunningInstances`` table?
where do the shells call?), never a version number. The profile is decided once, in bootstrap, from evidence
the bridge can read (``decide_release``):

1. ``BRIDGE_LEGACY_RELEASE``, when the operator names it (a bridge that sees only 2.x's data volume);
2. ``version.yaml`` in 2.x's install directory (every tag has it: ``version: 2.20.2``);
3. 2.x's schema: ``RunningInstances`` exists from v2.21.0, ``Crontabs.log_name`` from v2.20.0; an older
   database narrows it to v2.17–v2.19, and ``data/db/keyv.sqlite`` (v2.18.0+) to v2.18–v2.19.

A patch that the evidence cannot name gets the profile that claims least (for example an unknown v2.17.x/v2.18.x
patch may send an end pid of ``''``), and the profile says which evidence decided it.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

OLDEST_SUPPORTED = (2, 17, 0)
_VERSION = re.compile(r"^v?(\d+)\.(\d+)(?:\.(\d+))?(?:[-+].*)?$")
_VERSION_LINE = re.compile(r"^version:\s*['\"]?([0-9][0-9.]*[^'\"\s]*)['\"]?\s*$", re.MULTILINE)
# Each release line's latest patch: the one whose facts a line without a known patch defaults to.
LATEST_PATCH = {(2, 17): 13, (2, 18): 3, (2, 19): 2, (2, 20): 2, (2, 21): 0}
Version = tuple[int, int, int]


class ReleaseLine(StrEnum):
    V2_17 = "v2.17"
    V2_18 = "v2.18"
    V2_19 = "v2.19"
    V2_20 = "v2.20"
    V2_21 = "v2.21"


_LINE_ORDER = tuple(ReleaseLine)


class UnsupportedRelease(ValueError):
    """A 2.x release the bridge refuses to front; the message names it."""


@dataclass(frozen=True, slots=True)
class ReleaseProfile:
    """What one 2.x release line reports (docs/legacy-2x.md#older-releases), as facts the code can ask.

    ``patch`` is None when the evidence named the line but not the patch; every patch-dependent fact then
    takes the value that claims least.
    """

    line: ReleaseLine
    patch: int | None
    evidence: str  # which evidence decided it, for status, doctor, /readyz and the report

    @property
    def version(self) -> Version:
        major, minor = (int(part) for part in self.line.value[1:].split("."))
        return (major, minor, LATEST_PATCH[(major, minor)] if self.patch is None else self.patch)

    @property
    def name(self) -> str:
        """``v2.20.2``, or ``v2.20.x`` when the patch is not known."""
        return f"{self.line.value}.{'x' if self.patch is None else self.patch}"

    def _from(self, version: Version) -> bool:
        """True when every patch this profile may be is ``version`` or later (an unknown patch may be .0)."""
        major, minor, _ = self.version
        return (major, minor, self.patch or 0) >= version

    def _line_from(self, line: ReleaseLine) -> bool:
        return _LINE_ORDER.index(self.line) >= _LINE_ORDER.index(line)

    # --- callbacks (docs/legacy-2x.md#callback-target-before-v221, #callback-bodies-before-v221) -------------
    @property
    def callbacks_follow_qlport(self) -> bool:
        """From v2.20.0 the shell calls ``${ql_port}``, which ``config.sh`` can move; before, a literal 5600."""
        return self._line_from(ReleaseLine.V2_20)

    @property
    def fixed_callback_port(self) -> int | None:
        """The port v2.17–v2.19 shells call whatever ``QlPort`` says (``http://0.0.0.0:5600``)."""
        return None if self.callbacks_follow_qlport else 5600

    @property
    def callback_host(self) -> str:
        return "localhost" if self._line_from(ReleaseLine.V2_21) else "0.0.0.0"

    @property
    def sends_exit_code(self) -> bool:
        """Only v2.21.0's end callback carries ``exit_code``; older backends refuse the key with a 400."""
        return self._line_from(ReleaseLine.V2_21)

    @property
    def end_pid_may_be_empty(self) -> bool:
        """Up to v2.18.1 the end callback's pid is the two characters ``''`` (NaN on the server)."""
        return not self._from((2, 18, 2))

    @property
    def config_sh_after_api_sh(self) -> bool:
        """From v2.17.9 ``task.sh`` sources ``config.sh`` after ``api.sh``, so the seam block can wrap its
        functions; before, ``api.sh`` is sourced after it and replaces them."""
        return self._from((2, 17, 9))

    # --- 2.x's records (docs/legacy-2x.md#status-handler-before-v221, #crontabs-before-v221) -----------------
    @property
    def has_running_instances(self) -> bool:
        """``RunningInstances`` (one row per execution) and ``CrontabStats`` exist from v2.21.0 only; before,
        an execution's records are its log file and its ``Crontabs`` row."""
        return self._line_from(ReleaseLine.V2_21)

    @property
    def queued_status(self) -> float:
        """``Crontabs.status`` of a queued cron: 0.5 up to v2.20.2, 3 from v2.21.0."""
        return 3 if self._line_from(ReleaseLine.V2_21) else 0.5

    @property
    def idles_panel_runs_on_exit(self) -> bool:
        """Up to v2.20.2 Node writes idle when a panel run's child exits, whatever its log path."""
        return not self._line_from(ReleaseLine.V2_21)

    @property
    def stop_marker(self) -> str | None:
        """What a trapped signal leaves on the end line of the log (None: v2.17 leaves nothing)."""
        if self._line_from(ReleaseLine.V2_21):
            return "## 已停止"
        return "(手动停止)" if self._from((2, 18, 0)) else None

    @property
    def status_skips_unknown_ids(self) -> bool:
        """From v2.17.7 ``status()`` skips an id it does not know; before, ``getDb`` throws (a 500)."""
        return self._from((2, 17, 7))

    @property
    def stop_kills_row_pid(self) -> bool:
        """``PUT /crons/stop`` kills the pid the Crontabs row holds in every release but v2.20.0, which kills by
        command line only (``back/services/cron.ts`` at v2.20.0, v2.20.1)."""
        return not self._line_from(ReleaseLine.V2_20) or self._line_from(ReleaseLine.V2_21) or self._from((2, 20, 1))

    @property
    def stop_kills_every_instance(self) -> bool:
        """``PUT /crons/stop`` kills every running execution of a cron from v2.20.0 (``killAllTasks`` of its
        command line); v2.17.0–v2.19.2 kill only the pid its Crontabs row holds, ``killTask(doc.pid)``, so an
        overlapping execution of the same cron runs on (docs/legacy-2x.md#stops-and-log-lines-before-v221)."""
        return self._line_from(ReleaseLine.V2_20)

    @property
    def kills_single_instance(self) -> bool:
        """v2.20.0+ kills a scheduled cron's previous run when ``allow_multiple_instances`` is 0."""
        return self._line_from(ReleaseLine.V2_20)

    @property
    def keeps_keyv_cache(self) -> bool:
        """From v2.18.0 ``data/db/keyv.sqlite`` caches the Apps, the auth info and the language, and ``/open/*``
        tokens are looked up there; v2.17 reads the ``Apps`` table and ``config/auth.json`` on every request
        (``back/shared/store.ts`` from v2.18.0; ``back/loaders/express.ts`` at v2.17.13)."""
        return self._from((2, 18, 0))

    # --- processes (docs/legacy-2x.md#processes-ports-and-health-before-v221) -------------------------------
    @property
    def health_on_backend(self) -> bool:
        """``/api/health`` is the backend's from v2.19.0; in v2.17–v2.18 only ``public.js`` (port 5400) serves it."""
        return self._line_from(ReleaseLine.V2_19)

    @property
    def default_backend_port(self) -> int:
        """The port the backend listens on when its environment sets no ``BACK_PORT``: ``.env``'s (copied from
        ``.env.example`` by the image), 5600 up to v2.19.2 (nginx listens on ``QlPort`` and proxies to it), 5700
        from v2.20.0 (no nginx; the entrypoint also exports ``BACK_PORT=${ql_port}``) (``.env.example``,
        ``docker/docker-entrypoint.sh`` at v2.19.2, v2.20.0)."""
        return 5700 if self._line_from(ReleaseLine.V2_20) else 5600

    @property
    def reads_ql_data_dir(self) -> bool:
        """From v2.17.6 ``QL_DATA_DIR`` (environment or ``.env``) moves the data directory; before, it is always
        ``<QL_DIR>/data`` (``back/config/index.ts`` at v2.17.5, v2.17.6)."""
        return self._from((2, 17, 6))

    @property
    def log_names_carry_start(self) -> bool:
        """Every release names a task log after its start time (local zone): the time-zone evidence."""
        return True

    # --- what the bridge can do on it (docs/releases.md) ----------------------------------------------------
    @property
    def primary_refusal(self) -> str | None:
        """Why primary mode cannot be promoted on this release, or None when it can.

        Primary mode projects each execution into ``RunningInstances`` and ``CrontabStats``; a release without
        them has no place for the facts 2.x's panel would show, so the bridge refuses instead of half-projecting.
        """
        if self.has_running_instances:
            return None
        return (f"2.x {self.name} has no RunningInstances or CrontabStats tables (they arrive in v2.21.0), so "
                "the bridge cannot keep 2.x's panel whole as the record; upgrade 2.x to v2.21 to promote")

    def describe(self) -> str:
        return f"2.x {self.name} ({self.evidence})"


def profile_for(version: str, evidence: str) -> ReleaseProfile:
    """The profile of a version string (``2.20.2``, ``v2.19``, ``2.21.0-14``); UnsupportedRelease otherwise."""
    match = _VERSION.match(version.strip())
    if match is None:
        raise UnsupportedRelease(f"{version.strip()[:40]!r} is not a 2.x version (expected e.g. v2.20.2)")
    major, minor = int(match[1]), int(match[2])
    patch = None if match[3] is None else int(match[3])
    if (major, minor, patch or 0) < OLDEST_SUPPORTED or (major, minor) < OLDEST_SUPPORTED[:2]:
        raise UnsupportedRelease(f"2.x v{major}.{minor}{'' if patch is None else f'.{patch}'} is older than "
                                 "v2.17.0, which the bridge does not support; upgrade 2.x to v2.17 or later first")
    if (major, minor) not in LATEST_PATCH:
        raise UnsupportedRelease(f"2.x v{major}.{minor}{'' if patch is None else f'.{patch}'} is newer than the "
                                 "releases the bridge knows (v2.17–v2.21)")
    return ReleaseProfile(ReleaseLine(f"v{major}.{minor}"), patch, evidence)


def read_install_version(install_dir: Path) -> str | None:
    """The ``version:`` of 2.x's ``version.yaml`` (every tag from v2.17.0 has it), or None when unreadable."""
    try:
        text = (install_dir / "version.yaml").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    match = _VERSION_LINE.search(text[:4096])
    return match[1] if match else None


def profile_from_schema(tables: Collection[str], crontab_columns: Collection[str],
                        keyv_exists: bool) -> ReleaseProfile:
    """The narrowest line 2.x's database proves; the patch is never known from the schema."""
    if "RunningInstances" in tables:
        return ReleaseProfile(ReleaseLine.V2_21, None, "schema: RunningInstances table")
    if "log_name" in crontab_columns:
        return ReleaseProfile(ReleaseLine.V2_20, None, "schema: Crontabs.log_name, no RunningInstances")
    if keyv_exists:
        # v2.18 or v2.19: the profile of v2.18 claims least (it may send '' as the end pid, health on 5400).
        return ReleaseProfile(ReleaseLine.V2_18, None, "schema: no Crontabs.log_name, keyv.sqlite present "
                                                       "(v2.18 or v2.19)")
    return ReleaseProfile(ReleaseLine.V2_17, None, "schema: no Crontabs.log_name, no keyv.sqlite (v2.17)")


def decide_release(*, declared: str | None, install_dir: Path | None,
                   schema: tuple[Collection[str], Collection[str], bool] | None) -> ReleaseProfile:
    """The profile the bridge fronts: the operator's word, else ``version.yaml``, else the schema, else v2.21.

    ``schema`` is ``(tables, Crontabs columns, keyv.sqlite exists)`` or None when 2.x's database could not be
    read; with no evidence at all the bridge assumes the newest line and says so.
    """
    if declared:
        return profile_for(declared, "BRIDGE_LEGACY_RELEASE")
    if install_dir is not None:
        found = read_install_version(install_dir)
        if found is not None:
            return profile_for(found, f"{install_dir / 'version.yaml'}")
    if schema is not None:
        return profile_from_schema(*schema)
    return ReleaseProfile(ReleaseLine.V2_21, None, "no evidence readable: assumed the newest line")
