"""Linux process identity (docs/run-state.md#startup-recovery): a pid alone proves nothing, pids are reused.

A handle is the boot id plus the start ticks and process group from /proc/<pid>/stat, taken while the
task shell is known to be alive (at its start callback). Later the process counts as the same one only
if all three still match. Nothing here ever sends a signal.

All of it means something only where 2.x's processes are visible, i.e. the bridge shares 2.x's pid namespace
(``sees_legacy``, the evidence `ql-bridge doctor` shows as "process identity"). Elsewhere a pid names some other
process or none, and the task shell can be told neither alive nor gone.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from legacy_adapters.install import find_backend_processes

PROC = Path("/proc")
# The task shell is bash running task.sh (docs/legacy-2x.md#callback-senders); a pid whose command is something else is
# not the shell that called back (a different pid namespace, or an already reused pid), so no handle is taken.
SHELL_COMMANDS = frozenset({"bash", "sh", "task", "task.sh", "ash", "dash"})


@dataclass(frozen=True, slots=True)
class ProcessHandle:
    boot_id: str
    start_ticks: int
    pgrp: int

    def to_json(self) -> str:
        return json.dumps({"boot_id": self.boot_id, "start_ticks": self.start_ticks, "pgrp": self.pgrp},
                          separators=(",", ":"), sort_keys=True)

    @classmethod
    def from_json(cls, text: str | None) -> ProcessHandle | None:
        try:
            data = json.loads(text or "")
            return cls(str(data["boot_id"]), int(data["start_ticks"]), int(data["pgrp"]))
        except (ValueError, KeyError, TypeError):
            return None


class ProcProbe:
    """Reads /proc; a different root makes it testable."""

    def __init__(self, root: Path = PROC) -> None:
        self._root = root
        self._boot_id: str | None = None

    def boot_id(self) -> str | None:
        # Read once: this process cannot outlive the boot it started in (it is on every start callback's path).
        if self._boot_id is None:
            try:
                self._boot_id = (self._root / "sys/kernel/random/boot_id").read_text().strip() or None
            except OSError:
                return None
        return self._boot_id

    def sees_legacy(self) -> bool:
        """Whether 2.x's Node backend is visible here (2.x's pid namespace): without it no identity can be judged."""
        return bool(find_backend_processes(self._root))

    def stat(self, pid: int) -> tuple[str, int, int] | None:
        """(command, start ticks, process group) of a live pid, or None."""
        try:
            raw = (self._root / str(pid) / "stat").read_text()
        except (OSError, ValueError):
            return None
        # comm is in parentheses and may itself contain spaces or ')': split at the last ')'.
        head, _, tail = raw.rpartition(")")
        fields = tail.split()
        try:
            return head.partition("(")[2], int(fields[19]), int(fields[2])
        except (IndexError, ValueError):
            return None

    def handle_for_shell(self, pid: int | None) -> ProcessHandle | None:
        """A handle for the task shell's pid, or None when it is not provably that shell."""
        if pid is None or pid <= 0:
            return None
        boot, stat = self.boot_id(), self.stat(pid)
        if boot is None or stat is None or stat[0] not in SHELL_COMMANDS:
            return None
        return ProcessHandle(boot, stat[1], stat[2])

    def same_process(self, pid: int | None, handle: ProcessHandle | None) -> bool | None:
        """True: provably the recorded process, alive. False: provably gone. None: cannot tell."""
        if handle is None or pid is None:
            return None
        boot = self.boot_id()
        if boot is None:
            return None
        if boot != handle.boot_id:
            return False  # the machine rebooted since: that process is gone
        stat = self.stat(pid)
        if stat is None:
            return False
        return stat[1] == handle.start_ticks and stat[2] == handle.pgrp
