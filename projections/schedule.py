"""The reconciler's schedule: the only module that starts an APScheduler scheduler (3.x runtime API)."""

from __future__ import annotations

from collections.abc import Callable

from apscheduler.schedulers.background import BackgroundScheduler


def start_reconcile_schedule(run_once: Callable[[], object], interval_s: int) -> BackgroundScheduler:
    """Run ``run_once`` every ``interval_s``; one at a time in this process, late runs coalesced."""
    scheduler = BackgroundScheduler(timezone="UTC", job_defaults={"coalesce": True, "max_instances": 1,
                                                                  "misfire_grace_time": interval_s})
    scheduler.add_job(run_once, "interval", seconds=interval_s, id="reconcile", name="reconcile")
    scheduler.start()
    return scheduler
