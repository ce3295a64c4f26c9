"""`ql-bridge doctor`: checks the install from evidence, each check ok / warn / fail with its fix.

What it looks at, and never assumes: which 2.x release the bridge fronts (bootstrap's decision, from the
operator's word, version.yaml or the schema: doctor_release.py); the bridge store's revision; 2.x's database
(its state, read only); 2.x's backend over HTTP (the request its release serves); 2.x's backend process (the
one serving BRIDGE_LEGACY_DATA_DIR, its `BACK_PORT`, when this process can see it — the same pid namespace);
where every task shell sends its status callbacks (bash sources 2.x's `config/config.sh` with the backend's
environment, as a task shell does, and is asked what the ql-bridge block's callback function would do;
bridge/cli/seam.py); the last reconcile passes (the share of
2.x's recent executions that never reached the bridge); the UTC offset 2.x's own log file names were written
in (against their executions' begin times in `RunningInstances`, or in `Crontabs` before v2.21), against
`BRIDGE_LEGACY_TZ`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit
from zoneinfo import ZoneInfo

from bridge.cli.doctor_check import Check, Verdict
from bridge.cli.doctor_release import (
    check_upstream,
    install_backends,
    release_evidence,
)
from bridge.cli.seam_shells import shells_check
from bridge.config import Settings, local_zone_name
from legacy_adapters.install import (
    DEFAULT_PORT,
    BackendProcess,
    find_backend_processes,
    format_offset,
    log_name_offset_s,
)

if TYPE_CHECKING:
    from legacy_adapters.releases import ReleaseProfile

__all__ = ["Check", "Evidence", "Verdict", "examine", "render", "run_checks", "seam_checks"]
RECENT_INSTANCES = 50
BACKEND = "seam: 2.x's backend"


@dataclass(frozen=True)
class Evidence:
    """What the checks judge, gathered by `gather` (or given by a test)."""

    settings: Settings
    store: Check
    legacy_database: Check
    upstream: Check
    backends: Sequence[BackendProcess]
    # (log_path, begin s), newest first: RunningInstances.started_at, or Crontabs.last_execution_time before v2.21
    recent_instances: Sequence[tuple[str | None, float | None]]
    coverage: Sequence[Any]  # projections.seam.OriginCoverage
    passes_ran: bool
    release: ReleaseProfile | None = None  # None: refused, or not decided (the release check says why)
    release_check: Check | None = None


def examine(settings: Settings) -> tuple[list[str], int]:
    """`ql-bridge doctor`: every check's lines, and the exit status (1 when any check failed)."""
    checks = run_checks(gather(settings))
    return render(checks), 1 if any(check.verdict == "fail" for check in checks) else 0


def run_checks(evidence: Evidence) -> list[Check]:
    release = [evidence.release_check] if evidence.release_check is not None else []
    return [*release, evidence.store, evidence.legacy_database, evidence.upstream, check_backend_port(evidence),
            check_shell_port(evidence), check_coverage(evidence), check_time_zone(evidence),
            check_process_identity(evidence)]


def check_backend_port(evidence: Evidence) -> Check:
    forwards_to = _port_of(evidence.settings.legacy_url)
    readable = [b for b in evidence.backends if b.environ is not None]
    if not readable:
        return Check(BACKEND, "warn",
                     "2.x's backend process is not visible from here (another pid namespace, or no permission); "
                     f"the bridge forwards to port {forwards_to}",
                     "run the bridge in 2.x's container or with its pid namespace to let this be checked")
    # The install the bridge fronts: the backend(s) serving BRIDGE_LEGACY_DATA_DIR, never another install's.
    default_port = evidence.release.default_backend_port if evidence.release is not None else DEFAULT_PORT
    install = install_backends(readable, evidence.settings.legacy_data_dir, evidence.release)
    ignored = install.note(default_port)
    if not install.ours:
        return Check(BACKEND, "warn", f"no visible 2.x backend serves BRIDGE_LEGACY_DATA_DIR="
                     f"{evidence.settings.legacy_data_dir}{ignored}",
                     "set BRIDGE_LEGACY_DATA_DIR to the data directory of the 2.x install the bridge fronts")
    ports = sorted({port for b in install.ours if (port := b.listen_port_or(default_port))})
    if ports == [forwards_to]:
        return Check(BACKEND, "ok", f"2.x's backend listens on {forwards_to}, where the bridge forwards{ignored}")
    return Check(BACKEND, "fail",
                 f"2.x's backend listens on {', '.join(map(str, ports))} but BRIDGE_LEGACY_URL points at "
                 f"{forwards_to}{ignored}",
                 f"set BRIDGE_LEGACY_URL=http://127.0.0.1:{ports[0]}")


def check_shell_port(evidence: Evidence) -> Check:
    """Where task shells send their status callbacks: bash over config.sh with the backend's environment, and
    the release's own target without the bridge (bridge/cli/seam.py, which `ql-bridge seam` prints too)."""
    return shells_check(evidence.settings, evidence.backends)


def seam_checks(settings: Settings, *, proc_root: Path = Path("/proc")) -> list[Check]:
    """The doctor's two seam lines alone, gathering only their evidence (what `ql-bridge seam` prints)."""
    not_gathered = Check("-", "warn", "not gathered for the seam lines")
    release, _ = release_evidence(settings)
    evidence = Evidence(settings, not_gathered, not_gathered, not_gathered, find_backend_processes(proc_root), [], [],
                        False, release)
    return [check_backend_port(evidence), check_shell_port(evidence)]


def check_coverage(evidence: Evidence) -> Check:
    from projections.seam import SEAM_FIX, bypass_findings

    if not evidence.passes_ran:
        return Check("shadow coverage", "warn", "no reconcile pass has run yet: coverage is unknown",
                     "run `ql-bridge reconcile` (or let `ql-bridge serve` run its schedule)")
    findings = bypass_findings(evidence.coverage)
    if findings:
        return Check("shadow coverage", "fail", "; ".join(f.message for f in findings), SEAM_FIX)
    missing = sum(c.missing for c in evidence.coverage)
    recorded = sum(c.recorded for c in evidence.coverage)
    if missing:
        return Check("shadow coverage", "warn", f"{missing} recent 2.x execution(s) missing beside {recorded} recorded",
                     "see `ql-bridge report` for which")
    return Check("shadow coverage", "ok", f"{recorded} recent execution(s) recorded, none missing")


def check_time_zone(evidence: Evidence) -> Check:
    zone_name = evidence.settings.legacy_tz or local_zone_name()
    offsets = Counter(o for o in (log_name_offset_s(p, s) for p, s in evidence.recent_instances) if o is not None)
    backend_tz = {tz for b in evidence.backends if b.environ and (tz := b.environ.get("TZ"))}
    if not offsets:
        extra = f"; 2.x's backend has TZ={', '.join(sorted(backend_tz))}" if backend_tz else ""
        return Check("time zone", "warn", f"no 2.x log name to read its UTC offset from yet{extra}",
                     "check again after a few executions")
    observed, _ = offsets.most_common(1)[0]
    configured = _offset_now(zone_name)
    label = f"BRIDGE_LEGACY_TZ={evidence.settings.legacy_tz}" if evidence.settings.legacy_tz else \
        f"the host's zone {zone_name} (BRIDGE_LEGACY_TZ unset)"
    if observed == configured:
        return Check("time zone", "ok", f"2.x names its logs at UTC{format_offset(observed)}, as {label}")
    return Check("time zone", "fail",
                 f"2.x names its logs at UTC{format_offset(observed)} but the bridge uses {label} "
                 f"(UTC{format_offset(configured)}): schedules and origins would be judged in the wrong zone",
                 "set BRIDGE_LEGACY_TZ to 2.x's zone (the official image uses Asia/Shanghai)")


def check_process_identity(evidence: Evidence) -> Check:
    if evidence.backends:
        return Check("process identity", "ok", "2.x's processes are visible: task shells can be told alive or gone")
    return Check("process identity", "warn",
                 "2.x's processes are not visible from here: after a bridge restart 2.x's instance rows alone decide "
                 "its unfinished Runs, and a shell gone without an end callback stays open",
                 "run the bridge in 2.x's container or share its pid namespace (`--pid container:qinglong`, "
                 "compose `pid: service:qinglong`)")


def gather(settings: Settings, *, proc_root: Path = Path("/proc"),
           http_get: Callable[[str], int] | None = None) -> Evidence:
    """Collect the evidence; every probe's failure becomes a check, never an exception."""
    from projections.seam import SEAM_WINDOW_MS

    release, release_check = release_evidence(settings)
    backends = find_backend_processes(proc_root)
    store_check, coverage, passes_ran = _store_evidence(settings, SEAM_WINDOW_MS)
    legacy_check, instances = _legacy_evidence(settings, release)
    upstream = check_upstream(settings, release, http_get or _http_status)
    return Evidence(settings, store_check, legacy_check, upstream, backends, instances, coverage, passes_ran, release,
                    release_check)


def _store_evidence(settings: Settings, window_ms: int) -> tuple[Check, list[Any], bool]:
    from bridge.bootstrap import build_store
    from bridge.storage.migrate import schema_refusal, schema_state

    if settings.database_url.startswith("sqlite:///"):
        path = Path(settings.database_url.removeprefix("sqlite:///"))
        if not path.exists():
            return Check("bridge store", "fail", f"no store at {path}", "run `ql-bridge db upgrade`"), [], False
    try:
        store = build_store(settings)
    except Exception as exc:  # noqa: BLE001 - the doctor reports, it never raises
        return Check("bridge store", "fail", f"cannot open the store: {_code(exc)}", None), [], False
    try:
        state = schema_state(store.engine)
        refusal = schema_refusal(store.engine, state)
        if refusal is not None:  # the message says what to do: upgrade the store, or the code when it is newer
            return Check("bridge store", "fail", refusal.message, None), [], False
        revision = state.revision
        now_ms = int(datetime.now().timestamp() * 1000)
        coverage = store.readers.coverage(now_ms - window_ms)
        passes_ran = store.readers.last_pass() is not None
        return Check("bridge store", "ok", f"reachable, at revision {revision}"), coverage, passes_ran
    except Exception as exc:  # noqa: BLE001
        return Check("bridge store", "fail", f"the store does not answer: {_code(exc)}", None), [], False
    finally:
        store.close()


def _legacy_evidence(settings: Settings,
                     release: ReleaseProfile | None) -> tuple[Check, list[tuple[str | None, float | None]]]:
    from bridge.bootstrap.release import open_records
    from legacy_adapters.database_state import FOREIGN_STATES, DatabaseState

    path = settings.legacy_database_path
    if path is None:
        return Check("2.x database", "fail", "BRIDGE_LEGACY_DATA_DIR is not set",
                     "set it to 2.x's data directory (the one holding db/database.sqlite)"), []
    reader = open_records(path, release)
    try:
        state = reader.state()
        if state is not DatabaseState.OK:
            verdict: Verdict = "fail" if state in FOREIGN_STATES or state is DatabaseState.MISSING else "warn"
            return Check("2.x database", verdict, f"{path}: {state.value}", _DATABASE_FIXES.get(state.value)), []
        recent = reader.begun_logs(RECENT_INSTANCES)
        return Check("2.x database", "ok", f"{path}: readable"), recent
    except Exception as exc:  # noqa: BLE001
        return Check("2.x database", "fail", f"{path}: {_code(exc)}", None), []
    finally:
        reader.close()


_DATABASE_FIXES = {
    "missing": "point BRIDGE_LEGACY_DATA_DIR at 2.x's data directory",
    "not_legacy": "point BRIDGE_LEGACY_DATA_DIR at 2.x's data directory, not another database",
    "unsupported": "this 2.x database was already changed by a 3.0 migration: the bridge cannot shadow it",
    "hot_journal": "let 2.x start (it rolls the journal back); the bridge reads again once it is gone",
    "locked": "transient: 2.x is writing; check again",
    "empty": "2.x has not created its tables yet: start it once",
}


def _http_status(url: str) -> int:
    import httpx

    return httpx.get(url, timeout=3, trust_env=False).status_code


def render(checks: Iterable[Check]) -> list[str]:
    lines = []
    for check in checks:
        lines.append(f"{check.verdict:<4}  {check.name}: {check.detail}")
        if check.fix and check.verdict != "ok":
            lines.append(f"      fix: {check.fix}")
    return lines


def _offset_now(zone_name: str) -> int:
    offset = datetime.now(ZoneInfo(zone_name)).utcoffset()
    return int(offset.total_seconds()) if offset is not None else 0


def _port_of(url: str) -> int:
    parts = urlsplit(url)
    return parts.port or (443 if parts.scheme == "https" else 80)


def _code(exc: Exception) -> str:
    return str(getattr(exc, "code", None) or type(exc).__name__)
