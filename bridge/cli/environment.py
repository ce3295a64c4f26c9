"""What each command reads from the environment, shown at the end of its --help.

Settings.from_env checks every BRIDGE_* variable for every command (a bad value stops any of them); these are
the ones whose value changes what the command does. tests/cli/test_help.py holds them to Settings.from_env.
"""

from __future__ import annotations

_STORE = ("BRIDGE_DATABASE_URL", "BRIDGE_DATABASE_SCHEMA", "BRIDGE_DATA_DIR", "BRIDGE_STORE_TIMEOUT_MS",
          "BRIDGE_STORE_CONNECT_TIMEOUT_S", "BRIDGE_STORE_KEEPALIVE_S")
_WRITER = (*_STORE, "BRIDGE_SQLITE_BUSY_BUDGET_MS", "BRIDGE_PAYLOAD_CAP_BYTES")
_LEGACY = ("BRIDGE_LEGACY_DATA_DIR", "BRIDGE_LEGACY_TZ", "BRIDGE_LEGACY_SCHEDULER")
_RECONCILE = ("BRIDGE_RECONCILE_TOLERANCE_S", "BRIDGE_RECONCILE_GRACE_S", "BRIDGE_RECONCILE_LOOKBACK_S")
_GATES = ("BRIDGE_GATE_MIN_EXECUTIONS", "BRIDGE_GATE_COMPLETENESS", "BRIDGE_GATE_STATUS_AGREEMENT",
          "BRIDGE_GATE_EXIT_CODE_AGREEMENT", "BRIDGE_GATE_MAX_DUPLICATES", "BRIDGE_GATE_STALE_MISMATCH_KINDS")
_SERVING = ("BRIDGE_LISTEN", "BRIDGE_LEGACY_URL", "BRIDGE_SHADOW_ORIGINS", "BRIDGE_SHADOW_BUDGET_MS",
            "BRIDGE_PRIMARY_BUDGET_MS",
            "BRIDGE_FORWARD_TIMEOUT_S", "BRIDGE_WORKERS", "BRIDGE_THREADS", "BRIDGE_CONNECTION_LIMIT",
            "BRIDGE_IDLE_TIMEOUT_S", "BRIDGE_HEADERS_TIMEOUT_S", "BRIDGE_REQUEST_TIMEOUT_S", "BRIDGE_MAX_BODY_BYTES",
            "BRIDGE_CALLBACK_BODY_CAP_BYTES", "BRIDGE_DRAIN_TIMEOUT_S", "BRIDGE_RECONCILE_INTERVAL_S",
            "BRIDGE_STOP_DECISION_WINDOW_S", "BRIDGE_FLAGS_MAX_STALE_S", "BRIDGE_JOURNAL_MAX_FACTS",
            "BRIDGE_LOG_FORMAT")
_SEAM = ("BRIDGE_LEGACY_DATA_DIR", "BRIDGE_LISTEN", "BRIDGE_LEGACY_URL")

ENVIRONMENT: dict[str, tuple[str, ...]] = {
    "db upgrade": _STORE,
    "db roles": _STORE,
    "status": _STORE,
    "serve": (*_WRITER, *_LEGACY, *_RECONCILE, *_SERVING),
    "reconcile": (*_WRITER, *_LEGACY, *_RECONCILE),
    "report": (*_STORE, *_LEGACY, *_GATES),
    "import-legacy": (*_WRITER, *_LEGACY),
    "projection retry": _STORE,
    "flags show": (*_STORE, "BRIDGE_LEGACY_TZ"),
    "flags set": _STORE,
    "flags admin-token": _STORE,
    "demo": ("BRIDGE_DATA_DIR",),
    "doctor": (*_STORE, "BRIDGE_LEGACY_URL", "BRIDGE_LEGACY_DATA_DIR", "BRIDGE_LEGACY_TZ", "BRIDGE_LISTEN"),
    "seam install": _SEAM,
    "seam remove": _SEAM,
    "seam status": ("BRIDGE_LEGACY_DATA_DIR",),
}
