"""The routes the callback path intercepts, decided once per request and carried down typed.

Paths are exact and case-sensitive: 2.x answers mixed-case /api/ and /open/ paths with its own 400, so the
bridge must not treat them as callbacks either. Every other method and path is passed through untouched.
The front door (bridge.web.asgi) asks ``intercepted_route`` once; the interceptor and primary mode read the
route it returns, never the path again.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import ClassVar, TypeAlias

from legacy_adapters.routes import SHELL_STATUS_PATH, STATUS_PATHS, STOP_INSTANCE_PATH, STOP_PATHS


class Route(Enum):
    STATUS = "status"  # the task shell's start and end callbacks (and the panel's own /api twin)
    STOP = "stop"  # `PUT /crons/stop` with a JSON array of cron ids
    INSTANCE_STOP = "instance_stop"  # stopInstance: answers HTTP 200 whether it stopped anything or not


@dataclass(frozen=True, slots=True)
class StatusRoute:
    """`PUT /crons/status`. ``from_shell``: the task shell's /open path; primary mode answers only that one,
    the panel's calls on /api keep going to 2.x."""

    from_shell: bool
    route: ClassVar[Route] = Route.STATUS
    answer_is_read: ClassVar[bool] = False


@dataclass(frozen=True, slots=True)
class StopRoute:
    """`PUT /crons/stop`: whether 2.x stopped anything is in its JSON body, so the body is read."""

    route: ClassVar[Route] = Route.STOP
    answer_is_read: ClassVar[bool] = True


@dataclass(frozen=True, slots=True)
class InstanceStopRoute:
    """stopInstance, `POST /crons/:id/instances/:instanceId/stop`: 2.x answers HTTP 200 either way and says in
    its body whether it stopped the row; it does not check ``cron_id`` against the row's own cron."""

    cron_id: int
    instance_id: int
    route: ClassVar[Route] = Route.INSTANCE_STOP
    answer_is_read: ClassVar[bool] = True


InterceptedRoute: TypeAlias = StatusRoute | StopRoute | InstanceStopRoute

__all__ = ["SHELL_STATUS_PATH", "STATUS_PATHS", "STOP_INSTANCE_PATH", "STOP_PATHS", "InstanceStopRoute",
           "InterceptedRoute", "Route", "StatusRoute", "StopRoute", "intercepted_route"]


def intercepted_route(method: str, path: str) -> InterceptedRoute | None:
    """Which intercepted route `method path` is (path without its query), or None for a pass-through."""
    if method == "PUT":
        if path in STATUS_PATHS:
            return StatusRoute(from_shell=path == SHELL_STATUS_PATH)
        if path in STOP_PATHS:
            return StopRoute()
        return None
    if method == "POST" and (match := STOP_INSTANCE_PATH.fullmatch(path)):
        return InstanceStopRoute(int(match[1]), int(match[2]))
    return None
