"""PrimaryAnswerer: for executions the bridge owns, it answers the shell itself, fail-closed.

Authorisation is 2.x's own for /open/* (App token from the keyv cache, `crons` scope, expiry; the same
401 bodies). The Run facts and the projection outbox row commit together; a failure before commit
answers a 2.x-shaped 5xx and leaves nothing half-written.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Mapping

from bridge.callbacks.answers import OK_2X, LocalAnswer
from bridge.callbacks.routes import SHELL_STATUS_PATH
from bridge.domain.errors import BridgeError
from bridge.metrics import BridgeMetrics
from bridge.service.ports import Clock
from bridge.service.shadow import ShadowRecorder
from legacy_adapters.auth import LegacyTokenAuthority
from legacy_adapters.errors import LegacyAuthError

log = logging.getLogger("bridge.callbacks.primary")


class PrimaryAnswerer:
    def __init__(self, recorder: ShadowRecorder, auth: LegacyTokenAuthority, metrics: BridgeMetrics, clock: Clock,
                 on_commit: Callable[[], None], owned_ttl_s: float = 1.0) -> None:
        self._recorder = recorder
        self._auth = auth
        self._metrics = metrics
        self._clock = clock
        self._on_commit = on_commit
        self._ttl_s = owned_ttl_s
        self._lock = threading.Lock()
        self._owned: tuple[float, bool] = (float("-inf"), False)

    def answer(self, headers: Mapping[str, str] | None, record: Callable[[], object]) -> LocalAnswer:
        """Authorise like 2.x, then record; the shell gets {"code":200}, 2.x's 401, or a 2.x-shaped 500."""
        headers = headers or {}
        try:
            self._auth.check_open_request(SHELL_STATUS_PATH, headers.get("Authorization"), self._clock.now_ms() // 1000,
                                          user_agent=headers.get("User-Agent"))
        except LegacyAuthError as exc:
            return LocalAnswer(exc.legacy_status, exc.legacy_body)
        try:
            record()
        except BridgeError as exc:
            log.warning("primary callback not recorded: %s", exc.code)
            self._metrics.shadow_write_failed(None, "internal")
            return _error_500(exc.code)
        except Exception as exc:  # noqa: BLE001 - fail closed with 2.x's error shape, whatever went wrong
            log.error("primary callback not recorded: %s", type(exc).__name__)
            return _error_500("INTERNAL_ERROR")
        self.note_owned()
        self._on_commit()
        return OK_2X

    def owns_active_runs(self) -> bool:
        """Whether any bridge-owned execution may still be open (cached for a second)."""
        with self._lock:
            read_at, owned = self._owned
            if time.monotonic() - read_at < self._ttl_s:
                return owned
        owned = self._recorder.has_active_bridge_runs()
        with self._lock:
            self._owned = (time.monotonic(), owned)
        return owned

    def note_owned(self) -> None:
        with self._lock:
            self._owned = (time.monotonic(), True)


def _error_500(code: str) -> LocalAnswer:
    body = json.dumps({"code": 500, "message": f"ql-bridge could not record this callback ({code})"},
                      separators=(",", ":")).encode()
    return LocalAnswer(500, body)
