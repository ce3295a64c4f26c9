"""What the seam rule (``projections.seam``) reads: recent executions per origin, counted by storage
(``bridge.storage.seam_queries``). Kept here so storage and projections share it without importing each other.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class OriginCoverage:
    """Recent executions of one origin: those 2.x ran that the shadow store lacks, and those it recorded."""

    origin: str
    missing: int
    recorded: int

    @property
    def missing_share(self) -> float:
        seen = self.missing + self.recorded
        return self.missing / seen if seen else 0.0
