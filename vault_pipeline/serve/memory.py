"""A long-running server's memory: glibc's allocator told to give freed memory back.

Measured under load (`benchmarks/bench_mcp_load.py`, docs/decisions/0155-server-memory.md): with
writes (every ``remember`` re-syncs the index, a new LanceDB version each time) the server's RSS
climbed for minutes while Python's own heap stayed flat and LanceDB's caches held about 3 MB; a
``malloc_trim`` gave back most of the climb. It is memory freed but kept by glibc: one arena per
thread that has allocated (up to eight per core) and a threshold for returning large blocks that
grows with the first large block freed, so Arrow's buffers of each new version come from arenas
that are never handed back. Two ``mallopt`` settings, made before the server's threads start, keep
it near flat: at most ``ARENAS`` arenas, and a fixed threshold above which a block is its own
mapping (returned when freed). Elsewhere than glibc nothing is changed.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

ARENAS = 2
MMAP_THRESHOLD = 128 * 1024  # bytes: glibc's default, held fixed (it would grow with the first large free)
_M_MMAP_THRESHOLD, _M_ARENA_MAX = -3, -8  # malloc.h


def bound_allocator() -> bool:
    """Apply the settings above where the C library is glibc; True when it did. Call early, before
    the threads of the models and the index are started (later threads still share the bound)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False  # not glibc (musl has no mallopt): its allocator is left as it is
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(_M_ARENA_MAX, ARENAS)) and bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD))
