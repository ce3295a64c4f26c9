"""The app factory: the Flask app of the bridge's own endpoints around a ready-made Container (no module-level
app, nothing at import). It is mounted as WSGI inside the ASGI front door, ``bridge.web.asgi``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from flask import Flask

from bridge.web import EXTENSION
from bridge.web.errors import register_error_handlers

OWN_BODY_LIMIT_BYTES = 64 * 1024

if TYPE_CHECKING:
    from bridge.bootstrap import Container
    from bridge.web.readiness import ReadinessWatch


def create_app(container: Container, readiness: ReadinessWatch | None = None) -> Flask:
    """The Flask app of the bridge's own endpoints; ``readiness``: a started ReadinessWatch that `/readyz` reads
    instead of checking on the request (the serving bridge's)."""
    # No static folder: Flask would otherwise claim /static/<path>, which 2.x's frontend serves.
    app = Flask(__name__, static_folder=None)
    # Flask must not answer for 2.x: no slash-merging redirects (the catch-all also turns off strict_slashes).
    app.url_map.merge_slashes = False
    # The bridge's own endpoints take small JSON bodies (2.x's traffic never reaches Flask: see bridge.web.asgi).
    app.config["MAX_CONTENT_LENGTH"] = OWN_BODY_LIMIT_BYTES
    app.extensions[EXTENSION] = container
    if readiness is not None:
        from bridge.web.health import READINESS

        app.extensions[READINESS] = readiness

    from bridge.web.admin import admin
    from bridge.web.api_v3 import api_v3
    from bridge.web.health import health

    app.register_blueprint(health)
    app.register_blueprint(admin)  # /bridge/flags: the operator's, behind the admin token
    app.register_blueprint(api_v3)  # /v3 is the bridge's own and never reaches 2.x
    register_error_handlers(app)
    return app
