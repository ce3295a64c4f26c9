"""The app factory: a Flask app around a ready-made Container (no module-level app, nothing at import)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from flask import Flask

from bridge.web import EXTENSION
from bridge.web.errors import register_error_handlers

if TYPE_CHECKING:
    from bridge.bootstrap import Container


def create_app(container: Container) -> Flask:
    # No static folder: Flask would otherwise claim /static/<path>, which 2.x's frontend serves.
    app = Flask(__name__, static_folder=None)
    # Flask must not answer for 2.x: no slash-merging redirects (the catch-all also turns off strict_slashes).
    app.url_map.merge_slashes = False
    app.extensions[EXTENSION] = container

    from bridge.web.health import health
    from bridge.web.proxy import proxy

    app.register_blueprint(health)
    app.register_blueprint(proxy)  # last: it takes every method and path nothing else claimed
    register_error_handlers(app)
    return app
