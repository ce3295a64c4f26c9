"""One log format for every line of a bridge process: its own, uvicorn's and the libraries'.

``BRIDGE_LOG_FORMAT=text`` (the default) writes ``<time> [<pid>] <LEVEL> <logger>: <message>``;
``json`` writes one JSON object per line, ``{"ts", "level", "logger", "message", "pid"}`` (plus ``exc``
with the traceback when a record carries one), for log collectors that parse lines.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import TextIO

from bridge.config import LOG_FORMATS

TEXT_FORMAT = "%(asctime)s [%(process)d] %(levelname)s %(name)s: %(message)s"
# httpx logs every request URL at INFO, and query strings may hold secrets; alembic says at INFO which
# dialect it found each time the schema revision is read.
QUIET_LOGGERS = {"httpx": logging.WARNING, "alembic": logging.WARNING}


class JsonLineFormatter(logging.Formatter):
    """A record as one line of JSON; the time is RFC 3339 in UTC with milliseconds."""

    def format(self, record: logging.LogRecord) -> str:
        moment = datetime.fromtimestamp(record.created, tz=UTC)
        line = {"ts": moment.isoformat(timespec="milliseconds").replace("+00:00", "Z"), "level": record.levelname,
                "logger": record.name, "message": record.getMessage(), "pid": record.process}
        if record.exc_info:
            line["exc"] = self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=False, default=str)


def configure_logging(fmt: str = "text", filters: Iterable[logging.Filter] = (), *,
                      stream: TextIO | None = None, level: int = logging.INFO) -> logging.Handler:
    """Install one handler on the root logger writing ``fmt`` lines to ``stream`` (stderr by default), with
    ``filters`` attached to the handler so they see every record; returns the handler.

    It replaces the plain stream handlers installed before (by an earlier call or ``logging.basicConfig``),
    so calling it again changes the format instead of doubling every line; other handlers (a test
    runner's capture) stay.
    """
    if fmt not in LOG_FORMATS:
        raise ValueError(f"log format must be one of {', '.join(LOG_FORMATS)}, got {fmt!r}")
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(JsonLineFormatter() if fmt == "json" else logging.Formatter(TEXT_FORMAT))
    for log_filter in filters:
        handler.addFilter(log_filter)
    root = logging.getLogger()
    for old in list(root.handlers):
        if type(old) is logging.StreamHandler:
            root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    for name, quiet in QUIET_LOGGERS.items():
        logging.getLogger(name).setLevel(quiet)
    return handler
