"""The server's allocator settings: large blocks freed go back to the system (glibc).

Without them glibc raises its mmap threshold to the size of the first large block freed, and the
large blocks allocated after it come from the heap, where freeing them returns nothing while a
small block lies above them: the MCP server's RSS climbed that way under `remember` load
(docs/decisions/0155-server-memory.md). A subprocess frees a large block, then allocates and frees
64 blocks of 1 MiB, each followed by a small one it keeps, and reports how much of them it still holds.
"""

from __future__ import annotations

import ctypes.util
import subprocess
import sys

import pytest

from tests.support.fakes import HANG_GUARD
from tests.support.paths import REPO

PROBE = """
import ctypes, sys
from vault_pipeline.serve.memory import bound_allocator
if sys.argv[1] == "bound":
    assert bound_allocator()
libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096
def block(size):
    p = libc.malloc(size)
    ctypes.memset(p, 1, size)
    return p
libc.free(block(16 << 20))  # the first large free: glibc's threshold would rise to 16 MiB
before = rss()
blocks, pins = [], []
for _ in range(64):
    blocks.append(block(1 << 20))
    pins.append(block(32 << 10))  # a small block after each keeps the heap from shrinking or merging
for p in blocks:
    libc.free(p)
print(rss() - before)
"""


def _held(mode: str) -> int:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, mode],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
        timeout=HANG_GUARD,
    )
    assert done.returncode == 0, done.stderr
    return int(done.stdout)


@pytest.mark.skipif(not sys.platform.startswith("linux") or ctypes.util.find_library("c") is None, reason="glibc")
def test_freed_large_blocks_go_back_to_the_system_once_the_allocator_is_bound():
    try:
        held = _held("default")
    except AssertionError as exc:
        pytest.skip(f"not glibc here: {exc}")
    assert held > 32 << 20  # what the server did before: most of the 64 MiB kept
    assert _held("bound") < 8 << 20  # each block its own mapping, returned when freed


def test_vault_mcp_bounds_the_allocator_before_it_builds_anything(monkeypatch, tmp_path):
    import vault_pipeline.cli.serve as cli_serve
    import vault_pipeline.serve.mcp as mcp
    import vault_pipeline.serve.memory as memory

    order: list[str] = []
    monkeypatch.setattr(memory, "bound_allocator", lambda: order.append("bound") or True)
    monkeypatch.setattr(cli_serve, "vault_tools", lambda path: order.append("tools"))
    monkeypatch.setattr(mcp, "serve", lambda *args, **kwargs: order.append("serve"))
    cli_serve.mcp(vault_path=tmp_path)
    assert order == ["bound", "tools", "serve"]
