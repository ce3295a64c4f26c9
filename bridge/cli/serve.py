"""`ql-bridge serve`: the bridge in front of 2.x, once the store is current and writable, the flags are seeded
and the Runs left unfinished by the last process are checked."""

from __future__ import annotations

import logging
from functools import partial

from bridge.cli.failures import CommandFailedError
from bridge.cli.output import PROG
from bridge.cli.store_access import current_store
from bridge.config import Settings

# The name the serving process's first lines have always carried; operators' log filters know it.
_log = logging.getLogger("bridge.cli")


def serve() -> None:
    """Run the bridge (uvicorn, one process) until it is stopped."""
    from bridge.bootstrap import build_container
    from bridge.logging_setup import configure_logging
    from bridge.web.server import ClientDataFilter
    from bridge.web.server import serve as run_server

    settings = Settings.from_env()
    configure_logging(settings.log_format, [ClientDataFilter()])  # one format for every line of the process
    modes, deferred = _prepare_serving(settings)
    _log.info("origins not off: %s", modes or "none (pure pass-through)")
    run_server(settings, partial(build_container, schedule_reconciler=True, recovery_deferred=deferred))


def _prepare_serving(settings: Settings) -> tuple[str, bool]:
    """Before listening: the store is current and writable, flags are seeded once, unfinished Runs are checked.

    Returns the origins not off, and whether recovery left Runs for later (2.x's database did not read)."""
    from bridge.bootstrap import build_flags, journal_holds_facts, recover_unfinished_runs
    from bridge.storage.migrate import require_writable

    store = current_store(settings)
    try:
        # A store that takes no writes would see every callback and record none of them.
        require_writable(store.engine)
        store.uow.probe_write()
        if settings.legacy_data_dir is not None:
            from bridge.bootstrap.release import decide_legacy_release

            # Refuses, naming it, a release the bridge does not support; otherwise says which one it fronts.
            _log.info("fronting %s", decide_legacy_release(settings).describe())
        flags = build_flags(store)
        flags.seed_once(settings.shadow_origins)
        recording = sorted(o for o, m in flags.modes().items() if m.value != "off")
        if recording and settings.legacy_database_path is None:
            # Serving anyway would record nothing while the flags say otherwise: a silent shadow gap.
            raise CommandFailedError(
                f"BRIDGE_LEGACY_DATA_DIR is not set, but the flags put {', '.join(recording)} in shadow or primary "
                f"mode: set it to 2.x's data directory, or `{PROG} flags set <origin> off`")
        deferred = False
        if settings.legacy_database_path is not None and journal_holds_facts(settings):
            # The last process kept facts the store did not take: they are replayed first, and the open Runs are
            # judged once they are in (a Run whose end is in the journal is not lost).
            _log.info("startup recovery waits: the local journal holds facts to replay first")
            deferred = True
        elif settings.legacy_database_path is not None:
            outcomes = recover_unfinished_runs(settings, store)  # refuses a file that is not 2.x's database
            deferred = any(outcome.startswith("deferred:") for outcome in outcomes)
            if outcomes:
                _log.info("startup recovery: %s", dict(outcomes))
        return ", ".join(f"{o}={m.value}" for o, m in flags.modes().items() if m.value != "off"), deferred
    finally:
        store.close()
