"""The fact journal's port: where the callback path keeps what 2.x accepted while the store does not take it.

Local to one bridge process (beside its data, never in the store it stands in for), durable (an entry survives a
restart once ``append`` returned True), ordered (entries come back in the order they were appended) and bounded
(``append`` refuses past its capacity, and the caller counts what it could not keep). Entries are opaque
documents: the callback path decides what a fact looks like (bridge.callbacks.commands).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True)
class JournalEntry:
    id: int  # ascending in the order of appending
    document: str
    kept_at_ms: int  # when it was appended


class FactJournal(Protocol):
    def append(self, document: str, kept_at_ms: int) -> bool:
        """Keep ``document`` durably after every entry kept so far; False when the journal is full (nothing kept).
        Raises OSError-like errors of the local disk; the caller counts those as not kept."""
        ...

    def oldest(self, limit: int) -> list[JournalEntry]:
        """The first ``limit`` entries, oldest first."""
        ...

    def remove(self, entry_ids: Sequence[int]) -> None:
        """Forget these entries (done with)."""
        ...

    def size(self) -> int:
        """How many entries are kept."""
        ...

    def oldest_kept_at_ms(self) -> int | None:
        """When the oldest entry was kept; None when empty."""
        ...

    def close(self) -> None: ...
