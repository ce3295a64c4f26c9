"""Housekeeping: the bridge store's bookkeeping rows are kept for a week, then deleted in bounded batches.

Projection outbox rows 2.x has applied and reconcile pass records are read again only for a short while
(the outbox counts in `bridge status`, which then cover the last week, and the latest pass in /healthz);
without pruning they grow by a few thousand rows a day for as long as the bridge runs. Runs, Attempts,
events and mismatches are the record and are never pruned here. Scheduled hourly beside the reconcile pass.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

from bridge.domain.errors import BridgeError

log = logging.getLogger("bridge.jobs.housekeeping")

RETENTION_MS = 7 * 86_400_000
INTERVAL_S = 3600
BATCH = 1000  # rows per transaction: a short write lock on SQLite
MAX_BATCHES = 50  # per table and run; a backlog (a first run after an upgrade) drains over a few hours
# Deletes rows older than its first argument (ms), at most its second, in one transaction; returns how many.
Prune = Callable[[int, int], int]
TABLES = ("projection_outbox", "reconcile_passes")  # what the composition root hands in, by table


def prune_bookkeeping(prunes: Mapping[str, Prune], now_ms: int, *, retention_ms: int = RETENTION_MS,
                      batch: int = BATCH, max_batches: int = MAX_BATCHES) -> dict[str, int]:
    """Delete applied outbox rows and reconcile passes older than ``retention_ms`` with the ``prunes`` of
    TABLES (bridge.bootstrap.bookkeeping_prunes); returns rows deleted by table."""
    before = now_ms - retention_ms
    removed = {name: 0 for name in TABLES}
    for name in TABLES:
        prune = prunes[name]
        for _ in range(max_batches):
            deleted = prune(before, batch)
            removed[name] += deleted
            if deleted < batch:
                break
    if any(removed.values()):
        log.info("housekeeping deleted %d applied outbox rows and %d reconcile passes older than %d days",
                 removed["projection_outbox"], removed["reconcile_passes"], retention_ms // 86_400_000)
    return removed


def run_housekeeping(prunes: Mapping[str, Prune], now_ms: int) -> None:
    """The scheduled job: a failure is logged by its code and retried at the next run, never raised."""
    try:
        prune_bookkeeping(prunes, now_ms)
    except Exception as exc:  # noqa: BLE001 - a scheduled job must not take the scheduler down
        kind = exc.code if isinstance(exc, BridgeError) else type(exc).__name__  # never the message: paths
        log.warning("housekeeping failed: %s (will retry)", kind)
