"""Readers for the container files, small enough to check by eye: Dockerfile instructions, .dockerignore
matching, and the block-style YAML subset compose.yaml is written in (PyYAML is not a dependency)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"
COMPOSE = ROOT / "compose.yaml"
ENTRYPOINT = ROOT / "docker" / "entrypoint.sh"


# --- Dockerfile -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Instruction:
    keyword: str  # upper case
    args: str  # continuation lines joined as Docker joins them
    stage: int  # index of the FROM it belongs to

    def exec_form(self) -> list[str] | None:
        """The JSON array of an exec-form ENTRYPOINT, CMD or HEALTHCHECK ... CMD; None in shell form."""
        text = self.args.partition("CMD ")[2] if self.keyword == "HEALTHCHECK" else self.args
        try:
            value = json.loads(text.strip())
        except ValueError:
            return None
        if isinstance(value, list) and value and all(isinstance(item, str) for item in value):
            return value
        return None


def dockerfile_instructions(path: Path = DOCKERFILE) -> list[Instruction]:
    """Instructions in order; a backslash at the end of a line joins the next one (comment lines inside a
    continuation are dropped, as Docker does)."""
    result: list[Instruction] = []
    stage, pending = -1, ""
    for line in path.read_text().splitlines():
        if line.lstrip().startswith("#") or (not pending and not line.strip()):
            continue
        if line.endswith("\\"):
            pending += line[:-1]
            continue
        text = (pending + line).strip()
        pending = ""
        keyword, _, args = text.partition(" ")
        keyword = keyword.upper()
        if keyword == "FROM":
            stage += 1
        result.append(Instruction(keyword, args.strip(), stage))
    assert not pending, "the Dockerfile ends inside a line continuation"
    return result


def env_of(instructions: list[Instruction], stage: int) -> dict[str, str]:
    """The `ENV key=value ...` pairs of one stage (values without spaces or quotes, as ours are)."""
    env: dict[str, str] = {}
    for item in instructions:
        if item.keyword == "ENV" and item.stage == stage:
            for pair in item.args.split():
                key, sep, value = pair.partition("=")
                assert sep, f"ENV {item.args!r}: only the key=value form is read here"
                env[key] = value
    return env


# --- .dockerignore (Docker's rules: Go filepath.Match plus **, a pattern also matches everything under a
# directory it matches, `!` re-includes, the last matching line wins) -----------------------------------------


def _pattern_regex(pattern: str) -> re.Pattern[str]:
    out, i = "", 0
    while i < len(pattern):
        char = pattern[i]
        if pattern.startswith("**", i):
            out += ".*"
            i += 2
            if pattern.startswith("/", i):
                out, i = out + "(?:/)?", i + 1  # `**/x` also matches a top-level x
            continue
        if char == "*":
            out += "[^/]*"
        elif char == "?":
            out += "[^/]"
        elif char == "[":
            end = pattern.index("]", i)
            out += pattern[i : end + 1]  # Go's classes ([a-z], [^a-z]) read the same as a regex's
            i = end
        else:
            out += re.escape(char)
        i += 1
    return re.compile(out + r"\Z")


def dockerignore_rules(path: Path = DOCKERIGNORE) -> list[tuple[bool, re.Pattern[str]]]:
    """(excludes, regex) per pattern line."""
    rules = []
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        excludes = not line.startswith("!")
        pattern = line.lstrip("!").strip().strip("/")
        rules.append((excludes, _pattern_regex(pattern)))
    return rules


def in_build_context(relative: str, rules: list[tuple[bool, re.Pattern[str]]]) -> bool:
    """Whether a path (relative to the context, `/`-separated) is sent to the builder."""
    parts = relative.strip("/").split("/")
    candidates = ["/".join(parts[: n + 1]) for n in range(len(parts))]
    excluded = False
    for excludes, regex in rules:
        if any(regex.match(candidate) for candidate in candidates):
            excluded = excludes
    return not excluded


# --- compose.yaml: block mappings and sequences of plain or quoted scalars, nothing else -------------------


class UnsupportedYamlError(ValueError):
    """The file uses YAML this reader does not understand: fail rather than misread it."""


def _strip_comment(line: str) -> str:
    quote = None
    for index, char in enumerate(line):
        if quote:
            if char == quote:
                quote = None
        elif char in "'\"":
            quote = char
        elif char == "#" and (index == 0 or line[index - 1] in " \t"):
            return line[:index].rstrip()
    return line.rstrip()


def _scalar(text: str, where: int) -> str:
    text = text.strip()
    if text[:1] in ("'", '"'):
        if len(text) < 2 or text[-1] != text[0]:
            raise UnsupportedYamlError(f"line {where}: unterminated or trailing text after a quoted scalar")
        return text[1:-1]
    if text[:1] in ("[", "{", "&", "*", "|", ">", "!", "%", "@", "`") or text.startswith("<<"):
        raise UnsupportedYamlError(f"line {where}: {text[:1]!r} (flow collections, anchors, block scalars, "
                                   f"tags) is not read here")
    return text


def load_yaml_subset(text: str) -> Any:
    """Nested dicts, lists and strings; every scalar stays a string (`8` is "8")."""
    lines = []
    for number, raw in enumerate(text.splitlines(), start=1):
        if "\t" in raw[: len(raw) - len(raw.lstrip())]:
            raise UnsupportedYamlError(f"line {number}: tab in indentation")
        line = _strip_comment(raw)
        if line.strip() in ("---", "..."):
            raise UnsupportedYamlError(f"line {number}: document markers are not read here")
        if line.strip():
            lines.append((number, len(line) - len(line.lstrip(" ")), line.strip()))
    value, end = _block(lines, 0, lines[0][1] if lines else 0)
    if end != len(lines):
        raise UnsupportedYamlError(f"line {lines[end][0]}: indentation does not fit its block")
    return value


def _block(lines: list[tuple[int, int, str]], start: int, indent: int) -> tuple[Any, int]:
    if start >= len(lines):
        return None, start
    if lines[start][2].startswith("- ") or lines[start][2] == "-":
        return _sequence(lines, start, indent)
    return _mapping(lines, start, indent)


def _sequence(lines: list[tuple[int, int, str]], index: int, indent: int) -> tuple[list[Any], int]:
    items: list[Any] = []
    while index < len(lines) and lines[index][1] == indent and lines[index][2].startswith("-"):
        number, _, text = lines[index]
        item = text[1:].strip()
        if not item or re.match(r"^[^'\"]*?:(\s|$)", item):
            raise UnsupportedYamlError(f"line {number}: only plain scalars are read as sequence items")
        items.append(_scalar(item, number))
        index += 1
    return items, index


def _mapping(lines: list[tuple[int, int, str]], index: int, indent: int) -> tuple[dict[str, Any], int]:
    result: dict[str, Any] = {}
    while index < len(lines) and lines[index][1] == indent:
        number, _, text = lines[index]
        match = re.match(r"^([A-Za-z0-9_.\-]+|\"[^\"]*\"|'[^']*'):(?:\s+(.*))?$", text)
        if not match:
            raise UnsupportedYamlError(f"line {number}: expected `key: value` or `key:`")
        key = match.group(1).strip("'\"")
        if key in result:
            raise UnsupportedYamlError(f"line {number}: duplicate key {key!r}")
        index += 1
        if match.group(2) is not None:
            result[key] = _scalar(match.group(2), number)
        elif index < len(lines) and (lines[index][1] > indent or
                                     (lines[index][1] == indent and lines[index][2].startswith("-"))):
            result[key], index = _block(lines, index, lines[index][1])
        else:
            result[key] = None
    if index < len(lines) and lines[index][1] > indent:
        raise UnsupportedYamlError(f"line {lines[index][0]}: unexpected indentation")
    return result, index


def duration_s(text: str) -> float:
    """A compose duration (`20s`, `1m30s`, `1500ms`) in seconds."""
    units = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001, "us": 1e-6}
    parts = re.findall(r"(\d+(?:\.\d+)?)(ms|us|h|m|s)", text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise ValueError(f"not a duration: {text!r}")
    return sum(float(number) * units[unit] for number, unit in parts)
