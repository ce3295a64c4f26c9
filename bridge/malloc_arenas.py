"""Cap glibc's malloc arenas in the serving worker, so its memory stays flat over a long run.

glibc gives each thread that meets contention an arena of its own, up to eight per core, and keeps every
arena's freed memory for reuse by that arena. The gthread worker runs 16 request threads plus the shadow
lanes; over 100,000 callbacks its RSS grew by tens of MiB, all of it in those arenas (Python's own small
object allocator stayed flat). Two arenas make the worker's RSS flat at no measurable cost in latency
(tests/bench/bench_shadow_http.py prints both). An operator's own MALLOC_ARENA_MAX is left in charge.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import platform

M_ARENA_MAX = -8  # from glibc's <malloc.h>
DEFAULT_ARENAS = 2


def limit_malloc_arenas(arenas: int = DEFAULT_ARENAS, environ: dict[str, str] | None = None) -> bool:
    """Cap the arenas of this process (call before its threads start); True when the cap was set here."""
    env = os.environ if environ is None else environ
    if "MALLOC_ARENA_MAX" in env or platform.libc_ver()[0] != "glibc":
        return False  # glibc already applied the operator's value at start; other C libraries differ
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        return bool(ctypes.CDLL(name).mallopt(M_ARENA_MAX, int(arenas)))
    except (OSError, AttributeError):
        return False
