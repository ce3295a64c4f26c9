"""Per-origin feature flags (off → shadow → primary): audited changes and the promotion gate.

Unknown flag data means off, never primary; flags once read stay in force while a refresh fails
(`CachedModes`). Promotion to primary needs the origin's latest cutover report to pass every gate; a refusal
names each failing gate.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from bridge.domain.errors import BridgeError
from bridge.domain.model import Mode, Origin
from bridge.service.last_known import LastKnown

ORIGINS = tuple(o.value for o in Origin)


class InvalidFlagChangeError(BridgeError):
    code = "INVALID_FLAG_CHANGE"


class PromotionRefusedError(BridgeError):
    code = "PROMOTION_REFUSED"

    def __init__(self, origin: str, failing: list[str], reason: str) -> None:
        gates = ", ".join(failing)
        super().__init__(f"promotion of {origin} to primary refused: {reason}" + (f" (failing gates: {gates})"
                                                                                  if failing else ""),
                         origin=origin, failing_gates=failing)


@dataclass(frozen=True, slots=True)
class FlagChange:
    origin: str
    old: str | None
    new: str
    actor: str
    reason: str
    at_ms: int


class FlagStore(Protocol):
    def modes(self) -> dict[str, str]:
        """Stored mode per origin (origins without a row are absent)."""
        ...

    def change(self, change: FlagChange) -> str | None:
        """Set the origin's mode and append the audit row in one transaction; returns the old mode."""
        ...

    def audit(self, origin: str | None, limit: int) -> list[FlagChange]:
        """Newest first."""
        ...

    def setting(self, key: str) -> str | None: ...

    def put_setting(self, key: str, value: str, at_ms: int) -> None: ...

    def latest_report(self) -> Mapping[str, Any] | None:
        """The body of the newest cutover report, or None."""
        ...


SEEDED_KEY = "flags_seeded_at_ms"


class FlagService:
    def __init__(self, store: FlagStore, clock: Callable[[], int], *,
                 primary_refusal: str | None = "primary mode is not available yet") -> None:
        self._store = store
        self._now_ms = clock
        self._primary_refusal = primary_refusal  # None: promotion is judged by the gates alone

    def modes(self) -> dict[str, Mode]:
        """Every origin's mode; a missing or unknown value reads as off."""
        stored = self._store.modes()
        return {origin: _mode_or_off(stored.get(origin)) for origin in ORIGINS}

    def seed_once(self, shadow_origins: frozenset[str]) -> list[FlagChange]:
        """Seed from BRIDGE_SHADOW_ORIGINS on the first start only; later starts keep the table's truth."""
        if self._store.setting(SEEDED_KEY) is not None:
            return []
        changes = [self.set_mode(origin, Mode.SHADOW.value, actor="bootstrap",
                                 reason="seeded from BRIDGE_SHADOW_ORIGINS at first start")
                   for origin in sorted(shadow_origins)]
        self._store.put_setting(SEEDED_KEY, str(self._now_ms()), self._now_ms())
        return changes

    def set_mode(self, origin: str, mode: str, *, actor: str, reason: str) -> FlagChange:
        """Raises InvalidFlagChangeError for bad input and PromotionRefusedError when a gate fails."""
        origin, mode, actor, reason = origin.strip(), mode.strip(), actor.strip(), reason.strip()
        if origin not in ORIGINS:
            raise InvalidFlagChangeError(f"unknown origin {origin[:40]!r}; known: {', '.join(ORIGINS)}",
                                         field="origin")
        if mode not in {m.value for m in Mode}:
            raise InvalidFlagChangeError(f"unknown mode {mode[:20]!r}; use off, shadow or primary", field="mode")
        if not actor or not reason:
            raise InvalidFlagChangeError("a flag change needs an actor and a reason", field="actor" if not actor
                                         else "reason")
        for name, value in (("actor", actor), ("reason", reason)):
            if not storable_text(value):
                raise InvalidFlagChangeError(f"the {name} must be text without NUL characters or unpaired "
                                             "surrogates", field=name)
        if mode == Mode.PRIMARY.value:
            self._check_promotion(origin)
        change = FlagChange(origin, None, mode, actor[:128], reason[:500], self._now_ms())
        old = self._store.change(change)
        return FlagChange(origin, old, mode, change.actor, change.reason, change.at_ms)

    def audit(self, origin: str | None = None, limit: int = 50) -> list[FlagChange]:
        return self._store.audit(origin, limit)

    def setting(self, key: str) -> str | None:
        return self._store.setting(key)

    def put_setting(self, key: str, value: str) -> None:
        self._store.put_setting(key, value, self._now_ms())

    def enabled_since(self, origin: str) -> int | None:
        """When the origin last left off (its current stretch of shadow/primary began); None while off."""
        since = None
        for entry in self._store.audit(origin, 200):  # newest first
            if entry.new == Mode.OFF.value:
                break
            since = entry.at_ms
            if entry.old in (None, Mode.OFF.value):
                break
        return since

    def _check_promotion(self, origin: str) -> None:
        report = self._store.latest_report()
        entry = next((o for o in (report or {}).get("origins", []) if o.get("origin") == origin), None)
        if entry is None:
            raise PromotionRefusedError(origin, [], "no cutover report covers this origin yet; run `bridge report`")
        failing = [g.get("gate", "?") for g in entry.get("gates", []) if not g.get("passed")]
        if entry.get("seam"):  # gates measured on the few executions that reached the bridge say little
            raise PromotionRefusedError(origin, ["seam"], str(entry["seam"]))
        if failing or not entry.get("gates"):
            unavailable = "" if self._primary_refusal is None else f"; {self._primary_refusal}"
            raise PromotionRefusedError(origin, failing or ["no_gates"],
                                        "its latest report does not pass every gate" + unavailable)
        if self._primary_refusal is not None:
            raise PromotionRefusedError(origin, ["release"], self._primary_refusal)


def storable_text(value: str) -> bool:
    """Whether every store keeps ``value`` as given: PostgreSQL text holds no NUL (SQLite would keep it),
    and neither driver can send an unpaired surrogate (a JSON ``"\\ud800"``, or undecodable bytes in argv)."""
    if "\x00" in value:
        return False
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _mode_or_off(value: str | None) -> Mode:
    try:
        return Mode(value) if value is not None else Mode.OFF
    except ValueError:
        return Mode.OFF


class CachedModes:
    """ModeSource over the flag table, re-read at most once per ``ttl_s``.

    The flags are the operator's decision, so a failed read never changes them: the last flags read stay in
    force (``LastKnown``), however long the store stays unreadable; past ``max_stale_s`` readiness reports
    them stale. Only before any read has succeeded is every origin off (unknown configuration means off).
    """

    def __init__(self, flags: FlagService, ttl_s: float = 1.0, *, max_stale_s: float = 60.0,
                 on_failure: Callable[[str], None] = lambda _error: None,
                 clock: Callable[[], float] = time.monotonic,
                 refresh_in: Callable[[Callable[[], None]], None] | None = None) -> None:
        """Reads the flags once now (start-up); afterwards a refresh runs off the callers' threads
        (``refresh_in``; LastKnown's own thread by default), so the callback path never waits for the store."""
        self.cache: LastKnown[dict[str, Mode]] = LastKnown(flags.modes, what="flags", fallback={}, ttl_s=ttl_s,
                                                           max_stale_s=max_stale_s, on_failure=on_failure,
                                                           clock=clock, refresh_in=refresh_in)

    def mode_for(self, origin: str) -> Mode:
        return self.cache.get().get(origin, Mode.OFF)

    def any_enabled(self) -> bool:
        return any(mode is not Mode.OFF for mode in self.cache.get().values())
