"""Settings: every BRIDGE_* environment variable, read once at start; a bad value names its variable."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from bridge.domain.model import Origin

POSTGRES_SCHEMES = ("postgresql://", "postgres://")
LOG_FORMATS = ("text", "json")


class ConfigError(ValueError):
    """A configuration value is missing or invalid; the message names the variable."""

    def __init__(self, variable: str, problem: str) -> None:
        super().__init__(f"{variable}: {problem}")
        self.variable = variable


@dataclass(frozen=True)
class Settings:
    database_url: str
    data_dir: Path
    database_schema: str | None = None
    listen_host: str = "127.0.0.1"
    listen_port: int = 5701
    legacy_url: str = "http://127.0.0.1:5700"
    legacy_data_dir: Path | None = None
    shadow_origins: frozenset[str] = frozenset()
    shadow_budget_ms: int = 50
    # How long a primary callback waits for the bridge's own write before 2.x answers it instead.
    primary_budget_ms: int = 1000
    forward_timeout_s: float = 1800.0  # 2.x's own nginx era proxied with 1800 s timeouts
    sqlite_busy_budget_ms: int = 400
    payload_cap_bytes: int = 2048
    threads: int = 16
    connection_limit: int = 1000
    idle_timeout_s: int = 5  # Node's keepAliveTimeout
    headers_timeout_s: int = 60  # Node's headersTimeout
    request_timeout_s: int = 300  # Node's requestTimeout
    max_body_bytes: int = 1 << 30
    callback_body_cap_bytes: int = 8192
    drain_timeout_s: int = 8  # under Docker's 10 s between SIGTERM and SIGKILL
    legacy_tz: str | None = None
    legacy_scheduler: str = "auto"
    legacy_release: str | None = None  # BRIDGE_LEGACY_RELEASE: the operator's word on 2.x's version
    legacy_install_dir: Path | None = None  # where 2.x's version.yaml and shell/ are; default: the data dir's parent
    reconcile_interval_s: int = 60
    reconcile_tolerance_s: int = 2
    reconcile_grace_s: int = 120
    reconcile_lookback_s: int = 7 * 86_400
    # How long an end with a signal exit waits for 2.x's evidence of a stop (bridge.jobs.stop_decisions).
    stop_decision_window_s: int = 5
    # How old the flags in force may get while the store cannot be read before readiness calls them stale;
    # they stay in force past it (bridge.service.flags.CachedModes).
    flags_max_stale_s: int = 60
    # The store's deadlines (bridge.storage.engine.StoreDeadlines): a statement or lock wait on PostgreSQL, a new
    # connection, and how soon keepalives find a silent peer.
    store_timeout_ms: int = 5000
    store_connect_timeout_s: int = 5
    store_keepalive_s: int = 10
    # How many facts the local journal keeps while the store does not take them (bridge.callbacks.keeper).
    journal_max_facts: int = 100_000
    log_format: str = "text"

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if environ is None else environ
        data_dir = Path(env.get("BRIDGE_DATA_DIR") or "./var")
        url = env.get("BRIDGE_DATABASE_URL") or f"sqlite:///{(data_dir / 'bridge.sqlite').resolve()}"
        if not url.startswith(("sqlite:///", "postgresql+psycopg://", *POSTGRES_SCHEMES)):
            raise ConfigError("BRIDGE_DATABASE_URL", "must be a sqlite:///, postgresql+psycopg://, postgresql:// "
                              "or postgres:// URL")
        for scheme in POSTGRES_SCHEMES:  # libpq's spellings; the bridge talks psycopg 3
            if url.startswith(scheme):
                url = "postgresql+psycopg://" + url.removeprefix(scheme)
        host, port = _listen(env.get("BRIDGE_LISTEN") or "127.0.0.1:5701")
        legacy_dir = env.get("BRIDGE_LEGACY_DATA_DIR")
        if env.get("BRIDGE_SHADOW_ORIGINS", "").strip() and not legacy_dir:
            raise ConfigError("BRIDGE_LEGACY_DATA_DIR", "is required when BRIDGE_SHADOW_ORIGINS names an origin "
                              "(the bridge reads 2.x's Crontabs to tell where an execution came from)")
        if (env.get("BRIDGE_WORKERS") or "1") != "1":
            raise ConfigError("BRIDGE_WORKERS", "is no longer read: one process serves (uvicorn); "
                              "size it with BRIDGE_THREADS, or run replicas on PostgreSQL")
        schema = env.get("BRIDGE_DATABASE_SCHEMA") or None
        if schema is not None and not schema.replace("_", "").isalnum():
            raise ConfigError("BRIDGE_DATABASE_SCHEMA", "must be letters, digits and underscores")
        return cls(
            database_url=url,
            data_dir=data_dir,
            database_schema=schema,
            listen_host=host,
            listen_port=port,
            legacy_url=_http_url("BRIDGE_LEGACY_URL", env.get("BRIDGE_LEGACY_URL") or "http://127.0.0.1:5700"),
            legacy_data_dir=Path(legacy_dir) if legacy_dir else None,
            shadow_origins=_origins(env.get("BRIDGE_SHADOW_ORIGINS") or ""),
            shadow_budget_ms=_int(env, "BRIDGE_SHADOW_BUDGET_MS", 50, low=1, high=10_000),
            primary_budget_ms=_int(env, "BRIDGE_PRIMARY_BUDGET_MS", 1000, low=1, high=10_000),
            forward_timeout_s=float(_int(env, "BRIDGE_FORWARD_TIMEOUT_S", 1800, low=1, high=86_400)),
            sqlite_busy_budget_ms=_int(env, "BRIDGE_SQLITE_BUSY_BUDGET_MS", 400, low=1, high=900),
            payload_cap_bytes=_int(env, "BRIDGE_PAYLOAD_CAP_BYTES", 2048, low=256, high=65_536),
            threads=_int(env, "BRIDGE_THREADS", 16, low=1, high=256),
            connection_limit=_int(env, "BRIDGE_CONNECTION_LIMIT", 1000, low=16, high=100_000),
            idle_timeout_s=_int(env, "BRIDGE_IDLE_TIMEOUT_S", 5, low=1, high=3600),
            headers_timeout_s=_int(env, "BRIDGE_HEADERS_TIMEOUT_S", 60, low=1, high=3600),
            request_timeout_s=_int(env, "BRIDGE_REQUEST_TIMEOUT_S", 300, low=1, high=86_400),
            max_body_bytes=_int(env, "BRIDGE_MAX_BODY_BYTES", 1 << 30, low=1 << 20, high=1 << 40),
            callback_body_cap_bytes=_int(env, "BRIDGE_CALLBACK_BODY_CAP_BYTES", 8192, low=1024, high=1 << 20),
            drain_timeout_s=_int(env, "BRIDGE_DRAIN_TIMEOUT_S", 8, low=0, high=3600),
            legacy_tz=_zone(env.get("BRIDGE_LEGACY_TZ") or None),
            legacy_scheduler=_choice(env, "BRIDGE_LEGACY_SCHEDULER", "auto", ("auto", "system", "node")),
            legacy_release=_release(env.get("BRIDGE_LEGACY_RELEASE") or None),
            legacy_install_dir=_install_dir(env.get("BRIDGE_LEGACY_INSTALL_DIR") or None, legacy_dir),
            reconcile_interval_s=_int(env, "BRIDGE_RECONCILE_INTERVAL_S", 60, low=5, high=86_400),
            reconcile_tolerance_s=_int(env, "BRIDGE_RECONCILE_TOLERANCE_S", 2, low=0, high=3600),
            reconcile_grace_s=_int(env, "BRIDGE_RECONCILE_GRACE_S", 120, low=0, high=86_400),
            reconcile_lookback_s=_int(env, "BRIDGE_RECONCILE_LOOKBACK_S", 7 * 86_400, low=60, high=366 * 86_400),
            stop_decision_window_s=_int(env, "BRIDGE_STOP_DECISION_WINDOW_S", 5, low=0, high=600),
            flags_max_stale_s=_int(env, "BRIDGE_FLAGS_MAX_STALE_S", 60, low=1, high=86_400),
            store_timeout_ms=_int(env, "BRIDGE_STORE_TIMEOUT_MS", 5000, low=100, high=600_000),
            store_connect_timeout_s=_int(env, "BRIDGE_STORE_CONNECT_TIMEOUT_S", 5, low=1, high=60),
            store_keepalive_s=_int(env, "BRIDGE_STORE_KEEPALIVE_S", 10, low=2, high=600),
            journal_max_facts=_int(env, "BRIDGE_JOURNAL_MAX_FACTS", 100_000, low=100, high=10_000_000),
            log_format=_choice(env, "BRIDGE_LOG_FORMAT", "text", LOG_FORMATS),
        )

    @property
    def legacy_database_path(self) -> Path | None:
        return self.legacy_data_dir / "db" / "database.sqlite" if self.legacy_data_dir else None

    @property
    def legacy_keyv_path(self) -> Path | None:
        return self.legacy_data_dir / "db" / "keyv.sqlite" if self.legacy_data_dir else None


def _int(env: Mapping[str, str], name: str, default: int, *, low: int, high: int) -> int:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(name, f"must be a whole number, got {raw[:20]!r}") from None
    if not low <= value <= high:
        raise ConfigError(name, f"must be between {low} and {high}, got {value}")
    return value


def _listen(raw: str) -> tuple[str, int]:
    host, sep, port = raw.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError("BRIDGE_LISTEN", f"must be host:port, got {raw[:40]!r}")
    return host.strip("[]"), int(port)


def _http_url(name: str, raw: str) -> str:
    if not raw.startswith(("http://", "https://")):
        raise ConfigError(name, "must start with http:// or https://")
    return raw.rstrip("/")


def _origins(raw: str) -> frozenset[str]:
    names = {part.strip() for part in raw.split(",") if part.strip()}
    unknown = sorted(names - {o.value for o in Origin})
    if unknown:
        raise ConfigError("BRIDGE_SHADOW_ORIGINS", f"unknown origin(s) {', '.join(unknown)}; known: "
                          + ", ".join(o.value for o in Origin))
    return frozenset(names)


def _choice(env: Mapping[str, str], name: str, default: str, allowed: tuple[str, ...]) -> str:
    value = env.get(name) or default
    if value not in allowed:
        raise ConfigError(name, f"must be one of {', '.join(allowed)}, got {value[:20]!r}")
    return value


_RELEASE = re.compile(r"^v?\d+\.\d+(\.\d+)?$")


def _release(value: str | None) -> str | None:
    """The shape of a 2.x version (``v2.20.2``, ``2.19``); which releases are supported is
    legacy_adapters.releases' to say, when bootstrap decides the release."""
    if value is None:
        return None
    if not _RELEASE.match(value.strip()):
        raise ConfigError("BRIDGE_LEGACY_RELEASE", f"{value.strip()[:40]!r} is not a 2.x version (e.g. v2.20.2)")
    return value.strip()


def _install_dir(value: str | None, legacy_dir: str | None) -> Path | None:
    """2.x's install root: named, or the parent of its data directory (``/ql`` for ``/ql/data``)."""
    if value is not None:
        return Path(value)
    return Path(legacy_dir).parent if legacy_dir else None


def _zone(name: str | None) -> str | None:
    if name is None:
        return None
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ConfigError("BRIDGE_LEGACY_TZ", f"unknown time zone {name[:40]!r}") from None
    return name


def local_zone_name() -> str:
    """The host's IANA zone (2.x's schedules and log names use local time), or UTC when it cannot be told."""
    candidates = [os.environ.get("TZ", "").lstrip(":")]
    timezone_file = Path("/etc/timezone")
    if timezone_file.exists():
        candidates.append(timezone_file.read_text().strip())
    localtime = Path("/etc/localtime")
    if localtime.is_symlink():
        candidates.append(str(localtime.resolve()).partition("zoneinfo/")[2])
    for name in candidates:
        try:
            if name:
                ZoneInfo(name)
                return name
        except (ZoneInfoNotFoundError, ValueError):
            continue
    return "UTC"
