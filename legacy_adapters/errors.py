"""Errors raised by the 2.x adapters, and the Node-side text that fills 2.x's own error bodies.

``node_json`` is JSON.stringify; ``v8_json_parse_error`` is the message Node 20's JSON.parse throws.

    BridgeError (bridge.domain.errors)
    ├── LegacyCallbackParseError   INVALID_LEGACY_CALLBACK   .legacy_body = 2.x's 400 bytes
    ├── LegacyTimeError            INVALID_LEGACY_TIME
    ├── LegacyDatabaseError        LEGACY_DATABASE
    └── LegacyAuthError            LEGACY_UNAUTHORIZED       .legacy_body = 2.x's 401 bytes
"""

from __future__ import annotations

import json
import re
from typing import Any, NoReturn

from bridge.domain.errors import BridgeError

_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def node_json(value: Any) -> bytes:
    """Serialize like Node's ``JSON.stringify``: no spaces, raw UTF-8, lone surrogates escaped."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    # Well-formed JSON.stringify (Node >= 12) writes a lone surrogate as a lowercase
    # \udXXX escape; Python would emit it raw and then fail to encode it as UTF-8.
    text = _LONE_SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)
    return text.encode("utf-8")


class LegacyCallbackParseError(BridgeError):
    """A status callback body that 2.x would answer with HTTP 400."""

    code = "INVALID_LEGACY_CALLBACK"

    def __init__(self, field: str | None, legacy_message: str, legacy_body: bytes) -> None:
        where = "body" if field is None else (f"field {field!r}" if field else "top level")
        super().__init__(
            f"2.x rejects the callback ({where}): {legacy_message}", field=field, legacy_message=legacy_message
        )
        self.field = field
        self.legacy_message = legacy_message
        self.legacy_body = legacy_body
        self.legacy_status = 400


class LegacyTimeError(BridgeError):
    """A 2.x time value that cannot be converted; the value itself is never echoed."""

    code = "INVALID_LEGACY_TIME"

    def __init__(self, field: str, reason: str, kind: str) -> None:
        super().__init__(
            f"legacy time field {field!r} is not usable: {reason} ({kind})", field=field, reason=reason, kind=kind
        )
        self.field = field
        self.reason = reason
        self.kind = kind


class LegacyDatabaseError(BridgeError):
    """The 2.x database is missing, is not a 2.x database, or is in an unsupported state."""

    code = "LEGACY_DATABASE"

    def __init__(self, path: str, reason: str, detail: str = "") -> None:
        text = f"legacy database {path}: {reason}" + (f" ({detail})" if detail else "")
        super().__init__(text, path=path, reason=reason)
        self.path = path
        self.reason = reason


class LegacyAuthError(BridgeError):
    """2.x's ``/open/*`` token check failed; ``legacy_body`` is the exact 401 body 2.x sends."""

    code = "LEGACY_UNAUTHORIZED"

    def __init__(self, legacy_message: str, reason: str) -> None:
        super().__init__(f"2.x rejects the token: {reason}", reason=reason, legacy_message=legacy_message)
        self.legacy_message = legacy_message
        self.reason = reason
        self.legacy_body = node_json({"code": 401, "message": legacy_message})
        self.legacy_status = 401


# --- The message part of 2.x's 400 for a malformed body: body-parser over V8 JSON.parse ----


def body_parser_strict_error(text: str) -> str:
    """body-parser (strict) rejecting a body whose first character is not '{' or '['."""
    # body-parser's createStrictSyntaxError: parse the body with everything from the first
    # non-space character replaced by '#', then put the original characters back.
    units = _utf16_units(text)
    first = units.lstrip(" \t\n\r")[:1]
    index = units.find(first) if first else -1
    partial = units[:index] + "#" * (len(units) - index) if index != -1 else ""
    message = v8_json_parse_error(partial) or ""
    restored = re.sub("#+", lambda m: units[index : index + len(m.group())], message)
    return _from_utf16_units(restored)


def v8_json_parse_error(text: str) -> str | None:
    """The message Node 20's ``JSON.parse(text)`` throws, or None when it parses."""
    try:
        _V8JsonScanner(_utf16_units(text)).run()
    except _V8JsonError as error:
        return _from_utf16_units(error.message)
    return None


def _utf16_units(text: str) -> str:
    # V8 positions and context windows count UTF-16 code units, not code points.
    data = text.encode("utf-16-le", errors="surrogatepass")
    return (
        "".join(chr(data[i] | data[i + 1] << 8) for i in range(0, len(data), 2))
        if any(ord(c) > 0xFFFF for c in text)
        else text
    )


def _from_utf16_units(units: str) -> str:
    return units.encode("utf-16-le", errors="surrogatepass").decode("utf-16-le", "surrogatepass")


class _V8JsonError(Exception):
    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class _V8JsonScanner:
    """Walks JSON like V8's JsonParser to pick the same error template and position."""

    _SPECIAL = ("[object Object]", "undefined", "Infinity", "NaN")
    _LITERALS = {"t": "true", "f": "false", "n": "null"}

    def __init__(self, s: str) -> None:
        self.s, self.i = s, 0

    def at(self) -> str:
        return self.s[self.i] if self.i < len(self.s) else ""

    def skip_ws(self) -> None:
        while self.at() in (" ", "\t", "\n", "\r"):
            self.i += 1

    def fail(self, template: str | None = None) -> NoReturn:
        # ReportUnexpectedToken: an explicit template wins, even at the end of input.
        if template is not None:
            raise _V8JsonError(f"{template} at position {self.i}")
        c, s, pos = self.at(), self.s, self.i
        if not c:
            raise _V8JsonError("Unexpected end of JSON input")
        if c == '"':
            raise _V8JsonError(f"Unexpected string in JSON at position {pos}")
        if c == "-" or "0" <= c <= "9":
            raise _V8JsonError(f"Unexpected number in JSON at position {pos}")
        if s in self._SPECIAL:
            raise _V8JsonError(f'"{s}" is not valid JSON')
        if len(s) < 21:
            raise _V8JsonError(f"Unexpected token '{c}', \"{s}\" is not valid JSON")
        head = "" if pos < 10 else "..."
        tail = "..." if pos < len(s) - 10 else ""
        window = s[max(pos - 10, 0) : pos + 10] if tail else s[pos - 10 :]
        raise _V8JsonError(f"Unexpected token '{c}', {head}\"{window}\"{tail} is not valid JSON")

    def run(self) -> None:
        stack: list[str] = []
        while True:
            if self.produce(stack):
                continue
            while True:  # consume finished values, closing containers
                self.skip_ws()
                if not stack:
                    if self.at():
                        self.fail("Unexpected non-whitespace character after JSON")
                    return
                if self.at() == ",":
                    self.i += 1
                    if stack[-1] == "o":
                        self.key("Expected double-quoted property name in JSON", None)
                    break
                kind = stack.pop()
                if self.at() != ("}" if kind == "o" else "]"):
                    self.fail(
                        "Expected ',' or '}' after property value in JSON"
                        if kind == "o"
                        else "Expected ',' or ']' after array element in JSON"
                    )
                self.i += 1

    def produce(self, stack: list[str]) -> bool:
        """Scan one value; True when a container was opened and its first member is next."""
        self.skip_ws()
        c = self.at()
        if c in ("{", "["):
            self.i += 1
            self.skip_ws()
            if self.at() == ("}" if c == "{" else "]"):
                self.i += 1
                return False
            if c == "{":
                self.key("Expected property name or '}' in JSON", "Expected ':' after property name in JSON")
            stack.append("o" if c == "{" else "a")
            return True
        if c == '"':
            self.i += 1
            self.string()
        elif c == "-" or "0" <= c <= "9":
            self.number()
        elif c and c in self._LITERALS:
            self.literal(self._LITERALS[c])
        else:
            self.fail()
        return False

    def key(self, missing: str, colon: str | None) -> None:
        self.skip_ws()
        if self.at() != '"':
            self.fail(missing)
        self.i += 1
        self.string()
        self.skip_ws()
        if self.at() != ":":
            self.fail(colon)  # later keys use ExpectNext(COLON) without a template
        self.i += 1

    def string(self) -> None:
        while True:
            c = self.at()
            if not c:
                self.fail("Unterminated string in JSON")
            self.i += 1
            if c == '"':
                return
            if c == "\\":
                e = self.at()
                if not e or ord(e) > 0xFF:
                    self.fail()
                if e == "u":
                    for _ in range(4):
                        self.i += 1
                        if not self.at() or self.at() not in "0123456789abcdefABCDEF":
                            self.fail("Bad Unicode escape in JSON")
                elif e not in '"\\/bfnrt':
                    self.fail("Bad escaped character in JSON")
                self.i += 1
            elif ord(c) < 0x20:
                self.i -= 1
                self.fail("Bad control character in string literal in JSON")

    def digits(self) -> bool:
        start = self.i
        while "0" <= self.at() <= "9":
            self.i += 1
        return self.i > start

    def number(self) -> None:
        if self.at() == "-":
            self.i += 1
        if self.at() == "0":
            self.i += 1
            if "0" <= self.at() <= "9":
                self.fail()  # a leading zero followed by a digit: "Unexpected number"
        elif not self.digits():
            self.fail("No number after minus sign in JSON")
        if self.at() == ".":
            self.i += 1
            if not self.digits():
                self.fail("Unterminated fractional number in JSON")
        if self.at() in ("e", "E"):
            self.i += 1
            if self.at() in ("+", "-"):
                self.i += 1
            if not self.digits():
                self.fail("Exponent part is missing a number in JSON")

    def literal(self, word: str) -> None:
        if self.s.startswith(word, self.i):
            self.i += len(word)
            return
        self.i += 1
        for expected in word[1:]:
            if not self.at():
                break
            if self.at() != expected:
                self.fail()
            self.i += 1
        self.fail()  # ran out of input: "Unexpected end of JSON input"
