"""Cap glibc's malloc arenas in the serving process, so its memory stays flat over a long run.

glibc gives each thread that meets contention an arena of its own, up to eight per core, and keeps every
arena's freed memory for reuse by that arena; the serving process runs the callback pool, the shadow lanes and
the own-endpoint pool, so without a cap freed memory piles up in many arenas and the resident size keeps
growing. Two arenas keep it flat without slowing the callbacks. An operator's own MALLOC_ARENA_MAX is left in
charge.
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
