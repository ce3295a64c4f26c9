"""The reconciler's schedule (and housekeeping's): the only module that starts an APScheduler scheduler
(3.x runtime API)."""

from __future__ import annotations

from collections.abc import Callable

from apscheduler.schedulers.background import BackgroundScheduler


def start_reconcile_schedule(run_once: Callable[[], object], interval_s: int,
                             housekeeping: Callable[[], object] | None = None,
                             housekeeping_interval_s: int = 3600) -> BackgroundScheduler:
    """Run ``run_once`` every ``interval_s`` (and ``housekeeping`` every ``housekeeping_interval_s``, the
    first time one interval after start); one at a time in this process, late runs coalesced."""
    scheduler = BackgroundScheduler(timezone="UTC", job_defaults={"coalesce": True, "max_instances": 1,
                                                                  "misfire_grace_time": interval_s})
    scheduler.add_job(run_once, "interval", seconds=interval_s, id="reconcile", name="reconcile")
    if housekeeping is not None:
        scheduler.add_job(housekeeping, "interval", seconds=housekeeping_interval_s, id="housekeeping",
                          name="housekeeping")
    scheduler.start()
    return scheduler
