"""The serving worker caps glibc's malloc arenas, unless the operator set MALLOC_ARENA_MAX."""

from __future__ import annotations

import platform
import subprocess
import sys
import textwrap

import pytest

from bridge.malloc_arenas import limit_malloc_arenas

glibc_only = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="arenas are glibc's")

# Eight threads allocating blocks too big for Python's small-object allocator, then glibc's own count of
# its arenas (malloc_info writes one <heap nr=...> per arena).
CHURN = textwrap.dedent("""
    import ctypes, ctypes.util, re, sys, tempfile, threading
    from bridge.malloc_arenas import limit_malloc_arenas
    print("capped" if limit_malloc_arenas(2) else "not capped")
    def churn():
        keep = []
        for i in range(20000):
            keep.append(bytes(3000 + i % 500))
            del keep[:-100]
    threads = [threading.Thread(target=churn) for _ in range(8)]
    for t in threads: t.start()
    for t in threads: t.join()
    libc = ctypes.CDLL(ctypes.util.find_library("c"))
    libc.fopen.restype = ctypes.c_void_p
    path = tempfile.mktemp()
    f = libc.fopen(path.encode(), b"w")
    libc.malloc_info(0, ctypes.c_void_p(f))
    libc.fclose(ctypes.c_void_p(f))
    print(len(re.findall(r"<heap nr=", open(path).read())))
""")


@glibc_only
def test_the_cap_bounds_the_arenas_of_a_threaded_process() -> None:
    out = subprocess.run([sys.executable, "-c", CHURN], capture_output=True, text=True, check=True,
                         env={"PATH": "/usr/bin:/bin", "PYTHONPATH": ":".join(sys.path)}).stdout.split()
    assert out[0] == "capped" and 1 <= int(out[1]) <= 2, out


@glibc_only
def test_an_operators_malloc_arena_max_is_left_in_charge() -> None:
    assert limit_malloc_arenas(2, environ={"MALLOC_ARENA_MAX": "4"}) is False
