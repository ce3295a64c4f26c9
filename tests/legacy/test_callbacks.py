from __future__ import annotations

import pytest

from legacy_adapters.callbacks import (
    js_parse_int,
    log_path_digest,
    parse_status_body,
    render_status_body,
    validate_id_array,
)
from legacy_adapters.errors import LegacyCallbackParseError, v8_json_parse_error

SPEC_START = (
    b'{"ids":["12"],"status":"0","pid":"4321","log_path":"ql_sample_12/2026-07-18-10-00-00-'
    b'123.log","last_execution_time":1784340000,"last_running_time":0}'
)
SPEC_END = (
    b'{"ids":["12"],"status":"1","pid":"4321","log_path":"ql_sample_12/2026-07-18-10-00-00-'
    b'123.log","last_execution_time":1784340000,"last_running_time":7,"exit_code":0}'
)
OBSERVED_START = (
    b'{"ids":["1"],"status":"0","pid":"10325","log_path":"hello_1/2026-12-02-13-01-37-'
    b'617.log","last_execution_time":1796216497,"last_running_time":0}'
)
OBSERVED_END = (
    b'{"ids":["1"],"status":"1","pid":"10325","log_path":"hello_1/2026-12-02-13-01-37-'
    b'617.log","last_execution_time":1796216497,"last_running_time":2,"exit_code":0}'
)


def joi_body(key: str, message: str) -> bytes:
    return (
        '{"statusCode":400,"error":"Bad Request","message":"Validation failed","validation":'
        '{"body":{"source":"body","keys":["' + key + '"],"message":"' + message + '"}}}'
    ).encode()


def rejection(raw: bytes) -> LegacyCallbackParseError:
    with pytest.raises(LegacyCallbackParseError) as caught:
        parse_status_body(raw)
    return caught.value


def test_render_status_body_reproduces_the_spec_and_observed_shell_bytes() -> None:
    log = "ql_sample_12/2026-07-18-10-00-00-123.log"
    assert render_status_body(12, 0, 4321, log, 1784340000) == SPEC_START
    assert render_status_body(12, 1, 4321, log, 1784340000, 7, 0) == SPEC_END
    observed_log = "hello_1/2026-12-02-13-01-37-617.log"
    assert render_status_body(1, 0, 10325, observed_log, 1796216497) == OBSERVED_START
    assert render_status_body("1", "1", "10325", observed_log, 1796216497, 2, 0) == OBSERVED_END


def test_render_status_body_defaults_pid_to_two_quotes_and_omits_an_empty_exit_code() -> None:
    body = render_status_body(3, 1, None, "update/x.log", 5, 0, "")
    assert body == (
        b'{"ids":["3"],"status":"1","pid":"\'\'","log_path":"update/x.log",'
        b'"last_execution_time":5,"last_running_time":0}'
    )


def test_spec_start_body_parses_to_a_start_callback() -> None:
    callback = parse_status_body(SPEC_START)
    assert callback.ids == (12,)
    assert callback.status == 0 and callback.is_start and not callback.is_end
    assert callback.pid == 4321 and callback.pid_raw_present
    assert callback.log_path == "ql_sample_12/2026-07-18-10-00-00-123.log"
    assert (callback.last_execution_time, callback.last_running_time) == (1784340000, 0)
    assert callback.exit_code is None and "exit_code" not in callback.present_keys


def test_observed_end_body_parses_to_an_end_callback_with_exit_code() -> None:
    callback = parse_status_body(OBSERVED_END)
    assert callback.is_end and callback.exit_code == 0 and callback.last_running_time == 2


def test_pid_placeholder_of_two_quotes_is_nan() -> None:
    callback = parse_status_body(render_status_body(12, 1, "", "a.log", 1, 2, 0))
    assert callback.pid is None and callback.pid_raw_present


def test_missing_status_gives_the_documented_400_body() -> None:
    error = rejection(b'{"ids":["12"]}')
    assert error.legacy_body == joi_body("status", '\\"status\\" is required')
    assert error.code == "INVALID_LEGACY_CALLBACK" and error.field == "status"


@pytest.mark.parametrize(
    ("raw", "key", "message"),
    [
        (b'{"status":0}', "status", '"status" must be a string'),
        (b'{"status":"0","log_path":""}', "log_path", '"log_path" is not allowed to be empty'),
        (b'{"status":"0","execution_id":"x"}', "execution_id", '"execution_id" is not allowed'),
        (b'{"ids":["12",""],"status":"0"}', "ids.1", '"ids[1]" must be a number'),
        (b'{"ids":["x"],"status":"0"}', "ids.0", '"ids[0]" must be a number'),
        (b'{"ids":"12","status":"0"}', "ids", '"ids" must be an array'),
        (b'{"status":"0","pid":4321}', "pid", '"pid" must be a string'),
        (b'{"status":"0","exit_code":"abc"}', "exit_code", '"exit_code" must be a number'),
        (b'{"status":null}', "status", '"status" must be a string'),
        (b'[{"status":"0"}]', "", '"value" must be of type object'),
    ],
)
def test_joi_failures_answer_the_celebrate_400_body(raw: bytes, key: str, message: str) -> None:
    error = rejection(raw)
    assert error.legacy_message == message
    assert error.legacy_body == joi_body(key, message.replace('"', '\\"'))


def test_schema_keys_are_checked_before_unknown_keys() -> None:
    assert rejection(b'{"foo":1}').legacy_message == '"status" is required'


def test_numeric_strings_are_converted_and_nulls_allowed() -> None:
    callback = parse_status_body(
        b'{"ids":[" 12 ","7"],"status":"1","pid":null,"log_path":null,'
        b'"last_execution_time":"1784340000","exit_code":"3"}'
    )
    assert callback.ids == (12, 7)
    assert callback.pid is None and not callback.pid_raw_present and callback.log_path is None
    assert callback.last_execution_time == 1784340000 and callback.exit_code == 3
    assert {"pid", "log_path"} <= callback.present_keys


def test_status_and_pid_use_javascript_parse_int() -> None:
    callback = parse_status_body(b'{"status":"1abc","pid":"  10325xyz"}')
    assert (callback.status, callback.pid) == (1, 10325)
    assert parse_status_body(b'{"status":"abc"}').status is None


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0", 0),
        ("10325", 10325),
        ("''", None),
        ("12abc", 12),
        ("  -7", -7),
        ("+3", 3),
        ("0x1F", 31),
        ("0x", None),
        ("", None),
        ("1.9", 1),
        ("\u00a042", 42),
        ("abc", None),
    ],
)
def test_js_parse_int_matches_javascript(text: str, expected: int | None) -> None:
    assert js_parse_int(text) == expected


def test_unescaped_quote_in_log_path_gives_the_body_parser_400() -> None:
    raw = render_status_body(12, 0, 1, 'bad"path.log', 1)
    error = rejection(raw)
    assert error.field is None
    assert error.legacy_body == (
        b'{"code":400,"message":"Expected \',\' or \'}\' after property value in JSON at position 53"}'
    )


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"{", "Expected property name or '}' in JSON at position 1"),
        (b'{"status":"0",}', "Expected double-quoted property name in JSON at position 14"),
        (b'{"status":"0"', "Expected ',' or '}' after property value in JSON at position 13"),
        (b"null", "Unexpected token 'n', \"null\" is not valid JSON"),
        (b"   ", "Unexpected end of JSON input"),
        (b'{"a":NaN}', 'Unexpected token \'N\', "{"a":NaN}" is not valid JSON'),
        (b'{"a":01}', "Unexpected number in JSON at position 6"),
    ],
)
def test_malformed_json_answers_code_400_with_the_v8_message(raw: bytes, message: str) -> None:
    assert rejection(raw).legacy_message == message


def test_v8_messages_show_ten_characters_of_context_around_the_bad_token() -> None:
    assert v8_json_parse_error("[1, 2, 3, 4, 5, 6, 7, @, 9, 10, 11, 12]") == (
        "Unexpected token '@', ...\" 5, 6, 7, @, 9, 10, \"... is not valid JSON"
    )
    assert v8_json_parse_error("[@, 1, 2, 3, 4, 5, 6, 7, 8, 9]") == (
        "Unexpected token '@', \"[@, 1, 2, 3\"... is not valid JSON"
    )
    assert v8_json_parse_error("[1, 2, 3, 4, 5, 6, 7, 8, 9, @]") == (
        "Unexpected token '@', ...\" 7, 8, 9, @]\" is not valid JSON"
    )


def test_v8_positions_count_utf16_code_units() -> None:
    assert v8_json_parse_error('{"a":"\U0001f600",@}') == (
        "Expected double-quoted property name in JSON at position 10"
    )


def test_empty_body_is_an_empty_object_so_status_is_required() -> None:
    assert rejection(b"").legacy_message == '"status" is required'


def test_id_array_bodies_convert_strings_and_report_the_index() -> None:
    assert validate_id_array(["3", 4]) == (3, 4)
    with pytest.raises(LegacyCallbackParseError) as caught:
        validate_id_array([1, "x"])
    assert caught.value.legacy_message == '"[1]" must be a number'


def test_log_path_digest_is_stable_short_hex_and_keeps_none() -> None:
    digest = log_path_digest("ql_sample_12/2026-07-18-10-00-00-123.log")
    assert digest == log_path_digest("ql_sample_12/2026-07-18-10-00-00-123.log")
    assert digest is not None and len(digest) <= 36 and int(digest, 16) >= 0
    assert digest != log_path_digest("ql_sample_12/2026-07-18-10-00-00-124.log")
    assert log_path_digest(None) is None
