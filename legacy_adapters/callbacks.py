"""2.x v2.21.0's handling of ``PUT /open/crons/status`` bodies, reproduced as pure functions.

body-parser + celebrate/Joi + the route's parseInt coercion (docs/legacy-2x.md#the-status-callback,
#validation-refuses-extra-keys), the byte-exact body that ``shell/api.sh update_cron`` sends, and the log_path digest.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from contextlib import suppress
from dataclasses import dataclass
from decimal import Decimal
from html import escape
from typing import Any

from legacy_adapters.errors import (
    LegacyCallbackParseError,
    body_parser_strict_error,
    node_json,
    v8_json_parse_error,
)

# Joi validates the schema keys in declaration order, then reports unknown keys (abortEarly).
STATUS_KEYS = ("ids", "status", "pid", "log_path", "last_running_time", "last_execution_time", "exit_code")
_MAX_SAFE = 2**53 - 1
_JOI_NUMBER = re.compile(r"^\s*[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:e[+-]?[0-9]+)?\s*$", re.I)
# ECMAScript StrWhiteSpaceChar, which parseInt skips before the digits.
_JS_WS = (
    "\t\n\v\f\r \u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008"
    "\u2009\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"
)
_DEC_DIGITS = re.compile(r"[0-9]+")
_HEX_DIGITS = re.compile(r"[0-9a-fA-F]+")
# A JSON string (skipped whole, so brackets inside it are not structure) or one bracket.
_STRUCTURE = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[][{}]', re.S)
KEPT_DEPTH = 32  # far below the ~1000 levels Python's parser takes, far above what a body schema reads


@dataclass(frozen=True)
class StatusCallback:
    """A status body after Joi conversion and the route's parseInt; None for absent, null or NaN."""

    ids: tuple[int | float, ...] | None
    status: int | None
    pid: int | None
    pid_raw_present: bool
    log_path: str | None
    last_execution_time: int | float | None
    last_running_time: int | float | None
    exit_code: int | float | None
    # 2.x treats an absent key (undefined) and null differently, e.g. a missing
    # last_execution_time defaults to 0 and is written, a null one is dropped.
    present_keys: frozenset[str] = frozenset()

    @property
    def is_start(self) -> bool:
        """True for the shell's start callback (CrontabStatus.running)."""
        return self.status == 0

    @property
    def is_end(self) -> bool:
        """True for the shell's end callback (CrontabStatus.idle)."""
        return self.status == 1


def parse_status_body(raw: bytes) -> StatusCallback:
    """Parse a status body exactly as 2.x does. Raises LegacyCallbackParseError (2.x's 400 body)."""
    return validate_status_payload(decode_json_body(raw))


def decode_json_body(raw: bytes) -> Any:
    """body-parser ``json()`` (strict): {} when empty. Raises LegacyCallbackParseError.

    V8 parses any depth; Python's parser stops near a thousand levels. Past that, a valid body comes back
    with its containers below ``KEPT_DEPTH`` emptied (see ``_emptied_below``), so the route's Joi schema
    still rejects it with 2.x's own message, and an invalid one gets V8's message as usual.
    """
    text = raw.decode("utf-8", errors="replace").removeprefix("\ufeff")
    if not text:
        return {}
    if text.lstrip(" \t\n\r")[:1] in ("{", "["):
        try:
            return json.loads(text, parse_constant=_reject_constant)
        except ValueError:
            message = v8_json_parse_error(text) or "Unexpected token in JSON"
        except RecursionError:  # too deep for Python, not for V8: its scanner judges, then a shallower parse
            message = v8_json_parse_error(text) or ""
            if not message:
                with suppress(ValueError):
                    return json.loads(_emptied_below(text, KEPT_DEPTH), parse_constant=_reject_constant)
                message = "Unexpected token in JSON"
    else:
        message = body_parser_strict_error(text)
    raise LegacyCallbackParseError(None, message, node_json({"code": 400, "message": message}))


def _emptied_below(text: str, depth: int) -> str:
    """Valid JSON ``text`` with every container opened deeper than ``depth`` left empty (``[]`` or ``{}``).

    The status and stop schemas read two levels at most: Joi judges a container by its type at the level
    the schema names (``"ids[0]" must be a number``), so what it holds below never changes 2.x's answer.
    """
    kept, level, resume = [], 0, 0
    for token in _STRUCTURE.finditer(text):
        mark = token.group()
        if mark in ("[", "{"):
            level += 1
            if level == depth + 1:
                kept.append(text[resume : token.end()])
        elif mark in ("]", "}"):
            if level == depth + 1:
                resume = token.start()
            level -= 1
    kept.append(text[resume:])
    return "".join(kept)


def exit_code_as_given(value: int | float | None) -> int | float | None:
    """An exit code as 2.x keeps it: the JS number Joi accepted, stored as given (0.5 stays 0.5, 1e3 is 1000).

    2.x marks an instance ``error`` for any code other than 0, null or absent (back/services/cron.ts), fractions
    included, so a fraction must never be cut to an integer. A whole number comes back as an int.
    """
    if value is None:
        return None
    return int(value) if float(value).is_integer() else float(value)


def validate_status_payload(payload: Any) -> StatusCallback:
    """Joi for the status route, then the route's parseInt. Raises LegacyCallbackParseError."""
    if not isinstance(payload, dict):
        raise joi_error([], "must be of type object")
    ids = None
    if "ids" in payload:
        if not isinstance(payload["ids"], list):
            raise joi_error(["ids"], "must be an array")
        ids = tuple(_joi_number(v, ["ids", i]) for i, v in enumerate(payload["ids"]))
    status = _joi_string(payload, "status", required=True)
    pid = _joi_string(payload, "pid")
    log_path = _joi_string(payload, "log_path")
    numbers = {k: _joi_optional_number(payload, k) for k in ("last_running_time", "last_execution_time", "exit_code")}
    for key in payload:
        if key not in STATUS_KEYS:
            raise joi_error([key], "is not allowed")
    return StatusCallback(
        ids=ids,
        # The route: `body.status ? parseInt(body.status) : undefined`, same for pid.
        status=js_parse_int(status) if status else None,
        pid=js_parse_int(pid) if pid else None,
        pid_raw_present=bool(pid),
        log_path=log_path,
        present_keys=frozenset(payload),
        **numbers,
    )


def validate_id_array(payload: Any) -> tuple[int | float, ...]:
    """Joi ``array().items(number().required())`` as the body of ``/crons/run`` and ``/stop``."""
    if not isinstance(payload, list):
        raise joi_error([], "must be an array")
    return tuple(_joi_number(v, [i]) for i, v in enumerate(payload))


def js_parse_int(text: str) -> int | None:
    """JS ``parseInt(text)`` without radix; None stands for NaN ("''" -> None, "12abc" -> 12)."""
    s = text.lstrip(_JS_WS)
    sign = 1
    if s and s[0] in "+-":
        sign, s = (-1 if s[0] == "-" else 1), s[1:]
    hexadecimal = s[:2] in ("0x", "0X")
    match = (_HEX_DIGITS if hexadecimal else _DEC_DIGITS).match(s, 2 if hexadecimal else 0)
    if match is None:
        return None
    value = sign * int(match.group(), 16 if hexadecimal else 10)
    if abs(value) <= 2**53:
        return value
    # A JS number is a double: past 2**53 the digits are rounded, past ~1.8e308 it is Infinity.
    as_float = float(value) if abs(value) < 10**308 else math.inf
    return int(as_float) if math.isfinite(as_float) else None


def render_status_body(
    cron_id: int | str,
    status: int | str,
    pid: int | str | None = None,
    log_path: str = "",
    last_execution_time: int | str | None = None,
    running_time: int | str | None = None,
    exit_code: int | str | None = None,
) -> bytes:
    """The bytes ``shell/api.sh update_cron`` sends: string concatenation, no JSON escaping."""
    # Callers pass the id pre-quoted ("\"$ID\""); pid defaults to the two characters ''
    # (${3:-''}); the times default to 0; ,"exit_code" only when the 7th argument is set.
    pid_text = "''" if pid is None or pid == "" else str(pid)
    started = 0 if last_execution_time is None or last_execution_time == "" else last_execution_time
    runtime = 0 if running_time is None or running_time == "" else running_time
    body = (
        f'{{"ids":["{cron_id}"],"status":"{status}","pid":"{pid_text}",'
        f'"log_path":"{log_path}","last_execution_time":{started},'
        f'"last_running_time":{runtime}'
    )
    if exit_code is not None and exit_code != "":
        body += f',"exit_code":{exit_code}'
    return (body + "}").encode("utf-8")


def log_path_digest(log_path: str | None) -> str | None:
    """A stable 36-character sha256 hex prefix of a log_path, so raw paths are never stored."""
    if log_path is None:
        return None
    return hashlib.sha256(log_path.encode("utf-8", errors="surrogatepass")).hexdigest()[:36]


# --- Joi -------------------------------------------------------------------------------


def joi_error(path: list[str | int], text: str) -> LegacyCallbackParseError:
    """celebrate's 400 for a Joi failure at ``path``, with 2.x's exact body (docs/legacy-2x.md#callback-validation)."""
    label = "".join(f"[{p}]" if isinstance(p, int) else ("." if i else "") + p for i, p in enumerate(path)) or "value"
    message = f'"{label}" {text}'
    # celebrate's errors(): keys are detail.path.join('.') passed through escape-html.
    key = escape(".".join(str(p) for p in path)).replace("&#x27;", "&#39;")
    body = {
        "statusCode": 400,
        "error": "Bad Request",
        "message": "Validation failed",
        "validation": {"body": {"source": "body", "keys": [key], "message": message}},
    }
    return LegacyCallbackParseError(".".join(str(p) for p in path), message, node_json(body))


def _joi_string(payload: dict[str, Any], key: str, *, required: bool = False) -> str | None:
    if key not in payload:
        if required:
            raise joi_error([key], "is required")
        return None
    value = payload[key]
    if value is None and not required:  # .allow(null) on pid and log_path
        return None
    if not isinstance(value, str):
        raise joi_error([key], "must be a string")
    if value == "":
        raise joi_error([key], "is not allowed to be empty")
    return value


def _joi_optional_number(payload: dict[str, Any], key: str) -> int | float | None:
    value = payload.get(key)
    return None if value is None else _joi_number(value, [key])


def _joi_number(value: Any, path: list[str | int]) -> int | float:
    if isinstance(value, str):  # convert: on, from numeric strings only
        if not _JOI_NUMBER.match(value):
            raise joi_error(path, "must be a number")
        value = _coerce_numeric_string(value.strip(), path)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
        raise joi_error(path, "must be a number")
    if isinstance(value, float) and math.isinf(value):
        raise joi_error(path, "cannot be infinity")
    if abs(value) > _MAX_SAFE:
        raise joi_error(path, "must be a safe number")
    return int(value) if isinstance(value, float) and value.is_integer() else value


def _coerce_numeric_string(text: str, path: list[str | int]) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise joi_error(path, "must be a safe number")
    # Joi re-derives the string from the double and rejects digits the double cannot hold
    # (e.g. "9007199254740993"); exponent forms are only required to be finite here.
    if "e" not in text.lower():
        shown = _js_number_string(value)
        if "e" not in shown and shown != _joi_normalize_decimal(text):
            raise joi_error(path, "must be a safe number")
    return value


def _js_number_string(value: float) -> str:
    if value.is_integer() and abs(value) < 1e21:
        return str(int(value))
    if abs(value) >= 1e21 or abs(value) < 1e-6:
        return "e"  # JS prints these in exponent form; Joi then skips the round-trip check
    return format(Decimal(repr(value)), "f")


def _joi_normalize_decimal(text: str) -> str:
    text = re.sub(r"^\+", "", text)
    text = re.sub(r"\.0*$", "", text)
    text = re.sub(r"^(-?)\.([^.]*)$", r"\g<1>0.\2", text)
    text = re.sub(r"^(-?)0+([0-9])", r"\1\2", text)
    if "." in text and text.endswith("0"):
        text = text.rstrip("0")
    return "0" if text == "-0" else text


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")  # NaN / Infinity: Python accepts them, V8 does not
