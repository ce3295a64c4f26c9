"""Is the seam in place? Pure rule: an origin whose recent 2.x executions are mostly `missing` in the
shadow store has its callbacks going around the bridge (a task shell calling 2.x's port directly),
which a mismatch count alone does not say.

The usual causes: the ql-bridge block is not in 2.x's `config/config.sh` (sourced by every task shell, never
by the backend), so the shells keep the port they inherit from the backend; or it is, and the bridge did
not answer its /livez probe, so the shells fell back to 2.x's port, as the block means them to.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from bridge.service.seam import OriginCoverage

BYPASS_MESSAGE = "callbacks are bypassing the bridge"
BYPASS_MIN_MISSING = 3  # a couple of missed executions are a mismatch, not yet a seam problem
BYPASS_MISSING_SHARE = 0.5  # "most recent executions"
SEAM_WINDOW_MS = 24 * 3600 * 1000
SEAM_FIX = ("point every task shell at the bridge: `ql-bridge seam install` (a fail-safe QlPort block in 2.x's "
            "data/config/config.sh), then `ql-bridge doctor`")


@dataclass(frozen=True)
class SeamFinding:
    origin: str
    missing: int
    recorded: int

    @property
    def message(self) -> str:
        return (f"{self.origin}: {BYPASS_MESSAGE} ({self.missing} of {self.missing + self.recorded} recent "
                f"executions never reached it)")

    def as_dict(self) -> dict[str, object]:
        return {"origin": self.origin, "missing": self.missing, "recorded": self.recorded,
                "message": self.message, "fix": SEAM_FIX}


def bypass_findings(coverage: Iterable[OriginCoverage]) -> list[SeamFinding]:
    """The origins whose recent executions mostly never reached the bridge, by origin name."""
    return [SeamFinding(c.origin, c.missing, c.recorded) for c in sorted(coverage, key=lambda c: c.origin)
            if c.missing >= BYPASS_MIN_MISSING and c.missing_share >= BYPASS_MISSING_SHARE]
