"""The callback path's contracts: what the web layer's callback route calls, and what it hands to the stop
decisions (both built by the composition root)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from bridge.callbacks.prepared import Forwarded, Prepared
from bridge.callbacks.routes import InterceptedRoute
from bridge.service.callback_facts import CallbackFacts, ShadowResult
from bridge.service.ports import ActiveCandidate


class CallbackInterceptor(Protocol):
    """Sees an intercepted request before and after 2.x does; must not raise and keeps its own time budget."""

    def before_forward(self, route: InterceptedRoute, body: bytes,
                       headers: Mapping[str, str] | None = None) -> Prepared | None:
        """None: pass it through unwatched; a LocalAnswer: answer it without forwarding (primary mode);
        otherwise what ``after_forward`` gets back once 2.x has answered."""
        ...

    def after_forward(self, prepared: Forwarded, upstream_status: int, answer: bytes | None = None) -> None:
        """``answer`` (2.x's body without its content coding) is passed for the routes whose answer is read."""
        ...


class StopEvidence(Protocol):
    """What the callback path hands to the stop decisions (``bridge.jobs.stop_decisions.StopDecisions``): a signal
    exit to keep for its window, and the stops 2.x answered 2xx."""

    def keep(self, facts: CallbackFacts, read_ahead: list[ActiveCandidate] | None = None) -> ShadowResult | None: ...

    def relayed_stop(self, cron_id: int, received_at_ms: int) -> list[ShadowResult]: ...

    def relayed_instance_stop(self, instance_id: int, received_at_ms: int) -> list[ShadowResult]: ...

    def stop_forwarded(self, cron_ids: tuple[int, ...]) -> None: ...

    def stop_settled(self, cron_ids: tuple[int, ...]) -> None: ...
