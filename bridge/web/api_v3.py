"""The read-only v3 API: GET /v3/runs, /v3/runs/<id>, /v3/runs/<id>/events (docs/http-endpoints.md) and
/v3/runs/<id>/step-runs (docs/stepruns.md).

Authorised exactly as 2.x authorises ``/open/crons`` (an App token with the ``crons`` scope, from 2.x's keyv
cache), and a refusal is 2.x's own 401 body. Nothing under /v3 is ever forwarded to 2.x.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from flask import Blueprint, Response, jsonify, request
from flask.blueprints import BlueprintSetupState
from werkzeug.exceptions import MethodNotAllowed, NotFound
from werkzeug.routing import BaseConverter

from bridge.domain.errors import StoreUnavailableError
from bridge.service.ports import StepRunReader
from bridge.service.queries import RunQueries, parse_event_query, parse_run_list_query
from bridge.service.step_run_queries import parse_step_run_query, step_runs_page_view
from bridge.web import current_container
from legacy_adapters.errors import LegacyAuthError, LegacyDatabaseError
from legacy_adapters.ports import OpenTokenCheck

if TYPE_CHECKING:
    from bridge.bootstrap import StoreReaders

# The path 2.x would check: its scope regex takes the first segment after /open/, here "crons".
SCOPE_PATH = "/open/crons"
READ_METHODS = ("GET", "HEAD")
ALL_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")
_JSON_2X = "application/json; charset=utf-8"  # what Express's res.send(object) sets


class RestOfPath(BaseConverter):
    """Anything at all, empty and extra slashes included (Werkzeug's ``path`` refuses a leading slash, so
    ``/v3//runs`` would otherwise fall through to the pass-through)."""

    regex = ".*"
    part_isolating = False


api_v3 = Blueprint("api_v3", __name__, url_prefix="/v3")


@api_v3.record_once
def _add_converter(state: BlueprintSetupState) -> None:
    # Recorded before any rule of this blueprint, so it is in the map when those rules are bound.
    state.app.url_map.converters.setdefault("v3_rest", RestOfPath)


# No automatic OPTIONS: every method but GET and HEAD is refused with 405, never relayed.
_READ = {"methods": ("GET",), "provide_automatic_options": False}
_ANY = {"methods": ALL_METHODS, "provide_automatic_options": False}


@api_v3.before_request
def authorise() -> None:
    """Refuse other methods first (no token needed to learn that), then check the token as 2.x would."""
    if request.method not in READ_METHODS:
        raise MethodNotAllowed(valid_methods=list(READ_METHODS))
    token_authority().check_open_request(SCOPE_PATH, request.headers.get("Authorization"), time.time(),
                                         user_agent=request.headers.get("User-Agent"))


@api_v3.errorhandler(LegacyAuthError)
def refuse(exc: LegacyAuthError) -> Response:
    """2.x's exact 401 bytes, so a client sees the same answer as from /open/crons."""
    return Response(exc.legacy_body, status=exc.legacy_status, content_type=_JSON_2X)


@api_v3.route("/runs", **_READ)
def list_runs() -> Response:
    filters, page = parse_run_list_query(request.args.to_dict(flat=False))
    return jsonify(run_queries().list_runs(filters, page).to_json())


@api_v3.route("/runs/<run_id>", **_READ)
def get_run(run_id: str) -> Response:
    return jsonify(run_queries().get_run(run_id))


@api_v3.route("/runs/<run_id>/events", **_READ)
def list_events(run_id: str) -> Response:
    after, limit = parse_event_query(request.args.to_dict(flat=False))
    return jsonify(run_queries().list_events(run_id, after, limit).to_json())


@api_v3.route("/runs/<run_id>/step-runs", **_READ)
def list_step_runs(run_id: str) -> Response:
    """A Run's StepRuns (docs/stepruns.md), oldest first, in keyset pages: read-only, no mutation is reachable here."""
    after, limit = parse_step_run_query(request.args.to_dict(flat=False))
    return jsonify(step_runs_page_view(run_id, step_run_reader().page(run_id, after, limit)))


# Two views rather than one with defaults: Werkzeug would redirect /v3/ to the rule whose defaults match.
@api_v3.route("", **_ANY)
def root() -> Response:
    raise NotFound()


@api_v3.route("/<v3_rest:rest>", **_ANY)
def unknown(rest: str) -> Response:
    """Any other /v3 path, or another method on a known one, ends here and never in the pass-through."""
    raise NotFound()


def token_authority() -> OpenTokenCheck:
    """The process's one OpenTokenCheck. Raises LegacyDatabaseError when no 2.x data dir is configured."""
    authority = current_container().token_authority
    if authority is None:
        raise LegacyDatabaseError("BRIDGE_LEGACY_DATA_DIR", "is not set, so there are no 2.x App tokens "
                                  "to authorise /v3 with")
    return authority


def run_queries() -> RunQueries:
    """The store's run views. Raises StoreUnavailableError when the bridge runs without a store."""
    return _readers("runs").runs


def step_run_reader() -> StepRunReader:
    """The store's StepRun reader (it cannot write). Raises StoreUnavailableError without a store."""
    return _readers("step runs").step_runs


def _readers(what: str) -> StoreReaders:
    store = current_container().store
    if store is None:
        raise StoreUnavailableError(f"the bridge store is disabled, so there are no {what} to show")
    return store.readers
