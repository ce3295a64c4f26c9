from __future__ import annotations

import time

import pytest

from legacy_adapters.auth import LegacyTokenAuthority, extract_token, platform_of
from legacy_adapters.errors import LegacyAuthError
from legacy_adapters.testing.datadir import LegacyDataDir

STATUS = "/open/crons/status"


def denial(authority: LegacyTokenAuthority, path: str, authorization: str | None, **kwargs: str) -> LegacyAuthError:
    with pytest.raises(LegacyAuthError) as caught:
        authority.check_open_request(path, authorization, time.time(), **kwargs)
    return caught.value


@pytest.fixture
def authority(legacy_dir: LegacyDataDir) -> LegacyTokenAuthority:
    return LegacyTokenAuthority(legacy_dir.keyv_path)


def test_a_valid_system_token_passes_on_crons_and_dashboard(
    authority: LegacyTokenAuthority, legacy_dir: LegacyDataDir
) -> None:
    bearer = f"Bearer {legacy_dir.system_token}"
    authority.check_open_request(STATUS, bearer, time.time())
    authority.check_open_request("/open/dashboard/record", bearer, time.time())


def test_no_token_answers_please_log_in_first(authority: LegacyTokenAuthority) -> None:
    error = denial(authority, STATUS, None)
    assert error.legacy_body == '{"code":401,"message":"请先登录"}'.encode()
    assert error.code == "LEGACY_UNAUTHORIZED" and error.legacy_status == 401
    assert denial(authority, STATUS, "Basic abc").legacy_message == "请先登录"


def test_an_unknown_or_expired_token_answers_token_expired(
    authority: LegacyTokenAuthority, legacy_dir: LegacyDataDir
) -> None:
    expected = '{"code":401,"message":"Token 已失效"}'.encode()
    assert denial(authority, STATUS, "Bearer 00000000-0000-4000-8000-000000000000").legacy_body == expected
    assert denial(authority, STATUS, f"Bearer {legacy_dir.expired_token}").legacy_body == expected


def test_a_token_expiring_now_still_passes_then_fails_a_second_later(
    authority: LegacyTokenAuthority, legacy_dir: LegacyDataDir
) -> None:
    apps = [{"name": "t", "scopes": ["crons"], "tokens": [{"value": "tok", "expiration": 1000}]}]
    legacy_dir.write_keyv("apps", apps)
    authority.invalidate()
    authority.check_open_request(STATUS, "Bearer tok", 1000.4)  # Math.round(now) == expiration
    with pytest.raises(LegacyAuthError):
        authority.check_open_request(STATUS, "Bearer tok", 1000.5)


def test_a_token_without_the_scope_answers_no_permission(
    authority: LegacyTokenAuthority, legacy_dir: LegacyDataDir
) -> None:
    error = denial(authority, STATUS, f"Bearer {legacy_dir.limited_token}")
    assert error.legacy_body == '{"code":401,"message":"暂无权限"}'.encode()
    assert denial(authority, "/open/Crons/status", f"Bearer {legacy_dir.system_token}").legacy_message == "暂无权限"


def test_bearer_mobile_and_desktop_prefixes_are_stripped_once(
    authority: LegacyTokenAuthority, legacy_dir: LegacyDataDir
) -> None:
    token = legacy_dir.system_token
    authority.check_open_request(STATUS, f"Bearer mobile-{token}", time.time())
    authority.check_open_request(STATUS, f"Bearer desktop-{token}", time.time())
    assert extract_token("Bearer mobile-mobile-x") == "mobile-x"
    assert extract_token("bearer x") == ""
    assert extract_token(None) == ""


def test_a_logged_in_panel_token_falls_through_on_open_paths(
    authority: LegacyTokenAuthority, legacy_dir: LegacyDataDir
) -> None:
    legacy_dir.write_keyv(
        "authInfo", {"token": "panel-jwt", "tokens": {"mobile": [{"value": "phone-jwt", "timestamp": 1784340000000}]}}
    )
    authority.invalidate()
    authority.check_open_request(STATUS, "Bearer panel-jwt", time.time())
    authority.check_open_request(
        STATUS, "Bearer phone-jwt", time.time(), user_agent="Mozilla/5.0 (iPhone; CPU iPhone OS 17_0)"
    )
    assert (
        denial(authority, STATUS, "Bearer phone-jwt", user_agent="Mozilla/5.0 (X11; Linux x86_64)").legacy_message
        == "Token 已失效"
    )
    assert platform_of("curl/8.5.0") == "desktop"


def test_the_keyv_file_is_cached_for_at_most_a_second(legacy_dir: LegacyDataDir) -> None:
    now = [100.0]
    authority = LegacyTokenAuthority(legacy_dir.keyv_path, clock=lambda: now[0])
    authority.check_open_request(STATUS, f"Bearer {legacy_dir.system_token}", time.time())
    legacy_dir.write_keyv("apps", [])
    authority.check_open_request(STATUS, f"Bearer {legacy_dir.system_token}", time.time())
    now[0] += 1.0
    assert denial(authority, STATUS, f"Bearer {legacy_dir.system_token}").reason == "unknown"


def test_a_missing_keyv_file_knows_no_token(tmp_path: object) -> None:
    authority = LegacyTokenAuthority(f"{tmp_path}/missing.sqlite")
    assert denial(authority, STATUS, "Bearer x").legacy_message == "Token 已失效"


# --- The language of the 401 bodies: 2.x's keyv:lang (what its t() translates into) ----------------------

def all_denials(authority: LegacyTokenAuthority, legacy_dir: LegacyDataDir) -> list[bytes]:
    return [denial(authority, STATUS, None).legacy_body,
            denial(authority, STATUS, f"Bearer {legacy_dir.expired_token}").legacy_body,
            denial(authority, STATUS, "Bearer 00000000-0000-4000-8000-000000000000").legacy_body,
            denial(authority, STATUS, f"Bearer {legacy_dir.limited_token}").legacy_body]


def bodies(*messages: str) -> list[bytes]:
    return [('{"code":401,"message":"' + m + '"}').encode() for m in messages]


CHINESE_BODIES = bodies("请先登录", "Token 已失效", "Token 已失效", "暂无权限")
ENGLISH_BODIES = bodies("Please login first", "Token expired", "Token expired", "Access denied")


def test_an_english_install_is_refused_in_english(authority: LegacyTokenAuthority, legacy_dir: LegacyDataDir) -> None:
    legacy_dir.write_keyv("lang", "en")

    assert all_denials(authority, legacy_dir) == ENGLISH_BODIES
    assert authority.language() == "en"


@pytest.mark.parametrize("lang", ["zh", "EN", "en-US", "ja", 1, None])
def test_every_other_language_value_is_answered_in_chinese(
    authority: LegacyTokenAuthority, legacy_dir: LegacyDataDir, lang: object
) -> None:
    legacy_dir.write_keyv("lang", lang)  # t() translates for exactly 'en'

    assert all_denials(authority, legacy_dir) == CHINESE_BODIES


def test_without_a_lang_row_2x_answers_in_its_default_chinese(
    authority: LegacyTokenAuthority, legacy_dir: LegacyDataDir
) -> None:
    # Releases before v2.21.0 have no i18n and no keyv:lang; v2.21.0 writes it before it listens.
    assert all_denials(authority, legacy_dir) == CHINESE_BODIES
    assert authority.language() == "zh"


def test_a_language_change_is_followed_within_the_cache_second(legacy_dir: LegacyDataDir) -> None:
    now = [100.0]
    authority = LegacyTokenAuthority(legacy_dir.keyv_path, clock=lambda: now[0])
    assert denial(authority, STATUS, None).legacy_message == "请先登录"
    legacy_dir.write_keyv("lang", "en")
    now[0] += 1.0

    assert denial(authority, STATUS, None).legacy_message == "Please login first"


@pytest.mark.parametrize("expiration, passes", [
    (None, False),  # null < now
    ("9999999999", True),  # a numeric string compares as its number
    ("1000", False),
    ("soon", True),  # NaN is never less than now
    (True, False),
])
def test_a_token_expiration_compares_like_javascript(
    authority: LegacyTokenAuthority, legacy_dir: LegacyDataDir, expiration: object, passes: bool
) -> None:
    token = {"value": "tok", "expiration": expiration}
    legacy_dir.write_keyv("apps", [{"name": "t", "scopes": ["crons"], "tokens": [token]}])
    if passes:
        authority.check_open_request(STATUS, "Bearer tok", time.time())
    else:
        assert denial(authority, STATUS, "Bearer tok").reason == "expired"


def test_a_token_without_an_expiration_never_expires(
    authority: LegacyTokenAuthority, legacy_dir: LegacyDataDir
) -> None:
    legacy_dir.write_keyv("apps", [{"name": "t", "scopes": ["crons"], "tokens": [{"value": "tok"}]}])

    authority.check_open_request(STATUS, "Bearer tok", time.time())  # undefined < now is false


def test_openharmony_is_a_mobile_platform() -> None:
    assert platform_of("Mozilla/5.0 (Phone; OpenHarmony 4.0) AppleWebKit/537.36") == "mobile"
