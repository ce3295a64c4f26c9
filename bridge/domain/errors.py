"""Every error the bridge raises on purpose, each with a stable ``code``.

    BridgeError
    ├── RunNotFoundError                 RUN_NOT_FOUND
    ├── RunVersionConflictError          RUN_VERSION_CONFLICT
    ├── InvalidRunTransitionError        INVALID_RUN_TRANSITION
    ├── InvalidAttemptTransitionError    INVALID_ATTEMPT_TRANSITION
    ├── AttemptConflictError             ATTEMPT_CONFLICT
    ├── IdempotencyKeyConflictError      IDEMPOTENCY_KEY_CONFLICT
    ├── PayloadValidationError           PAYLOAD_INVALID
    ├── RetryNotAllowedError             RETRY_NOT_ALLOWED
    ├── LegacyCallbackParseError         INVALID_LEGACY_CALLBACK   (legacy_adapters)
    ├── LegacyTimeError                  INVALID_LEGACY_TIME       (legacy_adapters)
    ├── LegacyDatabaseError              LEGACY_DATABASE           (legacy_adapters)
    ├── LegacyAuthError                  LEGACY_UNAUTHORIZED       (legacy_adapters)
    └── StorageError                     STORAGE_ERROR
        ├── StoreBusyError               STORE_BUSY
        ├── StoreUnavailableError        STORE_UNAVAILABLE
        └── SchemaMismatchError          SCHEMA_MISMATCH

Only the web layer maps codes to HTTP statuses; the CLI prints ``code: message``.
"""

from __future__ import annotations

from typing import Any


class BridgeError(Exception):
    """Base of every deliberate bridge error; ``details`` is safe to show (no secrets)."""

    code = "BRIDGE_ERROR"

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(message)
        self.message = message
        self.details = details


class RunNotFoundError(BridgeError):
    code = "RUN_NOT_FOUND"

    def __init__(self, run_id: str) -> None:
        super().__init__(f"run {run_id} does not exist", run_id=run_id)


class RunVersionConflictError(BridgeError):
    code = "RUN_VERSION_CONFLICT"

    def __init__(self, run_id: str, expected_version: int, current_version: int | None) -> None:
        super().__init__(
            f"run {run_id} is at version {current_version}, not {expected_version}",
            run_id=run_id,
            expected_version=expected_version,
            current_version=current_version,
        )


class InvalidRunTransitionError(BridgeError):
    code = "INVALID_RUN_TRANSITION"

    def __init__(self, run_id: str, from_status: str, to_status: str) -> None:
        super().__init__(
            f"run {run_id} cannot go from {from_status} to {to_status}",
            run_id=run_id,
            **{"from": from_status, "to": to_status},
        )


class InvalidAttemptTransitionError(BridgeError):
    code = "INVALID_ATTEMPT_TRANSITION"

    def __init__(self, attempt_id: str, from_status: str, to_status: str) -> None:
        super().__init__(
            f"attempt {attempt_id} cannot go from {from_status} to {to_status}",
            attempt_id=attempt_id,
            **{"from": from_status, "to": to_status},
        )


class AttemptConflictError(BridgeError):
    """The attempt's status or callback_sequence is not what the caller expected."""

    code = "ATTEMPT_CONFLICT"

    def __init__(self, attempt_id: str, expected: str, current: str) -> None:
        super().__init__(
            f"attempt {attempt_id} is {current}, not {expected}",
            attempt_id=attempt_id,
            expected=expected,
            current=current,
        )


class IdempotencyKeyConflictError(BridgeError):
    code = "IDEMPOTENCY_KEY_CONFLICT"

    def __init__(self, project_id: str, run_id: str) -> None:
        super().__init__(
            f"idempotency key of project {project_id} already names run {run_id} "
            "for a different request",
            project_id=project_id,
            run_id=run_id,
        )


class PayloadValidationError(BridgeError):
    code = "PAYLOAD_INVALID"

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"event payload field {field!r}: {reason}", field=field, reason=reason)


class RetryNotAllowedError(BridgeError):
    code = "RETRY_NOT_ALLOWED"

    def __init__(self, run_id: str, status: str) -> None:
        super().__init__(f"run {run_id} is {status}; only a failed, cancelled or timed-out run "
                         "can be retried", run_id=run_id, status=status)


class StorageError(BridgeError):
    code = "STORAGE_ERROR"


class StoreBusyError(StorageError):
    code = "STORE_BUSY"


class StoreUnavailableError(StorageError):
    code = "STORE_UNAVAILABLE"


class SchemaMismatchError(StorageError):
    code = "SCHEMA_MISMATCH"
