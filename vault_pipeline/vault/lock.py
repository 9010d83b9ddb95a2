"""The vault's exclusive lock: one writing command at a time, and a busy lock names its holder.

An ``flock`` on ``<vault>/.vault_pipeline/lock``; the file holds the holder's pid, command and
start time while it is held, so a second writer can say who it is waiting for. ``flock`` dies
with its process, so a crashed holder never leaves a stale lock behind. ``Vault.lock`` is the
entry point.
"""

from __future__ import annotations

import fcntl
import json
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

from vault_pipeline.errors import LockError

LOCK_FILE = "lock"


_QUEUES: dict[str, threading.Lock] = {}
_QUEUES_GUARD = threading.Lock()


def _queue(path: Path) -> threading.Lock:
    """The in-process turn for the lock at ``path``: threads of one process (the MCP server's tool
    calls, its watcher) wait here for each other, so only one of them ever asks ``flock``, and a
    server is never told that it itself holds the vault."""
    key = os.path.realpath(path)
    with _QUEUES_GUARD:
        return _QUEUES.setdefault(key, threading.Lock())


@contextmanager
def hold(path: Path, command: str, *, wait: float = 0) -> Iterator[None]:
    """Hold the lock at ``path`` for ``command``; LockError naming the holder if it stays busy for ``wait`` s."""
    path.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    turn = _queue(path)
    if not turn.acquire(timeout=max(0.0, wait)):
        raise LockError(path, _holder(path))
    try:
        with _flock(path, command, max(0.0, wait - (time.monotonic() - started))):
            yield
    finally:
        turn.release()


@contextmanager
def _flock(path: Path, command: str, wait: float) -> Iterator[None]:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        _acquire(fd, path, wait)
        os.ftruncate(fd, 0)
        holder = {"pid": os.getpid(), "command": command, "started": datetime.now(UTC).isoformat(timespec="seconds")}
        os.pwrite(fd, (json.dumps(holder) + "\n").encode("utf-8"), 0)
        try:
            yield
        finally:
            os.ftruncate(fd, 0)
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def _acquire(fd: int, path: Path, wait: float) -> None:
    deadline = time.monotonic() + max(0.0, wait)
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            # flock dies with its process, so a held lock always has a live holder.
            if time.monotonic() >= deadline:
                raise LockError(path, _holder(path)) from None
            time.sleep(0.05)


def _holder(path: Path) -> str:
    try:
        info = json.loads(path.read_text(encoding="utf-8") or "{}")
        return f"`{info['command']}` (pid {info['pid']}, since {info['started']})"
    except (OSError, ValueError, KeyError, TypeError):
        return "another vault_pipeline process"
