"""Serve the app under gunicorn (gthread), building one Container per worker after the fork."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from gunicorn.app.base import BaseApplication

from bridge.config import Settings
from bridge.malloc_arenas import limit_malloc_arenas
from bridge.web.app import create_app

if TYPE_CHECKING:
    from flask import Flask

    from bridge.bootstrap import Container

ContainerFactory = Callable[[Settings], "Container"]
log = logging.getLogger("bridge.server")


def gunicorn_options(settings: Settings) -> dict[str, Any]:
    """Gunicorn settings for the bridge; no CLI arguments, config file or GUNICORN_CMD_ARGS are read."""
    return {
        "bind": f"{_bind_host(settings.listen_host)}:{settings.listen_port}",
        "worker_class": "gthread",
        "workers": settings.workers,
        "threads": settings.threads,
        # gthread workers heartbeat between requests, so this only has to outlast 2.x's slowest answer.
        "timeout": int(settings.forward_timeout_s) + 30,
        "graceful_timeout": 10,
        "keepalive": 5,
        "preload_app": False,  # engines, pools and lanes are built in each worker, never shared across fork
        "accesslog": None,  # off: request lines carry ?t=... and /open/auth/token's client_secret
        "errorlog": "-",
        "loglevel": "info",
        "proc_name": "ql-bridge",
        "limit_request_line": 8190,  # 2.x's UI sends long filter queries; gunicorn's 4094 default is tighter than Node
        "control_socket_disable": True,  # gunicorn >= 24 would otherwise create a socket under $HOME
    }


class BridgeServer(BaseApplication):  # type: ignore[misc]
    def __init__(self, settings: Settings, container_factory: ContainerFactory) -> None:
        self._settings = settings
        self._factory = container_factory
        self._container: Container | None = None
        super().__init__()

    def load_config(self) -> None:
        for key, value in gunicorn_options(self._settings).items():
            if key in self.cfg.settings:  # an older gunicorn lacks e.g. control_socket_disable
                self.cfg.set(key, value)
        self.cfg.set("worker_exit", self._worker_exit)

    def load(self) -> Flask:
        # Called inside the worker (preload_app is off), so the Container is per process; before any of its
        # threads exist, so the arena cap holds for all of them.
        limit_malloc_arenas()
        self._container = self._factory(self._settings)
        return create_app(self._container)

    def _worker_exit(self, server: Any, worker: Any) -> None:
        if self._container is not None:
            self._container.close()
            self._container = None


def serve(settings: Settings, container_factory: ContainerFactory) -> None:
    """Run the bridge until gunicorn is told to stop (SIGTERM/SIGINT); blocks."""
    _configure_logging()
    log.info("ql-bridge on %s:%d forwarding to %s (%d worker(s) x %d threads)", settings.listen_host,
             settings.listen_port, _without_userinfo(settings.legacy_url), settings.workers, settings.threads)
    BridgeServer(settings, container_factory).run()


def _configure_logging() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s [%(process)d] %(levelname)s %(name)s: %(message)s")
    # httpx logs every request URL at INFO; query strings may hold secrets.
    logging.getLogger("httpx").setLevel(logging.WARNING)


def _bind_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def _without_userinfo(url: str) -> str:
    parts = urlsplit(url)
    return parts._replace(netloc=parts.netloc.rpartition("@")[2]).geturl()
