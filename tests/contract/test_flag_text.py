"""Flag changes whose text a store could not keep as given: refused by FlagService alike on every SQL store.

This is the path of `bridge flags set` (the CLI calls FlagService.set_mode) as well as of the admin endpoint.
"""

from __future__ import annotations

import time

import pytest

from bridge.domain.model import Mode
from bridge.service.flags import FlagService, InvalidFlagChangeError
from bridge.storage.flags import SqlFlagStore
from tests.conftest import Backend


@pytest.fixture
def flags(sql_backend: Backend) -> FlagService:
    return FlagService(SqlFlagStore(sql_backend.engine), lambda: time.time_ns() // 1_000_000)


@pytest.mark.parametrize("actor, reason, field", [
    ("ali\x00ce", "measure", "actor"),
    ("\x00", "measure", "actor"),
    ("alice", "measure\x00 scheduled runs", "reason"),
    ("ali\udcffce", "measure", "actor"),  # bytes argv could not decode, as Python hands them over
    ("alice", "\ud800", "reason"),  # a JSON "\ud800" escape
])
def test_a_flag_change_with_text_a_store_cannot_keep_is_refused_and_changes_nothing(
        flags: FlagService, actor: str, reason: str, field: str) -> None:
    with pytest.raises(InvalidFlagChangeError) as refused:
        flags.set_mode("manual", "shadow", actor=actor, reason=reason)

    assert refused.value.details == {"field": field}
    assert flags.audit() == [] and flags.modes()["manual"] is Mode.OFF


def test_any_other_text_is_kept_as_given(flags: FlagService) -> None:
    change = flags.set_mode("manual", "shadow", actor="小明 \U0001f600", reason="line one\nline two\ttab")

    assert flags.audit()[0] == change
    assert (change.actor, change.reason) == ("小明 \U0001f600", "line one\nline two\ttab")
