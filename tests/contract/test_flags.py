"""Flags on the SQL stores: audited changes, off by default, seeding once, and the promotion gate."""

from __future__ import annotations

import json
import time

import pytest
from sqlalchemy import create_engine, insert, select

from bridge.domain.model import Mode
from bridge.service.admin import admin_token_matches, new_admin_token
from bridge.service.flags import CachedModes, FlagService, InvalidFlagChangeError, PromotionRefusedError
from bridge.service.last_known import inline
from bridge.storage.flags import SqlFlagStore
from bridge.storage.schema import cutover_reports_table, flag_audit_table
from tests.conftest import Backend


@pytest.fixture
def flags(sql_backend: Backend) -> FlagService:
    return FlagService(SqlFlagStore(sql_backend.engine), lambda: time.time_ns() // 1_000_000)


def save_report(backend: Backend, origin: str, gates: dict[str, bool], seam: str | None = None) -> None:
    body = {"schema": "ql-bridge/cutover-report@1", "origins": [
        {"origin": origin, "gates": [{"gate": g, "passed": p} for g, p in gates.items()], "seam": seam}]}
    with backend.engine.begin() as conn:
        conn.execute(insert(cutover_reports_table).values(created_at_ms=time.time_ns() // 1_000_000,
                                                          window_start_ms=0, window_end_ms=1, body=json.dumps(body)))


def test_every_origin_is_off_until_set(flags: FlagService) -> None:
    assert set(flags.modes().values()) == {Mode.OFF}


def test_a_change_is_audited_with_actor_reason_old_and_new(flags: FlagService, sql_backend: Backend) -> None:
    flags.set_mode("manual", "shadow", actor="alice", reason="start measuring")
    flags.set_mode("manual", "off", actor="bob", reason="rollback drill")
    assert flags.modes()["manual"] is Mode.OFF
    newest, oldest = flags.audit("manual")
    assert (oldest.old, oldest.new, oldest.actor, oldest.reason) == (None, "shadow", "alice", "start measuring")
    assert (newest.old, newest.new, newest.actor) == ("shadow", "off", "bob")
    with sql_backend.engine.connect() as conn:
        assert len(conn.execute(select(flag_audit_table)).all()) == 2


@pytest.mark.parametrize("origin, mode, actor, reason, field", [
    ("nightly", "shadow", "a", "r", "origin"), ("manual", "on", "a", "r", "mode"),
    ("manual", "shadow", "", "r", "actor"), ("manual", "shadow", "a", " ", "reason")])
def test_bad_flag_changes_are_refused_and_change_nothing(flags: FlagService, origin: str, mode: str, actor: str,
                                                        reason: str, field: str) -> None:
    with pytest.raises(InvalidFlagChangeError) as err:
        flags.set_mode(origin, mode, actor=actor, reason=reason)
    assert err.value.details["field"] == field
    assert flags.audit() == [] and set(flags.modes().values()) == {Mode.OFF}


def test_seeding_happens_on_the_first_start_only(flags: FlagService) -> None:
    assert [c.origin for c in flags.seed_once(frozenset({"manual", "script"}))] == ["manual", "script"]
    flags.set_mode("script", "off", actor="ops", reason="too noisy")
    assert flags.seed_once(frozenset({"manual", "script", "boot"})) == []
    modes = flags.modes()
    assert (modes["manual"], modes["script"], modes["boot"]) == (Mode.SHADOW, Mode.OFF, Mode.OFF)


def test_promotion_without_a_report_is_refused(flags: FlagService) -> None:
    with pytest.raises(PromotionRefusedError, match="no cutover report"):
        flags.set_mode("manual", "primary", actor="ops", reason="go")


def test_a_release_without_instance_tables_refuses_promotion_naming_itself_though_the_gates_pass(
        sql_backend: Backend) -> None:
    from legacy_adapters.releases import profile_for

    release = profile_for("2.19.2", "test")
    flags = FlagService(SqlFlagStore(sql_backend.engine), lambda: time.time_ns() // 1_000_000,
                        primary_refusal=release.primary_refusal)
    save_report(sql_backend, "manual", {"completeness": True, "terminal_status_agreement": True})
    with pytest.raises(PromotionRefusedError, match=r"v2\.19\.2 has no RunningInstances") as err:
        flags.set_mode("manual", "primary", actor="ops", reason="go")
    assert err.value.details["failing_gates"] == ["release"]
    assert flags.modes()["manual"] is Mode.OFF and flags.audit() == []


def test_promotion_names_every_failing_gate(flags: FlagService, sql_backend: Backend) -> None:
    save_report(sql_backend, "manual", {"completeness": False, "terminal_status_agreement": True,
                                        "no_unexplained_duplicates": False})
    with pytest.raises(PromotionRefusedError) as err:
        flags.set_mode("manual", "primary", actor="ops", reason="go")
    assert err.value.details["failing_gates"] == ["completeness", "no_unexplained_duplicates"]
    assert flags.modes()["manual"] is Mode.OFF


def test_a_passing_report_still_meets_primary_not_available_yet(flags: FlagService, sql_backend: Backend) -> None:
    save_report(sql_backend, "manual", {"completeness": True, "terminal_status_agreement": True})
    with pytest.raises(PromotionRefusedError, match="primary mode is not available yet"):
        flags.set_mode("manual", "primary", actor="ops", reason="go")
    assert flags.audit() == []


def test_promotion_is_refused_while_the_origins_callbacks_bypass_the_bridge_though_its_gates_pass(
        sql_backend: Backend) -> None:
    flags = FlagService(SqlFlagStore(sql_backend.engine), lambda: time.time_ns() // 1_000_000,
                        primary_refusal=None)
    save_report(sql_backend, "manual", {"completeness": True, "terminal_status_agreement": True},
                seam="manual: callbacks are bypassing the bridge (5 of 6 recent executions never reached it)")
    with pytest.raises(PromotionRefusedError, match="bypassing the bridge") as err:
        flags.set_mode("manual", "primary", actor="ops", reason="go")
    assert err.value.details["failing_gates"] == ["seam"]
    assert flags.modes()["manual"] is Mode.OFF


def test_flags_never_read_are_off(flags: FlagService) -> None:
    flags.set_mode("manual", "shadow", actor="a", reason="r")

    class Broken(FlagService):
        def modes(self) -> dict[str, Mode]:
            raise OSError("store gone")

    assert CachedModes(flags).mode_for("manual") is Mode.SHADOW
    broken = CachedModes(Broken(SqlFlagStore.__new__(SqlFlagStore), lambda: 0))
    assert broken.mode_for("manual") is Mode.OFF and not broken.any_enabled()


def test_the_last_flags_read_stay_in_force_while_the_store_cannot_be_read(
        flags: FlagService, sql_backend: Backend) -> None:
    flags.set_mode("manual", "shadow", actor="ops", reason="measure")
    failures: list[str] = []
    clock = [0.0]
    modes = CachedModes(flags, on_failure=failures.append, clock=lambda: clock[0], refresh_in=inline)
    assert modes.mode_for("manual") is Mode.SHADOW
    sql_backend.engine.dispose()
    broken = SqlFlagStore(create_engine("sqlite:////nonexistent-folder/store.sqlite"))
    flags._store = broken  # the same service, its store now failing every read
    clock[0] += 5.0

    assert modes.mode_for("manual") is Mode.SHADOW and modes.any_enabled()
    assert failures == ["STORE_UNAVAILABLE"]


def test_the_admin_token_is_stored_hashed_and_checked(flags: FlagService, sql_backend: Backend) -> None:
    token = new_admin_token(flags)
    assert admin_token_matches(flags, token) and not admin_token_matches(flags, token + "x")
    assert not admin_token_matches(flags, None)
    stored = flags.setting("admin_token_sha256")
    assert stored is not None and token not in stored and len(stored) == 64


def test_enabled_since_is_the_start_of_the_current_stretch(flags: FlagService) -> None:
    assert flags.enabled_since("manual") is None
    first = flags.set_mode("manual", "shadow", actor="a", reason="r")
    assert flags.enabled_since("manual") == first.at_ms
    flags.set_mode("manual", "off", actor="a", reason="r")
    assert flags.enabled_since("manual") is None
