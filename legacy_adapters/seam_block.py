"""The ql-bridge block in 2.x's `config/config.sh`: its text, and finding, putting and taking it out. Pure.

Every task shell sources config.sh (`shell/share.sh` `import_config`, from v2.17.9 after `share.sh` and `api.sh`,
docs/legacy-2x.md#callback-target-before-v221). The block defines a shell function `curl` there, which every
later `curl` in that shell calls. It passes each call through unchanged except a 2.x status callback: the call
whose URL argument is `http://<0.0.0.0|localhost|127.0.0.1>:<port>/open/crons/status?t=...` (whatever port the
release calls: the literal 5600 up to v2.19, `${ql_port}` from v2.20). That call goes to the bridge instead, the
same arguments with only the URL's scheme, host and port replaced, plus `--connect-timeout` and the headers of
`legacy_adapters/shell_report.py`. When curl could not connect to the bridge (exit 7, or 28: with a connect
timeout and no `--max-time` only the connect phase can time out), the original call runs unchanged, so 2.x
records that callback itself: fail-safe per callback, start and end alike. Any other result is final: once
the bridge may have forwarded a callback it is never sent twice.

What the shell knows and 2.x's body does not carry: the script command's exit status and whether the end is
sent from `task.sh`'s signal trap (`single_hanle` in bash's `FUNCNAME` chain, every release). For the status
the block wraps `handle_task_start` (share.sh, defined before config.sh is sourced), which `otask.sh` calls
after it has defined `main`; from there it wraps `main`, whose status is the last command it ran: the script
command, in `run_normal`, `run_else` and `run_designated` at every tag. It changes nothing the script sees but
one more function frame above `main` (a sourced `.sh` keeps its positional parameters), nothing 2.x receives,
and nothing in the task's log. Where a premise does not hold (no such functions, `conc` runs with no single
status) it sends no exit-code header. The functions are defined only under bash (a POSIX sh sourcing
config.sh skips them) and use only sh syntax, bash's `FUNCNAME`/`BASH_SOURCE`/`declare`, and curl.

The block is appended at the end of config.sh, so nothing later in the file undoes it; a file that did not
end with a newline gets one before the block and the block none after it, which is how taking the block
out knows to remove that newline again: a file nobody else touched comes back byte for byte. A block of the
earlier kind (it exported `QlPort` after probing `/livez`) has the same markers: install replaces it, remove
takes it out.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime

BEGIN = "# >>> ql-bridge seam"
END = "# <<< ql-bridge seam"
CONNECT_TIMEOUT_S = 1  # how long a callback waits to reach the bridge before it goes to 2.x itself
FAILOVER_EXITS = (7, 28)  # curl: could not connect; the connect timeout ran out
# curl: the connection was taken but no answer came (an empty reply; a reset). A proxy in front of a bridge that is
# down answers so; so does a bridge killed after it may have forwarded the call. An end is sent to 2.x again then
# (a second end changes nothing 2.x keeps: the row is idle already, no instance is left running with that pid), and
# a start too where 2.x keeps no instance rows (before v2.21 a second start writes the same Crontabs values again).
UNANSWERED_EXITS = (52, 56)
# The names the block defines, for the checks that ask bash what a task shell ends up with.
CALLBACK_URL_FUNCTION = "ql_bridge_callback_url"
_INSTALLED_AT = re.compile(r"installed (\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z)")
_BLOCK_PORT = re.compile(r'ql_bridge_url="http://127\.0\.0\.1:(\d{1,5})\$')
_OLD_BLOCK_PORT = re.compile(r"\bexport QlPort=(\d{1,5})\b")  # the earlier, QlPort-setting block
# An assignment to QlPort as bash reads one: at the start of a command (after `export`, `declare -x`, `;`,
# `&&`, a brace...), `QlPort=` or `QlPort+=`; or an `unset` naming it. `[[ $QlPort == x ]]` is not one.
_SETS_QLPORT = re.compile(r"(?:^|[\s;&|({])QlPort\+?=|\bunset\b[^;&|#]*\bQlPort\b")

class SeamBlockError(ValueError):
    """config.sh holds a ql-bridge marker line without its partner: the block cannot be told apart safely."""


# The block after its first line. Shell text: `@PORT@` is the bridge's port; the rest is written as is.
_BODY = r"""# Every 2.x status callback (curl PUT .../open/crons/status) goes to ql-bridge on 127.0.0.1:@PORT@ first,
# with the script's exit status and the signal trap beside it as X-QL-Bridge-* headers (the bridge never
# forwards them). When ql-bridge cannot be reached (curl exit 7 or 28, connect timeout @TIMEOUT@ s), the same
# call goes to 2.x unchanged; so does an end (@UNANSWERED@) that got no answer at all (curl exit 52 or 56).
# Every other curl call passes through untouched. See ql-bridge's docs/seam.md.
# shellcheck disable=SC2128,SC2329,SC3028,SC3043,SC3044,SC3054
if [ -n "${BASH_VERSION-}" ]; then
  ql_bridge_callback_url() {  # sets ql_bridge_url to the bridge's URL for a 2.x status callback URL, else fails
    local rest="${1#http://}" hostport path
    [ "$rest" != "$1" ] || return 1
    hostport=${rest%%/*}
    path=${rest#"$hostport"}
    case $hostport in 0.0.0.0:*|localhost:*|127.0.0.1:*) ;; *) return 1 ;; esac
    case ${hostport#*:} in ''|*[!0-9]*) return 1 ;; esac
    case $path in '/open/crons/status?t='*) ;; *) return 1 ;; esac
    ql_bridge_url="http://127.0.0.1:@PORT@$path"
  }
  ql_bridge_send() {  # $1 the callback URL, $2 the bridge's, then curl's arguments: the call, to the bridge
    local from="$1" to="$2" arg n swapped=''
    shift 2
    n=$#
    while [ "$n" -gt 0 ]; do
      arg=$1
      shift
      n=$((n - 1))
      if [ -z "$swapped" ] && [ "$arg" = "$from" ]; then arg=$to swapped=1; fi
      set -- "$@" "$arg"
    done
    case " ${FUNCNAME[*]} " in *" single_hanle "*) set -- -H "X-QL-Bridge-Trapped: 1" "$@" ;; esac
    [ -z "${ql_bridge_status-}" ] || set -- -H "X-QL-Bridge-Exit-Code: $ql_bridge_status" "$@"
    command curl --connect-timeout @TIMEOUT@ "$@"
  }
  curl() {
    local ql_bridge_arg ql_bridge_url='' ql_bridge_from='' ql_bridge_limited='' ql_bridge_rc=0 ql_bridge_again=@RESEND@
    for ql_bridge_arg in "$@"; do
      case $ql_bridge_arg in -m|--max-time) ql_bridge_limited=1 ;; *'"status":"1"'*) ql_bridge_again=1 ;; esac
      if [ -z "$ql_bridge_from" ] && ql_bridge_callback_url "$ql_bridge_arg"; then ql_bridge_from=$ql_bridge_arg; fi
    done
    if [ -z "$ql_bridge_from" ]; then command curl "$@"; return; fi
    ql_bridge_send "$ql_bridge_from" "$ql_bridge_url" "$@" || ql_bridge_rc=$?
    case $ql_bridge_rc in
      7) ;;
      28) [ -z "$ql_bridge_limited" ] || return 28 ;;
      52|56) [ "$ql_bridge_again" = 1 ] || return "$ql_bridge_rc" ;;
      *) return "$ql_bridge_rc" ;;
    esac
    command curl "$@"  # ql-bridge was not reached: 2.x gets its own call
  }
  ql_bridge_keep() {  # ql_bridge_keep NAME COPY: NAME's function, also as COPY; fails if there is none, or a COPY
    local body
    if declare -F "$2" >/dev/null || ! body=$(declare -f "$1"); then return 1; fi
    eval "$2${body#"$1"}"
  }
  ql_bridge_watch_main() {  # otask.sh has defined main: its status, the script command's, goes to the end callback
    ql_bridge_keep main ql_bridge_2x_main || return 0
    main() {
      ql_bridge_2x_main "$@"
      local ql_bridge_rc=$?
      [ "${2-}" = conc ] || ql_bridge_status=$ql_bridge_rc
      return "$ql_bridge_rc"
    }
  }
  if ql_bridge_keep handle_task_start ql_bridge_2x_handle_task_start; then
    ql_bridge_status=
    handle_task_start() {
      [ "${BASH_SOURCE[1]##*/}" != otask.sh ] || ql_bridge_watch_main
      ql_bridge_2x_handle_task_start "$@"
    }
  fi
fi
"""


@dataclass(frozen=True)
class Block:
    """One ql-bridge block: where it sits in the text (character offsets, end exclusive) and what it says."""

    start: int
    end: int
    line: int  # 1-based line of its begin marker
    port: int | None
    installed_at: str | None
    sets_qlport: bool = False  # the earlier kind of block, which exported QlPort (install replaces it)


def render_block(port: int, installed_at: datetime, *, resend_unanswered_starts: bool = False) -> str:
    """The block that sends 2.x's status callbacks to the bridge on ``port``, ending with a newline.

    ``resend_unanswered_starts``: a start that got no answer goes to 2.x too (UNANSWERED_EXITS), for releases
    where a second start changes nothing 2.x keeps (``not ReleaseProfile.has_running_instances``)."""
    stamp = installed_at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    body = (_BODY.replace("@PORT@", str(port)).replace("@TIMEOUT@", str(CONNECT_TIMEOUT_S))
            .replace("@RESEND@", "1" if resend_unanswered_starts else "0")
            .replace("@UNANSWERED@", "or a start" if resend_unanswered_starts else "but never a start"))
    return (f"{BEGIN}: installed {stamp} by `ql-bridge seam install`; `ql-bridge seam remove` takes it out >>>\n"
            f"{body}{END} <<<\n")


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
            old = None if port else _OLD_BLOCK_PORT.search(body)
            stamp = _INSTALLED_AT.search(body)
            found = port or old
            blocks.append(Block(opened, offset + len(line), opened_line, int(found.group(1)) if found else None,
                                stamp.group(1) if stamp else None, old is not None))
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
