"""Bodies nested deeper than Python's JSON parser goes: decoded as 2.x decodes them, refused as 2.x refuses them.

The expected bodies are what 2.x v2.21.0's middleware chain answered for the same bytes, reproduced with
express 4.21.2, body-parser 1.20.3 and celebrate 15.0.3 (Joi 17) on Node 20: V8's JSON.parse takes any
depth, so a well-formed body reaches Joi, which refuses the container where its schema wants a number or
a string.
"""

from __future__ import annotations

import httpx
import pytest

from legacy_adapters.callbacks import KEPT_DEPTH, decode_json_body, parse_status_body, validate_id_array
from legacy_adapters.errors import LegacyCallbackParseError
from legacy_adapters.testing.double import Legacy2xDouble

DEPTH = 100_000


def joi_400(key: str, message: str) -> bytes:
    return ('{"statusCode":400,"error":"Bad Request","message":"Validation failed","validation":{"body":'
            '{"source":"body","keys":["' + key + '"],"message":"' + message + '"}}}').encode()


STATUS_CASES = [
    pytest.param(b'{"ids":' + b"[" * DEPTH + b"]" * DEPTH + b',"status":"0"}',
                 joi_400("ids.0", '\\"ids[0]\\" must be a number'), id="deep-ids"),
    pytest.param(b'{"ids":' + b"[" * DEPTH, b'{"code":400,"message":"Unexpected end of JSON input"}', id="unclosed"),
    pytest.param(b'{"status":"0","pid":' + b"[" * DEPTH + b"]" * DEPTH + b"}",
                 joi_400("pid", '\\"pid\\" must be a string'), id="deep-pid"),
    pytest.param(b'{"status":"0","x":' + b'{"a":' * DEPTH + b"1" + b"}" * DEPTH + b"}",
                 joi_400("x", '\\"x\\" is not allowed'), id="deep-unknown-key"),
    pytest.param(b'{"ids":["[[["],"status":' + b"[" * DEPTH + b"]" * DEPTH + b"}",
                 joi_400("ids.0", '\\"ids[0]\\" must be a number'), id="brackets-in-a-string"),
]


@pytest.mark.parametrize("body, answer", STATUS_CASES)
def test_a_deep_status_body_is_refused_with_2xs_own_400(body: bytes, answer: bytes) -> None:
    with pytest.raises(LegacyCallbackParseError) as refused:
        parse_status_body(body)

    assert refused.value.legacy_body == answer


def test_a_deep_stop_body_is_refused_with_2xs_own_400() -> None:
    with pytest.raises(LegacyCallbackParseError) as refused:
        validate_id_array(decode_json_body(b"[" * DEPTH + b"]" * DEPTH))

    assert refused.value.legacy_body == joi_400("0", '\\"[0]\\" must be a number')


def test_an_error_deep_inside_a_valid_looking_body_is_still_v8s_error() -> None:
    body = b'{"status":"0","x":' + b"[" * DEPTH + b"1," + b"]" * DEPTH + b"}"

    with pytest.raises(LegacyCallbackParseError) as refused:
        decode_json_body(body)

    assert refused.value.field is None and refused.value.legacy_message.startswith("Unexpected token ']'")


def test_a_deep_body_keeps_every_level_a_schema_reads_and_empties_containers_below() -> None:
    body = ('{"a":"x]}","b":[1,{"c":' + "[" * DEPTH + '"deep"' + "]" * DEPTH + '}],"d":2}').encode()

    decoded = decode_json_body(body)

    assert decoded["a"] == "x]}" and decoded["d"] == 2 and decoded["b"][0] == 1
    level, depth = decoded["b"][1]["c"], 3  # "b" opens level 2, its object level 3, "c" level 4
    while level:
        (level,), depth = level, depth + 1
    assert level == [] and depth == KEPT_DEPTH


@pytest.mark.parametrize("body, answer", STATUS_CASES[:2])
def test_the_2x_double_answers_a_deep_status_body_as_2x_does(double: Legacy2xDouble, shell_headers: dict[str, str],
                                                              body: bytes, answer: bytes) -> None:
    response = httpx.put(f"{double.url}/open/crons/status", content=body, headers=shell_headers, timeout=10)

    assert (response.status_code, response.content) == (400, answer)
