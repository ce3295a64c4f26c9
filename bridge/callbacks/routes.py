"""The routes the callback path intercepts: one table that the proxy, the interceptor and primary mode all read.

Paths are exact and case-sensitive: 2.x answers mixed-case /api/ and /open/ paths with its own 400, so the
bridge must not treat them as callbacks either. Every other method and path is passed through untouched.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from legacy_adapters.routes import SHELL_STATUS_PATH, STATUS_PATHS, STOP_INSTANCE_PATH, STOP_PATHS


class Route(Enum):
    STATUS = "status"  # the task shell's start and end callbacks (and the panel's own /api twin)
    STOP = "stop"  # `PUT /crons/stop` with a JSON array of cron ids
    INSTANCE_STOP = "instance_stop"  # stopInstance: answers HTTP 200 whether it stopped anything or not


# The paths are 2.x's (legacy_adapters.routes); primary mode answers only the task shell's, SHELL_STATUS_PATH:
# the panel's calls on /api keep going to 2.x.
__all__ = ["SHELL_STATUS_PATH", "STATUS_PATHS", "STOP_INSTANCE_PATH", "STOP_PATHS", "InterceptedRoute", "Route",
           "intercepted_route"]


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
