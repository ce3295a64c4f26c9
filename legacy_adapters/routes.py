"""2.x v2.21.0's routes that carry a task's run state: the status callbacks and the stops
(docs/legacy-2x.md#the-status-callback, #run-state-routes).

Paths are exact and case-sensitive: 2.x answers mixed-case /api/ and /open/ paths with its own 400.
"""

from __future__ import annotations

import re

# `PUT /open/crons/status` is the task shell's (shell/api.sh); the panel calls its /api twin.
STATUS_PATHS = frozenset({"/open/crons/status", "/api/crons/status"})
SHELL_STATUS_PATH = "/open/crons/status"
# `PUT /crons/stop` with a JSON array of cron ids.
STOP_PATHS = frozenset({"/open/crons/stop", "/api/crons/stop"})
# stopInstance (`POST /crons/:id/instances/:instanceId/stop`); 2.x does not check :id against the row's cron.
STOP_INSTANCE_PATH = re.compile(r"/(?:open|api)/crons/([0-9]{1,15})/instances/([0-9]{1,15})/stop")
