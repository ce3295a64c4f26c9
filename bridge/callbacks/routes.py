"""The routes the callback path intercepts: one table that the proxy, the interceptor and primary mode all read.

Paths are exact and case-sensitive: 2.x answers mixed-case /api/ and /open/ paths with its own 400, so the
bridge must not treat them as callbacks either. Every other method and path is passed through untouched.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum


class Route(Enum):
    STATUS = "status"  # the task shell's start and end callbacks (and the panel's own /api twin)
    STOP = "stop"  # `PUT /crons/stop` with a JSON array of cron ids
    INSTANCE_STOP = "instance_stop"  # stopInstance: answers HTTP 200 whether it stopped anything or not


STATUS_PATHS = frozenset({"/open/crons/status", "/api/crons/status"})
STOP_PATHS = frozenset({"/open/crons/stop", "/api/crons/stop"})
# stopInstance (`POST /crons/:id/instances/:instanceId/stop`); 2.x does not check :id against the row's cron.
STOP_INSTANCE_PATH = re.compile(r"/(?:open|api)/crons/([0-9]{1,15})/instances/([0-9]{1,15})/stop")
# The task shell's route: primary mode answers it; the panel's calls on /api keep going to 2.x.
SHELL_STATUS_PATH = "/open/crons/status"


@dataclass(frozen=True, slots=True)
class InterceptedRoute:
    route: Route

    @property
    def answer_is_read(self) -> bool:
        """The stop routes: whether 2.x stopped anything is in its JSON body, so the body is read."""
        return self.route is not Route.STATUS


def intercepted_route(method: str, path: str) -> InterceptedRoute | None:
    """Which intercepted route `method path` is (path without its query), or None for a pass-through."""
    if method == "PUT":
        if path in STATUS_PATHS:
            return InterceptedRoute(Route.STATUS)
        if path in STOP_PATHS:
            return InterceptedRoute(Route.STOP)
        return None
    if method == "POST" and STOP_INSTANCE_PATH.fullmatch(path):
        return InterceptedRoute(Route.INSTANCE_STOP)
    return None
