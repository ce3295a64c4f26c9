"""The front door's ``is_own_endpoint`` and the Flask app's routes say the same: a request the bridge keeps is one
its Flask app routes, and every route of the app is kept (never relayed to 2.x by mistake)."""

from __future__ import annotations

import httpx
from flask import Flask
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from werkzeug.exceptions import HTTPException
from werkzeug.routing import Rule

from bridge.bootstrap import Container
from bridge.config import Settings
from bridge.metrics import BridgeMetrics
from bridge.web.app import create_app
from bridge.web.asgi import is_own_endpoint

METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")
# Path segments that the bridge's routes use, with near misses around them.
SEGMENTS = ("livez", "readyz", "healthz", "metrics", "bridge", "flags", "manual", "v3", "runs", "r1", "events",
            "step-runs", "api", "open", "crons", "status", "v3x", "Livez", "")


def flask_app() -> Flask:
    settings = Settings.from_env({"BRIDGE_LEGACY_URL": "http://legacy.test:5700"})
    return create_app(Container(settings=settings, metrics=BridgeMetrics(), http=httpx.Client()))


APP = flask_app()


def flask_routes(method: str, path: str) -> bool:
    """Whether the Flask app has a route for ``method path`` of its own (Flask's automatic OPTIONS answers are
    not the bridge's: those requests go to 2.x)."""
    adapter = APP.url_map.bind("bridge.test")
    try:
        rule, _args = adapter.match(path, method, return_rule=True)
    except HTTPException:
        return False
    assert isinstance(rule, Rule)
    return method != "OPTIONS" or not getattr(rule, "provide_automatic_options", False)


def sample_path(rule: Rule) -> str:
    return rule.rule.replace("<origin>", "manual").replace("<run_id>", "r1").replace("<v3_rest:rest>", "a/b")


def test_every_flask_route_is_kept_by_the_front_door_for_its_methods() -> None:
    rules = list(APP.url_map.iter_rules())
    assert {"/livez", "/readyz", "/metrics", "/bridge/flags", "/v3/runs/<run_id>"} <= {r.rule for r in rules}
    for rule in rules:
        path = sample_path(rule)
        for method in METHODS:
            assert is_own_endpoint(method, path) == flask_routes(method, path), (method, path)


@settings(max_examples=400, deadline=None)
@given(st.sampled_from(METHODS), st.lists(st.sampled_from(SEGMENTS), min_size=1, max_size=4))
def test_the_front_door_keeps_exactly_what_flask_routes(method: str, segments: list[str]) -> None:
    path = "/" + "/".join(segments)
    assume("//" not in path)  # Werkzeug merges repeated slashes; the front door leaves such a path to 2.x
    assert is_own_endpoint(method, path) == flask_routes(method, path), (method, path)
