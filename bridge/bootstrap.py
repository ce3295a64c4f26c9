"""The composition root: the only place that builds concrete engines, stores and services."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Engine

from bridge.config import Settings
from bridge.service.clock import SystemClock
from bridge.service.ports import Clock, ServiceMetrics
from bridge.service.run_service import RunService
from bridge.storage.engine import make_engine
from bridge.storage.migrate import refuse_legacy_database
from bridge.storage.unit_of_work import SqlUnitOfWork


@dataclass
class Store:
    engine: Engine
    uow: SqlUnitOfWork
    runs: RunService

    def close(self) -> None:
        self.engine.dispose()


def build_store(settings: Settings, *, clock: Clock | None = None, metrics: ServiceMetrics | None = None) -> Store:
    """Engine, unit of work and RunService for the configured store (no connection is opened yet)."""
    if settings.database_url.startswith("sqlite:///"):
        settings.data_dir.mkdir(parents=True, exist_ok=True)
    engine = make_engine(settings.database_url)
    refuse_legacy_database(engine)  # before any connection could switch 2.x's file to WAL
    uow = SqlUnitOfWork(engine, busy_budget_ms=settings.sqlite_busy_budget_ms)
    runs = RunService(uow, clock=clock or SystemClock(), metrics=metrics, payload_cap_bytes=settings.payload_cap_bytes)
    return Store(engine=engine, uow=uow, runs=runs)
