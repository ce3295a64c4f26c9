"""The values a shadow write works on: one callback's facts, the context a Run is accepted with, and what the
write came to. Standard values only, so that a command carrying them can be kept and replayed
(bridge.callbacks.commands)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from bridge.domain.keys import execution_key
from bridge.domain.model import Mode, Owner
from bridge.service.ports import TaskSnapshot


@dataclass(frozen=True, slots=True)
class CallbackFacts:
    """One status callback for one cron id, already in milliseconds and with the log path digested."""

    cron_id: int
    pid: int | None
    log_ref: str | None
    started_at_ms: int | None  # from last_execution_time; None when 2.x sent 0 ("never")
    duration_ms: int | None  # from last_running_time
    exit_code: int | float | None  # as 2.x keeps it (legacy_adapters.callbacks.exit_code_as_given)
    received_at_ms: int
    log_path: str | None = None  # raw 2.x log_path: kept only for bridge-owned (primary) executions
    trapped: bool = False  # the shell's signal trap sent this end, as the seam block said (shell_report.py)

    @property
    def execution_key(self) -> str:
        return execution_key(self.cron_id, self.pid, self.log_ref, self.started_at_ms)

    @property
    def end_key(self) -> str:
        return f"legacy-end:{self.pid}:{self.log_ref}:{self.exit_code}:{self.started_at_ms}"


@dataclass(frozen=True, slots=True)
class ExecutionContext:
    """What a new Run is accepted with: origin (and why), mode, task identity."""

    origin: str
    evidence: str
    task_revision: str
    snapshot: TaskSnapshot | None = None
    mode: str = Mode.SHADOW.value
    executor_handle: str | None = None  # process identity of the shell, taken at its start callback
    # For an end without a pid (v2.17.0–v2.18.1): the pid 2.x's Crontabs row holds beside the end's own log path,
    # i.e. the pid its start callback wrote (2.x never writes the end's NaN pid), when the row still names it.
    row_pid: int | None = None

    @property
    def owner(self) -> str:
        """Who answers the shell for this execution, fixed now for its whole life."""
        return Owner.BRIDGE.value if self.mode == Mode.PRIMARY.value else Owner.LEGACY.value


class Outcome(StrEnum):
    STARTED = "started"
    CLOSED = "closed"
    BACKFILLED = "backfilled"
    DUPLICATE = "duplicate"
    LATE_IGNORED = "late_ignored"
    AMBIGUOUS = "ambiguous"
    UNMATCHED = "unmatched"
    CANCELLED = "cancelled"
    DEFERRED = "deferred"  # a signal exit kept until 2.x's evidence of a stop decides it


@dataclass(frozen=True, slots=True)
class ShadowResult:
    outcome: Outcome
    run_id: str | None = None
    origin: str | None = None
