"""What a task shell knows and 2.x's callback does not carry, as the seam block adds it for the bridge alone.

Before v2.21 no end callback carries the script's exit code, and no release says that the end was sent from the
shell's signal trap (docs/legacy-2x.md#no-exit-code-before-v221, #stops-and-log-lines-before-v221). The seam block
(legacy_adapters/seam_block.py), sourced by every task shell, knows both and sends them to the bridge as request
headers beside 2.x's unchanged body. The bridge reads them here and never forwards them
(``FOR_THE_BRIDGE_ONLY``): 2.x receives exactly what it would have received without the bridge.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

EXIT_CODE_HEADER = "X-QL-Bridge-Exit-Code"  # the script command's status, as `$?` held it after it ran
TRAPPED_HEADER = "X-QL-Bridge-Trapped"  # "1": the end callback was sent by task.sh's signal trap
FOR_THE_BRIDGE_ONLY = b"x-ql-bridge-"  # the prefix of every request header the bridge strips before forwarding
_MAX_STATUS = 255  # a shell's `$?` is 0..255


@dataclass(frozen=True, slots=True)
class ShellReport:
    """What the task shell reported beside the callback: nothing, by default (no seam block, or a start)."""

    exit_code: int | None = None
    trapped: bool = False


NOTHING = ShellReport()


def read_shell_report(headers: Mapping[str, str] | None) -> ShellReport:
    """The seam block's headers; a value that is not what the block sends is ignored, never guessed at."""
    if not headers:
        return NOTHING
    exit_code = _status(headers.get(EXIT_CODE_HEADER))
    trapped = (headers.get(TRAPPED_HEADER) or "").strip() == "1"
    return NOTHING if exit_code is None and not trapped else ShellReport(exit_code, trapped)


def _status(value: str | None) -> int | None:
    text = (value or "").strip()
    if not text.isascii() or not text.isdigit() or len(text) > 3:
        return None
    number = int(text)
    return number if number <= _MAX_STATUS else None
