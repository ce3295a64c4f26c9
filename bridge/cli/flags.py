"""`ql-bridge flags show | set | admin-token`: the per-origin modes, their audit, and the flag endpoint's token."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from bridge.cli.output import local_time, operator_zone
from bridge.cli.store_access import current_store
from bridge.config import Settings


def show_flags(console: Console, audit_rows: int) -> None:
    """Each origin's mode, then the latest ``audit_rows`` changes (newest first) in the operator's zone."""
    from bridge.bootstrap import build_flags

    settings = Settings.from_env()
    store = current_store(settings)
    try:
        service = build_flags(store)
        modes, audit = service.modes(), service.audit(limit=audit_rows)
    finally:
        store.close()
    zone = operator_zone(settings)
    table = Table("origin", "mode")
    for origin, mode in modes.items():
        table.add_row(origin, mode.value)
    console.print(table)
    history = Table(f"when ({zone})", "origin", "change", "actor", "reason", title="audit (newest first)")
    for row in audit:
        history.add_row(local_time(row.at_ms, zone), row.origin, f"{row.old or '-'} → {row.new}", row.actor,
                        row.reason)
    console.print(history)


def set_flag(origin: str, mode: str, actor: str, reason: str) -> str:
    """ORIGIN set to MODE, audited (primary needs a passing cutover report); the line saying the change."""
    from bridge.bootstrap import build_flags
    from bridge.bootstrap.release import decide_legacy_release

    settings = Settings.from_env()
    # Promotion is refused, naming the release, where 2.x cannot take primary mode (docs/releases.md#primary-mode).
    release = decide_legacy_release(settings) if settings.legacy_data_dir is not None else None
    store = current_store(settings)
    try:
        change = build_flags(store, release).set_mode(origin, mode, actor=actor, reason=reason)
    finally:
        store.close()
    return f"{change.origin}: {change.old or 'off'} → {change.new} (by {change.actor})"


def new_flags_admin_token() -> str:
    """A new admin token for /bridge/flags; only its hash is stored, so this is the one time it is shown."""
    from bridge.bootstrap import build_flags
    from bridge.service.admin import new_admin_token

    store = current_store(Settings.from_env())
    try:
        return new_admin_token(build_flags(store))
    finally:
        store.close()
