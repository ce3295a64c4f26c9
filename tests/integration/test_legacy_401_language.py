"""The bridge's own 401s are 2.x's, byte for byte, in the language 2.x answers in.

2.x (v2.21.0) translates with ``t()`` into its process language: the system setting ``lang``, else
``systemLang()``, set at boot and by ``PUT /api/system/config/lang``; never the request's Accept-Language.
The test double boots the same way; each refused request is sent to it and to the bridge's two places that
answer for 2.x (a primary-mode status callback, and /v3, which authorises like 2.x's /open/crons: the same
middleware and the same ``crons`` scope key as /open/crons/status).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from flask.testing import FlaskClient

from bridge.bootstrap import Container
from bridge.callbacks.answers import LocalAnswer
from bridge.callbacks.commands import RecordStart
from bridge.callbacks.primary import PrimaryAnswerer
from bridge.config import Settings
from bridge.metrics import BridgeMetrics
from bridge.service.callback_facts import CallbackFacts, ExecutionContext
from bridge.service.clock import SystemClock
from legacy_adapters.auth import LegacyTokenAuthority
from legacy_adapters.callbacks import render_status_body
from legacy_adapters.testing.datadir import LegacyDataDir, create_legacy_data_dir
from legacy_adapters.testing.double import Legacy2xDouble
from tests.web.asgi_client import bridge_client

PANEL_JWT = "eyJhbGciOiJIUzM4NCJ9.eyJkYXRhIjoiYWRtaW4ifQ.c2lnbmF0dXJl"
UNKNOWN = "00000000-0000-4000-8000-000000000000"
# What the bridge would record, were the token accepted (it never is here).
REFUSED_START = RecordStart(CallbackFacts(1, 4321, None, None, None, None, 0),
                            ExecutionContext("manual", "test", "r1", mode="primary"))


@dataclass
class Site:
    data: LegacyDataDir
    double: Legacy2xDouble
    http: httpx.Client
    authority: LegacyTokenAuthority
    primary: PrimaryAnswerer
    v3: FlaskClient

    def to_2x(self, headers: dict[str, str]) -> tuple[int, bytes]:
        body = render_status_body(1, 0, 4321, "a_1/x.log", 1_796_216_400)
        reply = self.http.put("/open/crons/status", content=body,
                              headers={"Content-Type": "application/json;charset=UTF-8", **headers})
        return reply.status_code, reply.content

    def to_primary(self, headers: dict[str, str]) -> tuple[int, bytes]:
        def never(_command: object) -> None:
            pytest.fail("a refused callback was recorded")

        answer = self.primary.answer(headers, REFUSED_START, never)
        assert isinstance(answer, LocalAnswer)
        return answer.status, answer.body

    def to_v3(self, headers: dict[str, str]) -> tuple[int, bytes]:
        response = self.v3.get("/v3/runs", headers=headers)
        return response.status_code, response.data


class _NoRecorder:
    """PrimaryAnswerer's recorder, never reached: every request here is refused before recording."""


@contextmanager
def site_for(tmp_path: Path, lang: str | None, system_lang: str) -> Iterator[Site]:
    data = create_legacy_data_dir(tmp_path / "ql")
    data.add_cron("a", "task a.js", "0 * * * *")
    settings = Settings.from_env({"BRIDGE_LEGACY_URL": "http://legacy.test:5700",
                                  "BRIDGE_LEGACY_DATA_DIR": str(data.root), "BRIDGE_DATA_DIR": str(tmp_path)})
    authority = LegacyTokenAuthority(data.keyv_path)
    container = Container(settings=settings, metrics=BridgeMetrics(),
                          http=httpx.Client(transport=httpx.MockTransport(lambda r: pytest.fail("reached 2.x"))),
                          token_authority=authority)
    primary = PrimaryAnswerer(_NoRecorder(), authority, BridgeMetrics(), SystemClock(),  # type: ignore[arg-type]
                              on_commit=lambda: None)
    with Legacy2xDouble(data, panel_token=PANEL_JWT, lang=lang, system_lang=system_lang) as double, \
            httpx.Client(base_url=double.url, timeout=10) as http:
        try:
            yield Site(data, double, http, authority, primary, bridge_client(container))
        finally:
            container.http.close()


# (system setting lang, what systemLang() gives the 2.x process) -> the language 2.x answers in
INSTALLS = {
    "chinese-setting": ("zh", "en", "zh"),
    "english-setting": ("en", "zh", "en"),
    "unset-english-node": (None, "en", "en"),  # the fallback: Node's Intl locale
    "unset-chinese-node": (None, "zh", "zh"),
}


@pytest.fixture(params=list(INSTALLS))
def site(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Site, str]]:
    lang, system_lang, answers_in = INSTALLS[request.param]
    with site_for(tmp_path, lang, system_lang) as running:
        yield running, answers_in


EXPECTED = {
    "zh": {"missing": "请先登录", "expired": "Token 已失效", "scope": "暂无权限"},
    "en": {"missing": "Please login first", "expired": "Token expired", "scope": "Access denied"},
}


def refused(site: Site) -> dict[str, tuple[str, dict[str, str]]]:
    """name -> (which message 2.x gives, the request headers)."""
    return {
        "no authorization": ("missing", {}),
        "not bearer": ("missing", {"Authorization": f"Basic {site.data.system_token}"}),
        "unknown token": ("expired", {"Authorization": f"Bearer {UNKNOWN}"}),
        "expired token": ("expired", {"Authorization": f"Bearer {site.data.expired_token}"}),
        "no crons scope": ("scope", {"Authorization": f"Bearer {site.data.limited_token}"}),
    }


def test_the_bridges_401_bytes_are_the_doubles_in_the_installs_language(site: tuple[Site, str]) -> None:
    running, lang = site
    assert running.double.language == lang
    for name, (kind, headers) in refused(running).items():
        for accept in ("en-US,en;q=0.9", "zh-CN,zh;q=0.9"):  # 2.x ignores the request's language
            sent = {**headers, "Accept-Language": accept, "User-Agent": "curl/8.5.0"}
            expected = (401, ('{"code":401,"message":"' + EXPECTED[lang][kind] + '"}').encode())
            assert running.to_2x(sent) == expected, name
            assert running.to_primary(sent) == expected, name
            assert running.to_v3(sent) == expected, name


def test_the_bridge_follows_a_language_change_made_in_2x(tmp_path: Path) -> None:
    with site_for(tmp_path, "zh", "zh") as running:
        reply = running.http.put("/api/system/config/lang", json={"lang": "en"},
                                 headers={"Authorization": f"Bearer {PANEL_JWT}"})
        assert reply.json() == {"code": 200, "data": {"lang": "en"}}
        running.authority.invalidate()  # the keyv cache is re-read at most once a second
        expected = (401, b'{"code":401,"message":"Please login first"}')
        assert running.to_2x({}) == running.to_primary({}) == expected

        running.http.put("/open/system/config/lang", json={"lang": ""},  # '' resets to 'zh'
                         headers={"Authorization": f"Bearer {running.data.system_token}"})
        running.authority.invalidate()
        assert running.to_2x({}) == running.to_primary({}) == (401, '{"code":401,"message":"请先登录"}'.encode())
