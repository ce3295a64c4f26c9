"""StepRun (docs/stepruns.md): the immutable ``qinglong/step-run@v1`` record, its closed state machine and its limits.

The record is data about a step, never the step: no handler, no input text, no secret, no exception text.
Its digest is the SHA-256 of its canonical JSON (sorted keys, no whitespace, UTF-8) without the digest.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from enum import StrEnum
from typing import Any

from bridge.domain.step_run_errors import StepRunIntegrityError, StepRunValidationError

SCHEMA_ID = "qinglong/step-run@v1"
STEP_RUN_LIMIT = 128  # StepRuns per Run
STEP_ATTEMPT_LIMIT = 64  # Attempts (dispatches into running) per StepRun


class StepRunKind(StrEnum):
    TASK = "task"
    TOOL = "tool"
    MODEL = "model"
    AGENT = "agent"
    CONDITION = "condition"
    APPROVAL = "approval"
    SUBWORKFLOW = "subworkflow"


class StepRunStatus(StrEnum):
    PENDING = "pending"
    READY = "ready"
    WAITING_APPROVAL = "waiting_approval"
    RUNNING = "running"
    LOST = "lost"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    TIMED_OUT = "timed_out"
    SKIPPED = "skipped"


_S = StepRunStatus
# pending → ready → waiting_approval | running → lost | terminal (docs/run-state.md#steprun-record-and-states), written
# out move by move with the reason each move exists. STEP_RUN_TRANSITIONS is derived from these rows, so no move lacks a
# reason.
STEP_RUN_MOVES: Mapping[StepRunStatus, Mapping[StepRunStatus, str]] = {
    _S.PENDING: {
        _S.READY: "its inputs and dependencies are settled, so it may be dispatched",
        _S.SKIPPED: "the workflow decided not to run it (a branch not taken) before it was ready",
        _S.CANCELLED: "the Run or the workflow was cancelled before it was ready",
    },
    _S.READY: {
        _S.RUNNING: "dispatched: an Attempt starts executing it (attempt_count + 1, at most STEP_ATTEMPT_LIMIT)",
        _S.WAITING_APPROVAL: "it needs a human decision before it may run (an approval step, a gated tool)",
        _S.SKIPPED: "a branch decided after it was ready but before it was dispatched",
        _S.CANCELLED: "cancelled before it was dispatched",
    },
    _S.WAITING_APPROVAL: {
        # Approval leads back to ready, never straight to running: dispatching is its own recorded decision
        # and the only move that counts an Attempt, so an approval cannot start work no dispatcher chose.
        _S.READY: "approved: it may now be dispatched",
        _S.FAILED: "rejected (error_code approval_rejected): a refusal is the step's failure, not a cancel",
        _S.CANCELLED: "the Run or the workflow was cancelled while the decision was open",
        _S.TIMED_OUT: "nobody decided before its deadline",
    },
    _S.RUNNING: {
        _S.SUCCEEDED: "its Attempt finished and produced its result",
        _S.FAILED: "its Attempt failed and the step will not be retried",
        _S.CANCELLED: "cancelled while running (stopped after this commits, docs/run-state.md#durable-cancellation)",
        _S.TIMED_OUT: "it ran past its deadline",
        _S.LOST: "its executor cannot be inspected (a worker gone, a restart): not an end, it needs reconciling",
    },
    _S.LOST: {
        # As a lost Run (docs/run-state.md#run-statuses-and-transitions): the reconciler settles it; a lost step never
        # silently resumes running.
        _S.READY: "the reconciler proved it is not running and it may be retried: a new dispatch, a new Attempt",
        _S.FAILED: "it may not be retried (not idempotent, or its attempts are used up)",
        _S.CANCELLED: "the Run was cancelled while the step was lost",
    },
    # Terminal: immutable. A retry of a finished step is a new StepRun (or a new Run,
    # docs/run-state.md#terminal-runs-and-retries).
    _S.SUCCEEDED: {},
    _S.FAILED: {},
    _S.CANCELLED: {},
    _S.TIMED_OUT: {},
    _S.SKIPPED: {},
}
STEP_RUN_TRANSITIONS: Mapping[StepRunStatus, frozenset[StepRunStatus]] = {
    status: frozenset(targets) for status, targets in STEP_RUN_MOVES.items()
}
STEP_RUN_TERMINAL: frozenset[StepRunStatus] = frozenset(s for s, t in STEP_RUN_TRANSITIONS.items() if not t)
# The only statuses that may carry an error code: the ends that are not success, and lost.
STEP_RUN_ERROR_STATUSES: frozenset[StepRunStatus] = frozenset({_S.FAILED, _S.CANCELLED, _S.TIMED_OUT, _S.LOST})


def step_run_can_go(from_status: StepRunStatus, to_status: StepRunStatus) -> bool:
    return to_status in STEP_RUN_TRANSITIONS[from_status]


# --- What a record may hold ----------------------------------------------------------------------------------

UUID7 = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}")
RUN_ID = re.compile(r"[0-9A-Za-z][0-9A-Za-z-]{0,35}")
# A reference to content kept behind the Artifact boundary, never the content itself.
REF = re.compile(r"artifact:[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
# A display name: words, spaces and a few separators; no quotes, braces, '=', newlines or other controls,
# which is what commands, input text, tracebacks and key=value secrets are made of.
STEP_KEY = re.compile(r"[\w.:/#()-](?:[\w .:/#()-]{0,126}[\w.:/#()-])?")
# A long unbroken run of token characters reads as a credential (API keys, JWT parts, hex secrets).
_OPAQUE = re.compile(r"[A-Za-z0-9+/_-]{32,}")
_EXCEPTION_WORDS = re.compile(r"(?i)traceback|exception|error:")
# A stable code (docs/run-state.md#actors-and-error-codes), never a message
ERROR_CODE = re.compile(r"[a-z][a-z0-9_]{0,63}")
MAX_MS = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z


_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def canonical_json(value: Mapping[str, Any]) -> str:
    """Sorted keys, no whitespace, non-ASCII kept as UTF-8: the one text a digest is taken over."""
    return _CANONICAL.encode(value)


def sha256_hex(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def check_pattern(name: str, value: object, pattern: re.Pattern[str], what: str) -> None:
    """Raises StepRunValidationError naming the field (never its value) unless ``value`` is such a string."""
    if not isinstance(value, str) or not pattern.fullmatch(value):
        raise StepRunValidationError(name, f"must be {what}")


def check_step_key(value: object) -> None:
    check_pattern("step_key", value, STEP_KEY, "a display name of 1-128 words, spaces and . : / # ( ) -")
    assert isinstance(value, str)
    if _OPAQUE.search(value):
        raise StepRunValidationError("step_key", "looks like it holds a credential (a long opaque token)")
    if _EXCEPTION_WORDS.search(value):
        raise StepRunValidationError("step_key", "looks like exception text")


def check_ref(name: str, value: object) -> None:
    if value is not None:
        check_pattern(name, value, REF, "a reference artifact:<uuid>, never content")


def check_ms(name: str, value: object, *, optional: bool = False) -> None:
    if value is None and optional:
        return
    if type(value) is not int or not 0 <= value <= MAX_MS:
        raise StepRunValidationError(name, "must be UTC milliseconds")


def _check_count(name: str, value: object, high: int) -> None:
    if type(value) is not int or not 0 <= value <= high:
        raise StepRunValidationError(name, f"must be a whole number from 0 to {high}")


@dataclass(frozen=True, slots=True)
class StepRun:
    """One logical step of a Run's workflow; ``id`` is its identity (never ``(run_id, step_key)``)."""

    id: str
    run_id: str
    step_key: str
    kind: StepRunKind
    status: StepRunStatus
    version: int
    attempt_count: int
    created_at_ms: int
    updated_at_ms: int
    input_ref: str | None = None
    output_ref: str | None = None
    error_code: str | None = None
    started_at_ms: int | None = None
    finished_at_ms: int | None = None
    digest: str = field(init=False, default="")
    _json: str = field(init=False, default="", repr=False, compare=False)

    def __post_init__(self) -> None:
        self._validate()
        body = canonical_json(self.body())
        digest = sha256_hex(body)
        object.__setattr__(self, "digest", digest)
        # The stored JSON is the body with "digest" in its sorted place, right after "created_at_ms": the two
        # keys before it hold whole numbers, so the first ',"error_code":' is the key (one encoding, not two).
        at = body.index(',"error_code":')
        object.__setattr__(self, "_json", f'{body[:at]},"digest":"{digest}"{body[at:]}')

    def _validate(self) -> None:
        check_pattern("id", self.id, UUID7, "a UUIDv7")
        check_pattern("run_id", self.run_id, RUN_ID, "a Run id")
        check_step_key(self.step_key)
        if not isinstance(self.kind, StepRunKind) or not isinstance(self.status, StepRunStatus):
            raise StepRunValidationError("kind" if not isinstance(self.kind, StepRunKind) else "status",
                                         "must be one of the v1 values")
        _check_count("version", self.version, 2**62)
        _check_count("attempt_count", self.attempt_count, STEP_ATTEMPT_LIMIT)
        check_ref("input_ref", self.input_ref)
        check_ref("output_ref", self.output_ref)
        if self.error_code is not None:
            check_pattern("error_code", self.error_code, ERROR_CODE, "a lowercase code, never a message")
            if self.status not in STEP_RUN_ERROR_STATUSES:
                raise StepRunValidationError("error_code", f"is not held by a {self.status.value} step run")
        for name in ("created_at_ms", "updated_at_ms"):
            check_ms(name, getattr(self, name))
        for name in ("started_at_ms", "finished_at_ms"):
            check_ms(name, getattr(self, name), optional=True)
        self._validate_lifecycle()

    def _validate_lifecycle(self) -> None:
        """Fields that follow from the status: an Attempt has started it, an end has finished it."""
        if (self.attempt_count > 0) != (self.started_at_ms is not None):
            raise StepRunValidationError("started_at_ms", "is set exactly when an attempt has run")
        if (self.status in STEP_RUN_TERMINAL) != (self.finished_at_ms is not None):
            raise StepRunValidationError("finished_at_ms", "is set exactly when the step run has ended")
        if self.status in (_S.RUNNING, _S.LOST, _S.SUCCEEDED) and self.attempt_count == 0:
            raise StepRunValidationError("attempt_count", f"cannot be 0 for a {self.status.value} step run")
        if self.updated_at_ms < self.created_at_ms:
            raise StepRunValidationError("updated_at_ms", "is before created_at_ms")

    def body(self) -> dict[str, Any]:
        """The record without its digest, as JSON values."""
        values = {f.name: getattr(self, f.name) for f in _BODY_FIELDS}
        values["kind"], values["status"], values["schema"] = self.kind.value, self.status.value, SCHEMA_ID
        return values

    def to_json(self) -> str:
        """The canonical JSON the store keeps: the body and its digest."""
        return self._json

    @classmethod
    def from_json(cls, text: str, where: str = "record") -> StepRun:
        """A stored record, checked whole. Raises StepRunIntegrityError if it is not an intact v1 record."""
        try:
            values = json.loads(text)
            if not isinstance(values, dict) or set(values) != RECORD_KEYS:
                raise StepRunValidationError("record", "must hold exactly the v1 fields")
            if values.pop("schema") != SCHEMA_ID:
                raise StepRunValidationError("schema", f"must be {SCHEMA_ID}")
            stored = values.pop("digest")
            record = cls(**{**values, "kind": StepRunKind(values["kind"]), "status": StepRunStatus(values["status"])})
        except (ValueError, TypeError, StepRunValidationError) as exc:
            raise StepRunIntegrityError(where, "it is not a valid qinglong/step-run@v1 record") from exc
        if stored != record.digest or record.to_json() != text:
            raise StepRunIntegrityError(where, "its digest or canonical form does not match its content")
        return record

    @property
    def is_terminal(self) -> bool:
        return self.status in STEP_RUN_TERMINAL

    def evolve(self, **changes: Any) -> StepRun:
        return replace(self, **changes)


_BODY_FIELDS = tuple(f for f in fields(StepRun) if f.name not in ("digest", "_json"))
RECORD_KEYS = frozenset({f.name for f in _BODY_FIELDS} | {"schema", "digest"})
