"""PrimaryAnswerer: for executions the bridge owns, it answers the shell itself, fail-closed.

Authorisation is 2.x's own for /open/* (App token from the keyv cache, `crons` scope, expiry; the same
401 bodies). The Run facts and the projection outbox row commit together, within the shadow budget; a refusal
by the rules answers a 2.x-shaped 5xx and leaves nothing half-written.

When the bridge cannot be the record in time, 2.x is (``ToLegacy``): a keyv file that cannot be read leaves the
token unchecked, and a store that does not take the write within the budget (silent, locked, failing over, or
already holding facts in the local journal) cannot accept the execution. The callback then goes on to 2.x, which
checks the token and records the execution itself, and the bridge records it beside 2.x as 2.x's own (shadow),
its origin evidence saying why. So a silent store never makes an execution vanish from both. Each hand-over is
counted (primary_fallback_total) and logged once per episode; an unreadable keyv also in
legacy_database_unavailable_total{use="auth"}.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from bridge.callbacks.answers import OK_2X, LocalAnswer
from bridge.callbacks.commands import RecordEnd, RecordStart
from bridge.callbacks.keeper import STORE_DID_NOT_TAKE
from bridge.callbacks.routes import SHELL_STATUS_PATH
from bridge.domain.errors import BridgeError
from bridge.metrics import SHADOW_FAILURE_LABELS, BridgeMetrics
from bridge.service.last_known import LastKnown
from bridge.service.ports import Clock
from bridge.service.shadow import ShadowRecorder
from legacy_adapters.errors import LegacyAuthError, LegacyDatabaseError
from legacy_adapters.ports import OpenTokenCheck

log = logging.getLogger("bridge.callbacks.primary")


@dataclass(frozen=True, slots=True)
class ToLegacy:
    """The bridge does not answer this primary callback: 2.x does, and is its record (``reason``: why)."""

    reason: str


class PrimaryAnswerer:
    def __init__(self, recorder: ShadowRecorder, auth: OpenTokenCheck, metrics: BridgeMetrics, clock: Clock,
                 on_commit: Callable[[], None], owned_ttl_s: float = 1.0) -> None:
        self._recorder = recorder
        self._auth = auth
        self._metrics = metrics
        self._clock = clock
        self._on_commit = on_commit
        # Whether the bridge owns an open execution; an unreadable store keeps the last answer in force (and,
        # before any answer, assumes it may: the end's own owner read then decides, or fails counted).
        self._owned = LastKnown(lambda: recorder.has_active_bridge_runs(), what="bridge-owned Runs", fallback=True,
                                ttl_s=owned_ttl_s)
        self._keyv_state: str | None = None  # why keyv.sqlite could not be read last time, if it could not
        self._handed: str | None = None  # why the last primary callback went to 2.x, until one is answered again

    def answer(self, headers: Mapping[str, str] | None, command: RecordStart | RecordEnd,
               execute: Callable[[RecordStart | RecordEnd], object]) -> LocalAnswer | ToLegacy:
        """Authorise like 2.x, then have ``execute`` record ``command`` within the budget (its errors raised); the
        shell gets {"code":200}, 2.x's 401, or a 2.x-shaped 500 when the rules refuse. ToLegacy: the bridge could
        not be the record (the token could not be checked, the store did not take the write): 2.x answers."""
        headers = headers or {}
        try:
            self._auth.check_open_request(SHELL_STATUS_PATH, headers.get("Authorization"), self._clock.now_ms() // 1000,
                                          user_agent=headers.get("User-Agent"))
        except LegacyAuthError as exc:
            self._keyv_reads_again()
            return LocalAnswer(exc.legacy_status, exc.legacy_body)
        except LegacyDatabaseError as exc:
            self._keyv_unreadable(exc.reason)
            return self.hand_to_legacy("keyv_unreadable")
        self._keyv_reads_again()
        try:
            execute(command)
        except STORE_DID_NOT_TAKE as exc:
            return self.hand_to_legacy(SHADOW_FAILURE_LABELS.get(exc.code, "store_unavailable"))
        except BridgeError as exc:
            log.warning("primary callback not recorded: %s", exc.code)
            self._metrics.shadow_write_failed(None, "internal")
            return _error_500(exc.code)
        except Exception as exc:  # noqa: BLE001 - fail closed with 2.x's error shape, whatever went wrong
            log.error("primary callback not recorded: %s", type(exc).__name__)
            return _error_500("INTERNAL_ERROR")
        self.note_owned()
        self._on_commit()
        if self._handed is not None:
            log.warning("primary callbacks are answered by the bridge again (they went to 2.x: %s)", self._handed)
            self._handed = None
        return OK_2X

    def hand_to_legacy(self, reason: str) -> ToLegacy:
        """2.x answers this primary callback and is its record; counted, and logged when the reason changes."""
        self._metrics.primary_fallback(reason)
        if reason != self._handed:
            self._handed = reason
            log.warning("primary callbacks go to 2.x, which records them (%s); the bridge records them beside it",
                        reason)
        return ToLegacy(reason)

    def keep_fresh(self, every_s: float) -> Callable[[], None]:
        """Keep "does the bridge own an open execution" fresh off the callback path (LastKnown.keep_fresh)."""
        return self._owned.keep_fresh(every_s)

    def owns_active_runs(self) -> bool:
        """Whether any bridge-owned execution may still be open (read at most once a second)."""
        return self._owned.get()

    def note_owned(self) -> None:
        self._owned.put(True)

    def _keyv_unreadable(self, state: str) -> None:
        self._metrics.legacy_database_unavailable(state, "auth")
        if state != self._keyv_state:
            self._keyv_state = state
            log.warning("2.x's keyv.sqlite is %s: primary callbacks go to 2.x, which checks their tokens and "
                        "records them itself", state)

    def _keyv_reads_again(self) -> None:
        if self._keyv_state is not None:
            log.warning("2.x's keyv.sqlite reads again (it was %s)", self._keyv_state)
            self._keyv_state = None


def _error_500(code: str) -> LocalAnswer:
    body = json.dumps({"code": 500, "message": f"ql-bridge could not record this callback ({code})"},
                      separators=(",", ":")).encode()
    return LocalAnswer(500, body)
