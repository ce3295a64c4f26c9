"""One doctor check's verdict: ok / warn / fail, its evidence, and the fix when it is not ok."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Verdict = Literal["ok", "warn", "fail"]


@dataclass(frozen=True)
class Check:
    name: str
    verdict: Verdict
    detail: str
    fix: str | None = None
