"""Read models of the v3 API: the RunQueries port, its filters and pages, query-string parsing, and the
pure shaping of Runs, Attempts and events into JSON-ready dicts (cosmicpython ``views.py``).

Times: every ``*_ms`` instant also appears as an RFC 3339 UTC string under the name without ``_ms``.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol, TypeVar

from bridge.domain.errors import BridgeError
from bridge.domain.events import RunEvent
from bridge.domain.model import Origin, Run, RunAttempt, RunStatus

RUNS_LIMIT_DEFAULT, RUNS_LIMIT_MAX = 50, 200
EVENTS_LIMIT_DEFAULT, EVENTS_LIMIT_MAX = 100, 500
MAX_MS = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z, the last instant an RFC 3339 string can name
_MAX_BIGINT = 2**63 - 1
RUN_LIST_PARAMETERS = frozenset({"cron_id", "origin", "status", "since", "cursor", "limit"})
EVENT_LIST_PARAMETERS = frozenset({"after", "limit"})

# Never shown: keys and hashes that only the bridge's own correlation and leasing use.
INTERNAL_RUN_FIELDS = frozenset({"idempotency_key", "request_fingerprint"})
INTERNAL_ATTEMPT_FIELDS = frozenset({"callback_token_hash", "lease_token", "legacy_log_path"})  # paths stay in 2.x
INTERNAL_EVENT_FIELDS = frozenset({"dedupe_key"})
# "_ms" columns that hold a length of time, not an instant: they get no RFC 3339 sibling.
DURATION_FIELDS = frozenset({"duration_ms"})

_RUN_FIELDS = tuple(f.name for f in fields(Run) if f.name not in INTERNAL_RUN_FIELDS)
_ATTEMPT_FIELDS = tuple(f.name for f in fields(RunAttempt) if f.name not in INTERNAL_ATTEMPT_FIELDS)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_DIGITS = re.compile(r"[0-9]{1,19}")
# date, time, optional fraction (group 1), offset
_RFC3339 = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt ][0-9]{2}:[0-9]{2}:[0-9]{2}"
                      r"(\.[0-9]{1,9})?([Zz]|[+-][0-9]{2}:[0-9]{2})")
_CURSOR = re.compile(r"[A-Za-z0-9_-]{1,200}")
T = TypeVar("T")


class InvalidQueryError(BridgeError):
    """A query parameter of a v3 request is malformed or out of range."""

    code = "INVALID_QUERY"

    def __init__(self, parameter: str, reason: str) -> None:
        super().__init__(f"query parameter {parameter!r} {reason}", parameter=parameter)


@dataclass(frozen=True, slots=True)
class RunCursor:
    """The last Run of a page, as (created_at_ms, id); the next page starts strictly after it."""

    created_at_ms: int
    id: str

    def encode(self) -> str:
        raw = json.dumps([self.created_at_ms, self.id], separators=(",", ":")).encode("utf-8")
        return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")

    @classmethod
    def decode(cls, token: str) -> RunCursor:
        """Raises InvalidQueryError unless ``token`` is what ``encode`` returns."""
        try:
            if not _CURSOR.fullmatch(token):
                raise ValueError(token)
            created_at_ms, run_id = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
        except (ValueError, TypeError):  # binascii.Error and UnicodeDecodeError are ValueErrors
            raise InvalidQueryError("cursor", "is not a cursor this API returned") from None
        well_formed = (type(created_at_ms) is int and 0 <= created_at_ms <= MAX_MS
                       and isinstance(run_id, str) and 0 < len(run_id) <= 36)
        if not well_formed:
            raise InvalidQueryError("cursor", "is not a cursor this API returned")
        return cls(created_at_ms, run_id)


@dataclass(frozen=True, slots=True)
class RunFilters:
    cron_id: int | None = None  # 2.x's Crontabs id (runs.legacy_cron_id)
    origin: str | None = None
    status: str | None = None
    since_ms: int | None = None  # inclusive lower bound on created_at_ms


@dataclass(frozen=True, slots=True)
class PageRequest:
    limit: int = RUNS_LIMIT_DEFAULT
    after: RunCursor | None = None


@dataclass(frozen=True, slots=True)
class RunsPage:
    runs: list[dict[str, Any]]
    next_cursor: str | None  # None on the last page

    def to_json(self) -> dict[str, Any]:
        return {"runs": self.runs, "next_cursor": self.next_cursor}


@dataclass(frozen=True, slots=True)
class EventsPage:
    run_id: str
    events: list[dict[str, Any]]
    next_after: int | None  # pass back as ``after``; None on the last page

    def to_json(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "events": self.events, "next_after": self.next_after}


class RunQueries(Protocol):
    """Read-only views of the store; results are plain, JSON-ready dicts."""

    def list_runs(self, filters: RunFilters, page: PageRequest) -> RunsPage:
        """Runs newest first by (created_at_ms, id), at most ``page.limit``, strictly after ``page.after``."""
        ...

    def get_run(self, run_id: str) -> dict[str, Any]:
        """The Run with its Attempts in attempt order. Raises RunNotFoundError if there is no such Run."""
        ...

    def list_events(self, run_id: str, after: int, limit: int) -> EventsPage:
        """Events with sequence > ``after``, in sequence order. Raises RunNotFoundError if there is no such Run."""
        ...


# --- Parsing the query string (values as Flask's ``request.args.to_dict(flat=False)`` gives them) ----


def parse_run_list_query(args: Mapping[str, Sequence[str]]) -> tuple[RunFilters, PageRequest]:
    """Filters and page of ``GET /v3/runs``. Raises InvalidQueryError naming the first bad parameter."""
    values = single_values(args, RUN_LIST_PARAMETERS)
    filters = RunFilters(
        cron_id=optional_value(values, "cron_id", lambda raw: _whole("cron_id", raw, _MAX_BIGINT)),
        origin=optional_value(values, "origin", lambda raw: _choice("origin", raw, [o.value for o in Origin])),
        status=optional_value(values, "status", lambda raw: _choice("status", raw, [s.value for s in RunStatus])),
        since_ms=optional_value(values, "since", parse_since),
    )
    page = PageRequest(limit=page_limit(values, RUNS_LIMIT_DEFAULT, RUNS_LIMIT_MAX),
                       after=optional_value(values, "cursor", RunCursor.decode))
    return filters, page


def parse_event_query(args: Mapping[str, Sequence[str]]) -> tuple[int, int]:
    """(after, limit) of ``GET /v3/runs/<id>/events``. Raises InvalidQueryError naming the bad parameter."""
    values = single_values(args, EVENT_LIST_PARAMETERS)
    after = optional_value(values, "after", lambda raw: _whole("after", raw, _MAX_BIGINT))
    return after or 0, page_limit(values, EVENTS_LIMIT_DEFAULT, EVENTS_LIMIT_MAX)


def parse_since(raw: str) -> int:
    """Epoch milliseconds, or an RFC 3339 time with an offset; a fraction below a millisecond rounds up."""
    if _DIGITS.fullmatch(raw):
        return _whole("since", raw, MAX_MS)
    # An unencoded "+" in a query string arrives as a space: "...00.123 08:00" meant "+08:00".
    raw = re.sub(r"(:[0-9]{2}(?:\.[0-9]+)?) ([0-9]{2}:[0-9]{2})\Z", r"\1+\2", raw)
    match = _RFC3339.fullmatch(raw)
    if match is None:
        raise InvalidQueryError("since", "must be epoch milliseconds or an RFC 3339 time such as "
                                         "2026-12-02T10:00:00.123Z")
    whole_seconds = raw[: match.start(1)] + raw[match.end(1):] if match.group(1) else raw
    try:
        moment = datetime.fromisoformat(whole_seconds.upper().replace("Z", "+00:00"))
    except ValueError:
        raise InvalidQueryError("since", "is not a valid date and time") from None
    digits = (match.group(1) or ".")[1:]
    fraction_ms = -(-int(digits or "0") * 1000 // int(10 ** len(digits)))  # ceiling, in whole integers
    return int((moment - _EPOCH) // timedelta(milliseconds=1)) + fraction_ms


def single_values(args: Mapping[str, Sequence[str]], known: frozenset[str]) -> dict[str, str]:
    """The query's parameters, each known here and given once (shared by the Run and StepRun views)."""
    for name, given in args.items():
        if name not in known:
            raise InvalidQueryError(name, f"is not known here (known: {', '.join(sorted(known))})")
        if len(given) != 1:
            raise InvalidQueryError(name, "must be given once")
    return {name: given[0] for name, given in args.items()}


def optional_value(values: Mapping[str, str], name: str, parse: Callable[[str], T]) -> T | None:
    """``parse`` of the parameter, or None when it is absent or empty."""
    raw = values.get(name)
    if raw is None or raw == "":
        return None
    return parse(raw)


def _whole(name: str, raw: str, high: int) -> int:
    if not _DIGITS.fullmatch(raw) or int(raw) > high:
        raise InvalidQueryError(name, f"must be a whole number from 0 to {high}")
    return int(raw)


def _choice(name: str, raw: str, allowed: Sequence[str]) -> str:
    if raw not in allowed:
        raise InvalidQueryError(name, f"must be one of {', '.join(allowed)}")
    return raw


def page_limit(values: Mapping[str, str], default: int, high: int) -> int:
    """``limit``: a whole number from 1 to ``high``, ``default`` when absent."""
    raw = values.get("limit")
    if raw is None or raw == "":
        return default
    if not _DIGITS.fullmatch(raw) or not 1 <= int(raw) <= high:
        raise InvalidQueryError("limit", f"must be a whole number from 1 to {high}")
    return int(raw)


# --- Shaping ------------------------------------------------------------------------------------------


def rfc3339_ms(ms: int | None) -> str | None:
    """UTC milliseconds as ``2026-12-02T10:00:00.123Z``; None stays None."""
    if ms is None:
        return None
    moment = _EPOCH + timedelta(milliseconds=ms)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def with_times(values: Mapping[str, Any]) -> dict[str, Any]:
    """``values`` plus, for each instant ``x_ms``, a sibling ``x`` in RFC 3339."""
    shaped = dict(values)
    for name, value in values.items():
        if name.endswith("_ms") and name not in DURATION_FIELDS:
            shaped[name.removesuffix("_ms")] = rfc3339_ms(value)
    return shaped


def run_view(run: Run) -> dict[str, Any]:
    values = {name: getattr(run, name) for name in _RUN_FIELDS}
    values["status"] = run.status.value
    return with_times(values)


def attempt_view(attempt: RunAttempt) -> dict[str, Any]:
    values = {name: getattr(attempt, name) for name in _ATTEMPT_FIELDS}
    values["status"] = attempt.status.value
    return with_times(values)


def run_detail_view(run: Run, attempts: Sequence[RunAttempt]) -> dict[str, Any]:
    return {**run_view(run), "attempts": [attempt_view(a) for a in attempts]}


def event_view(event: RunEvent) -> dict[str, Any]:
    return with_times({
        "id": event.id, "run_id": event.run_id, "sequence": event.sequence, "type": event.type.value,
        "actor_type": event.actor_type.value, "actor_id": event.actor_id, "attempt_id": event.attempt_id,
        "step_run_id": event.step_run_id, "payload": dict(event.payload), "created_at_ms": event.created_at_ms,
    })
