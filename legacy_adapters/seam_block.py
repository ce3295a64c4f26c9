"""The ql-bridge block in 2.x's `config/config.sh`: its text, and finding, putting and taking it out. Pure.

Every task shell sources config.sh (`shell/share.sh` `import_config`) and only then computes the port its
status callbacks go to, `ql_port=${QlPort:-5700}`. The block sets `QlPort` to the bridge's port only while a
ql-bridge answers `/livez` there within `PROBE_TIMEOUT_S`; otherwise it gives the shell back the port it
would have used without the bridge, so a bridge that is down never costs 2.x an execution (the reconciler
then reports it `missing`, like any bypass). It uses only what 2.x's image has: bash or sh, and curl.

`QlPortWithoutBridge` remembers that port across processes: a backend started from a shell that sourced
the block (the image's entrypoint, `ql reload`) would otherwise pass the bridge's port on to every task
shell it spawns, and the fallback would fall back to the bridge.

The block is appended at the end of config.sh, so nothing later in the file undoes it; a file that did not
end with a newline gets one before the block and the block none after it, which is how taking the block
out knows to remove that newline again: a file nobody else touched comes back byte for byte.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime

BEGIN = "# >>> ql-bridge seam"
END = "# <<< ql-bridge seam"
PROBE_TIMEOUT_S = 0.3
FALLBACK_VARIABLE = "QlPortWithoutBridge"
_INSTALLED_AT = re.compile(r"installed (\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z)")
_BLOCK_PORT = re.compile(r"\bexport QlPort=(\d{1,5})\b")
# An assignment to QlPort as bash reads one: at the start of a command (after `export`, `declare -x`, `;`,
# `&&`, a brace...), `QlPort=` or `QlPort+=`; or an `unset` naming it. `[[ $QlPort == x ]]` is not one.
_SETS_QLPORT = re.compile(r"(?:^|[\s;&|({])QlPort\+?=|\bunset\b[^;&|#]*\bQlPort\b")


class SeamBlockError(ValueError):
    """config.sh holds a ql-bridge marker line without its partner: the block cannot be told apart safely."""


@dataclass(frozen=True)
class Block:
    """One ql-bridge block: where it sits in the text (character offsets, end exclusive) and what it says."""

    start: int
    end: int
    line: int  # 1-based line of its begin marker
    port: int | None
    installed_at: str | None


def render_block(port: int, installed_at: datetime) -> str:
    """The block that points task shells at the bridge on ``port`` while it answers, ending with a newline."""
    stamp = installed_at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    url = f"http://localhost:{port}/livez"  # the host the shell's callbacks use (shell/api.sh)
    keep, bound = FALLBACK_VARIABLE, f"{PROBE_TIMEOUT_S:g}"
    return "\n".join([
        f"{BEGIN}: installed {stamp} by `ql-bridge seam install`; `ql-bridge seam remove` takes it out >>>",
        f"# Task shells call back to ql-bridge on port {port} only while it answers /livez within {bound} s.",
        "# Otherwise they keep the port they would have used without it, and 2.x records the execution itself.",
        f"# {keep} remembers that port for processes started by a shell that already ran this",
        "# block (2.x's backend, restarted from such a shell), which inherit the bridge's port.",
        f'[ "${{{keep}+set}}" = set ] || export {keep}="${{QlPort-}}"',
        f"case \"$(curl -sf --noproxy '*' --max-time {bound} {url} 2>/dev/null)\" in",
        f"  *'\"status\":'*'\"ok\"'*) export QlPort={port} ;;",
        f'  *) if [ -n "${keep}" ]; then export QlPort="${keep}"; else unset QlPort; fi ;;',
        "esac",
        f"{END} <<<",
        "",
    ])


def find_blocks(text: str) -> list[Block]:
    """The ql-bridge blocks in ``text``, in order. Raises SeamBlockError on a begin without an end or the reverse."""
    blocks: list[Block] = []
    offset, opened, opened_line = 0, None, 0
    for number, line in enumerate(text.splitlines(keepends=True), start=1):
        marker = line.strip()
        if marker.startswith(BEGIN):
            if opened is not None:
                raise SeamBlockError(f"line {opened_line} opens a ql-bridge block that line {number} opens again")
            opened, opened_line = offset, number
        elif marker.startswith(END):
            if opened is None:
                raise SeamBlockError(f"line {number} closes a ql-bridge block that no line opened")
            body = text[opened:offset + len(line)]
            port = _BLOCK_PORT.search(body)
            stamp = _INSTALLED_AT.search(body)
            blocks.append(Block(opened, offset + len(line), opened_line, int(port.group(1)) if port else None,
                                stamp.group(1) if stamp else None))
            opened = None
        offset += len(line)
    if opened is not None:
        raise SeamBlockError(f"line {opened_line} opens a ql-bridge block that no line closes")
    return blocks


def with_block(text: str, block: str) -> str:
    """``text`` holding exactly one ql-bridge block, ``block``: in place of the first one, else at the end."""
    blocks = find_blocks(text)
    if not blocks:
        if not text or text.endswith("\n"):
            return text + block
        return text + "\n" + block.removesuffix("\n")  # the newline moves in front of the block (see above)
    first = blocks[0]
    rest = without_block(text[first.end:])
    at_end_without_newline = not text[first.start:first.end].endswith("\n")
    return text[:first.start] + (block.removesuffix("\n") if at_end_without_newline else block) + rest


def without_block(text: str) -> str:
    """``text`` with every ql-bridge block taken out, and the newline a block added before itself."""
    for found in reversed(find_blocks(text)):
        start = found.start
        if not text[found.start:found.end].endswith("\n") and start > 0 and text[start - 1] == "\n":
            start -= 1  # the block was appended to a file without a final newline: that newline was ours
        text = text[:start] + text[found.end:]
    return text


def qlport_outside_block(text: str) -> tuple[int, str] | None:
    """The first line outside the ql-bridge blocks that sets or unsets QlPort, as (1-based number, line)."""
    inside = [(b.start, b.end) for b in find_blocks(text)]
    offset = 0
    for number, line in enumerate(text.splitlines(keepends=True), start=1):
        outside = not any(start <= offset < end for start, end in inside)
        if outside and not line.lstrip().startswith("#") and _SETS_QLPORT.search(line):
            return number, line.rstrip("\r\n")
        offset += len(line)
    return None
