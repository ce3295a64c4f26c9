"""What the callback path counts, through the Flask app with the real interceptor and a RunService wired to
the metrics as bootstrap wires it: every callback kind in legacy_callback_total, by how it was handled, and
run_transition_total for the shadow and primary paths (which change Runs through transactions, not
`transition_run`)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from bridge.domain.model import Mode
from bridge.metrics import BridgeMetrics
from bridge.service.flags import ORIGINS
from legacy_adapters.callbacks import render_status_body
from legacy_adapters.testing.datadir import LegacyDataDir
from tests.conftest import Backend
from tests.web.asgi_client import AsgiTestClient, bridge_client
from tests.web.conftest import FakeUpstream, shadow_container

BEGIN_S = 1_796_216_497
CALLBACKS = "ql_bridge_legacy_callback_total"
TRANSITIONS = "ql_bridge_run_transition_total"


@dataclass
class Modes:
    """Every origin in one mode, flippable."""

    mode: Mode = Mode.SHADOW
    origins: frozenset[str] = field(default_factory=lambda: frozenset(ORIGINS))

    def mode_for(self, origin: str) -> Mode:
        return self.mode if origin in self.origins else Mode.OFF

    def any_enabled(self) -> bool:
        return self.mode is not Mode.OFF


@dataclass
class Site:
    client: AsgiTestClient
    metrics: BridgeMetrics
    legacy: LegacyDataDir
    modes: Modes

    def send(self, path: str, body: bytes, method: str = "PUT") -> int:
        headers = {"Authorization": f"Bearer {self.legacy.system_token}",
                   "Content-Type": "application/json;charset=UTF-8"}
        return self.client.open(f"{path}?t=1", method=method, data=body, headers=headers).status_code

    def status(self, cron: int, status: int, pid: int, log: str, exit_code: int | None = None) -> int:
        return self.send("/open/crons/status", render_status_body(cron, status, pid, log, BEGIN_S, 3, exit_code))

    def seen(self, kind: str, mode: str) -> float:
        return self.metrics.value(CALLBACKS, kind=kind, mode=mode)

    def moved(self, from_: str, to: str, result: str = "ok") -> float:
        return self.metrics.value(TRANSITIONS, **{"from": from_, "to": to, "result": result})


@pytest.fixture
def site(sql_backend: Backend, tmp_path: Path, upstream: FakeUpstream) -> Iterator[Site]:
    modes = Modes()
    with shadow_container(sql_backend, tmp_path, upstream, modes) as (container, legacy):
        yield Site(bridge_client(container), container.metrics, legacy, modes)


def test_every_callback_kind_is_counted_with_the_mode_it_was_handled_in(site: Site) -> None:
    cron = site.legacy.add_cron("kinds", "task kinds.sh", "0 * * * *")

    assert site.status(cron, 0, 4321, "kinds_1/a.log") == 200
    assert site.status(cron, 1, 4321, "kinds_1/a.log", 0) == 200
    assert site.send("/open/crons/stop", f"[{cron}]".encode()) == 200
    assert site.send(f"/open/crons/{cron}/instances/7/stop", b"", method="POST") == 200
    assert site.status(cron, 3, 4321, "kinds_1/a.log") == 200  # queued: 2.x takes it, the bridge records nothing

    assert [site.seen(kind, "shadow") for kind in ("start", "end", "stop", "instance_stop")] == [1, 1, 1, 1]
    assert site.seen("other", "off") == 1


def test_callbacks_are_counted_when_every_origin_is_off(site: Site) -> None:
    site.modes.mode = Mode.OFF
    cron = site.legacy.add_cron("off", "task off.sh", "0 * * * *")

    site.status(cron, 0, 11, "off_1/a.log")
    site.status(cron, 1, 11, "off_1/a.log", 0)

    assert (site.seen("start", "off"), site.seen("end", "off")) == (1, 1)
    assert site.seen("start", "shadow") == 0


def test_a_start_and_end_the_bridge_answers_are_counted_as_primary(site: Site) -> None:
    site.modes.mode = Mode.PRIMARY
    cron = site.legacy.add_cron("owned", "task owned.sh", "0 * * * *")

    assert site.status(cron, 0, 12, "owned_1/a.log") == 200
    assert site.status(cron, 1, 12, "owned_1/a.log", 0) == 200

    assert (site.seen("start", "primary"), site.seen("end", "primary")) == (1, 1)
    assert site.moved("running", "succeeded") == 1


def test_a_shadow_execution_counts_each_run_transition_once(site: Site) -> None:
    cron = site.legacy.add_cron("moves", "task moves.sh", "0 * * * *")

    site.status(cron, 0, 21, "moves_1/a.log")
    site.status(cron, 1, 21, "moves_1/a.log", 2)

    ladder = [("created", "queued"), ("queued", "dispatching"), ("dispatching", "running"), ("running", "failed")]
    assert [site.moved(a, b) for a, b in ladder] == [1, 1, 1, 1]
    total = sum(s.value for m in site.metrics.registry.collect() for s in m.samples if s.name == TRANSITIONS)
    assert total == 4  # Run transitions only: the Attempt's ladder is in run_event_append_total


def test_a_duplicate_end_moves_nothing_and_counts_no_transition(site: Site) -> None:
    cron = site.legacy.add_cron("twice", "task twice.sh", "0 * * * *")
    site.status(cron, 0, 31, "twice_1/a.log")
    site.status(cron, 1, 31, "twice_1/a.log", 0)

    site.status(cron, 1, 31, "twice_1/a.log", 0)

    assert site.moved("running", "succeeded") == 1
    assert site.seen("end", "shadow") == 2
