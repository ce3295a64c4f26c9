"""SqlFlagStore: origin flags, their append-only audit, bridge settings and the latest cutover report.

Reads go through a read-only unit of work: a pooled connection the server dropped (a restart, a failover, a
pooler's idle timeout) sweeps the pool and the read is tried again, once, on a fresh connection, so one
dropped connection never makes the flags unreadable.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from sqlalchemy import Connection, Engine, insert, select, update
from sqlalchemy.exc import DBAPIError

from bridge.service.flags import FlagChange
from bridge.storage.errors import translate_operational_error
from bridge.storage.schema import bridge_settings_table, cutover_reports_table, flag_audit_table, origin_flags_table
from bridge.storage.unit_of_work import SqlUnitOfWork


class SqlFlagStore:
    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._reads: SqlUnitOfWork[Connection] = SqlUnitOfWork(engine, store_factory=lambda conn: conn)

    def modes(self) -> dict[str, str]:
        t = origin_flags_table
        return self._reads.read(
            lambda conn: {row.origin: row.mode for row in conn.execute(select(t.c.origin, t.c.mode))})

    def change(self, change: FlagChange) -> str | None:
        t = origin_flags_table
        try:
            with self._engine.begin() as conn:
                old = conn.execute(select(t.c.mode).where(t.c.origin == change.origin)).scalar()
                values = {"mode": change.new, "updated_at_ms": change.at_ms, "updated_by": change.actor}
                if old is None:
                    conn.execute(insert(t).values(origin=change.origin, **values))
                else:
                    conn.execute(update(t).where(t.c.origin == change.origin).values(**values))
                conn.execute(insert(flag_audit_table).values(
                    origin=change.origin, old_mode=old, new_mode=change.new, actor=change.actor,
                    reason=change.reason, at_ms=change.at_ms))
        except DBAPIError as exc:
            raise translate_operational_error(exc) from exc
        return old

    def audit(self, origin: str | None, limit: int) -> list[FlagChange]:
        t = flag_audit_table
        stmt = select(t).order_by(t.c.at_ms.desc(), t.c.id.desc()).limit(limit)
        if origin is not None:
            stmt = stmt.where(t.c.origin == origin)
        return self._reads.read(lambda conn: [
            FlagChange(r.origin, r.old_mode, r.new_mode, r.actor, r.reason, r.at_ms) for r in conn.execute(stmt)])

    def setting(self, key: str) -> str | None:
        t = bridge_settings_table
        return self._reads.read(lambda conn: conn.execute(select(t.c.value).where(t.c.key == key)).scalar())

    def put_setting(self, key: str, value: str, at_ms: int) -> None:
        t = bridge_settings_table
        with self._engine.begin() as conn:
            if conn.execute(update(t).where(t.c.key == key).values(value=value, updated_at_ms=at_ms)).rowcount == 0:
                conn.execute(insert(t).values(key=key, value=value, updated_at_ms=at_ms))

    def latest_report(self) -> Mapping[str, Any] | None:
        t = cutover_reports_table
        body = self._reads.read(lambda conn: conn.execute(
            select(t.c.body).order_by(t.c.created_at_ms.desc(), t.c.id.desc()).limit(1)).scalar())
        try:
            return json.loads(body) if body else None
        except ValueError:
            return None  # an unreadable report passes no gate
