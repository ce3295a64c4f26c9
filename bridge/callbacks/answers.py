"""LocalAnswer: a reply the bridge gives the shell itself instead of forwarding (primary mode)."""

from __future__ import annotations

from dataclasses import dataclass

JSON_2X = "application/json; charset=utf-8"  # what Express's res.send(object) sets


@dataclass(frozen=True, slots=True)
class LocalAnswer:
    status: int
    body: bytes
    content_type: str = JSON_2X


OK_2X = LocalAnswer(200, b'{"code":200}')
