"""The app factory: a Flask app around a ready-made Container (no module-level app, nothing at import)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from flask import Flask

from bridge.web import EXTENSION
from bridge.web.errors import register_error_handlers

OWN_BODY_LIMIT_BYTES = 64 * 1024

if TYPE_CHECKING:
    from bridge.bootstrap import Container


def create_app(container: Container) -> Flask:
    # No static folder: Flask would otherwise claim /static/<path>, which 2.x's frontend serves.
    app = Flask(__name__, static_folder=None)
    # Flask must not answer for 2.x: no slash-merging redirects (the catch-all also turns off strict_slashes).
    app.url_map.merge_slashes = False
    # The bridge's own endpoints take small JSON bodies; the proxy reads 2.x's traffic from the stream itself.
    app.config["MAX_CONTENT_LENGTH"] = OWN_BODY_LIMIT_BYTES
    app.extensions[EXTENSION] = container

    from bridge.web.admin import admin
    from bridge.web.api_v3 import api_v3
    from bridge.web.health import health
    from bridge.web.proxy import proxy

    app.register_blueprint(health)
    app.register_blueprint(admin)  # /bridge/flags: the operator's, behind the admin token
    app.register_blueprint(api_v3)  # before the proxy: /v3 is the bridge's own and never reaches 2.x
    app.register_blueprint(proxy)  # last: it takes every method and path nothing else claimed
    register_error_handlers(app)
    return app
