from __future__ import annotations

import pytest

from legacy_adapters.scheduler_mode import detect_scheduler_mode


def test_scheduler_mode_follows_ql_scheduler_then_crond(monkeypatch: pytest.MonkeyPatch) -> None:
    assert detect_scheduler_mode({"QL_SCHEDULER": "node"}) == "node"
    assert detect_scheduler_mode({"QL_SCHEDULER": "system"}) == "system"
    monkeypatch.setattr("legacy_adapters.scheduler_mode.shutil.which", lambda name: "/usr/sbin/crond")
    assert detect_scheduler_mode({}) == "system"
    monkeypatch.setattr("legacy_adapters.scheduler_mode.shutil.which", lambda name: None)
    assert detect_scheduler_mode({"QL_SCHEDULER": "bogus"}) == "node"
