"""The live index: watch the vault's files and keep the index in step with them.

watchfiles (Rust ``notify``: inotify, FSEvents, ReadDirectoryChangesW) reports changes; it
groups a burst (changes keep coming less than ``step`` ms apart, up to ``debounce`` ms) into
one batch, and each batch is one incremental ``sync``: the sync walks the vault by file stats,
so it re-embeds only what changed and drops the rows of notes moved, renamed or deleted, which
a move of a whole folder needs (the watcher hears about the folder, not the files in it).
Changes under hidden folders (``.obsidian/``, ``.trash/``, our own ``.vault_pipeline/``) and
files other than Markdown are ignored, as ``Vault.iter_note_paths`` ignores them. Each sync
holds the vault lock; when ``ingest`` or ``clean`` holds it, the watcher waits for it (changes
go on collecting) instead of racing it.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from vault_pipeline.errors import LockError, VaultError, storage_fault
from vault_pipeline.index.sync import IndexReport, sync
from vault_pipeline.vault.files import Vault

LOCK_POLL = 0.5  # seconds per attempt at the lock while another command holds it
DEBOUNCE_MS = 1_600  # a burst is cut into batches at most this long (watchfiles' default)
STEP_MS = 50  # a batch ends after this long without a new change: the latency a save pays
RETRY_S = 5.0  # seconds after a failed sync (a full disk) before the watcher tries again unasked


@dataclass(frozen=True)
class WatchEvent:
    """What the watcher did: ``synced`` (with the sync's report), ``waiting`` for the lock, or ``error``."""

    kind: str
    changes: int = 0  # paths changed in the batch (notes and folders; 0 for the first sync)
    report: IndexReport | None = None
    message: str = ""
    time: str = field(default_factory=lambda: datetime.now().astimezone().isoformat(timespec="seconds"))

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready, one line of ``vault watch --json`` (``time``: when it happened, local time with offset)."""
        out: dict[str, Any] = {"event": self.kind, "time": self.time, "changes": self.changes}
        if self.report is not None:
            r = self.report
            out.update(
                added=r.added,
                changed=r.changed,
                moved=r.moved,
                removed=r.removed,
                skipped=[f"{p}: {why}" for p, why in r.skipped],
                rows=r.rows,
                seconds=round(r.seconds, 3),
            )
        if self.message:
            out["message"] = self.message
        return out

    def line(self) -> str:
        """One human-readable line."""
        if self.report is None:
            return self.message
        r = self.report
        return (
            f"synced {self.changes} change(s): {r.added} added, {r.changed} changed, {r.moved} moved, "
            f"{r.removed} removed, {len(r.skipped)} skipped; {r.rows} rows ({r.seconds:.2f} s)"
        )


Listener = Callable[[WatchEvent], None]


class Watcher:
    """Keeps the index of the vault at ``root`` in sync with its files until stopped."""

    def __init__(
        self,
        root: Path,
        embedder,
        *,
        listener: Listener | None = None,
        debounce_ms: int = DEBOUNCE_MS,
        step_ms: int = STEP_MS,
    ):
        self.root = Path(root).resolve()
        self.embedder = embedder
        self.listener = listener or (lambda event: None)
        self.debounce_ms, self.step_ms = debounce_ms, step_ms
        self.stop_event = threading.Event()
        self.ready = threading.Event()  # set once the first sync is done and changes are being watched
        self.retry_s = RETRY_S
        self._failed_at: float | None = None  # when the last sync failed (None: it did not)
        self._thread: threading.Thread | None = None

    # ----------------------------------------------------------------------- running

    def run(self) -> None:
        """Sync once, then sync after every batch of relevant changes; returns when stopped."""
        import watchfiles

        changes = watchfiles.watch(
            self.root,
            watch_filter=self.relevant,
            debounce=self.debounce_ms,
            step=self.step_ms,
            stop_event=self.stop_event,
            rust_timeout=500,  # how often the stop event is looked at
            yield_on_timeout=True,
            raise_interrupt=threading.current_thread() is threading.main_thread(),
        )
        # The watcher is registered when the generator first runs: a save during the first sync is
        # heard, and synced with the next batch.
        first = True
        for batch in changes:
            if first:
                try:
                    self.sync(0)
                finally:
                    self.ready.set()  # reads never wait for a sync that failed: they answer from what is there
                first = False
            elif batch or self._retry_due():
                self.sync(len({path for _, path in batch}))  # a path created then written counts once

    def start(self) -> threading.Thread:
        """Run in a daemon thread (the MCP server's way); ``stop()`` ends it."""
        self._thread = threading.Thread(target=self.run, name="vault-watch", daemon=True)
        self._thread.start()
        return self._thread

    def stop(self, timeout: float = 10.0) -> None:
        """Ask the watcher to stop and wait for its thread (if it runs in one)."""
        self.stop_event.set()
        if self._thread is not None:
            self._thread.join(timeout)

    # ----------------------------------------------------------------------- one batch

    def relevant(self, change: Any, path: str) -> bool:
        """A Markdown note, or a folder (a moved or deleted folder moves its notes), outside hidden folders."""
        try:
            rel = Path(path).relative_to(self.root)
        except ValueError:
            return False
        if not rel.parts or any(part.startswith(".") for part in rel.parts):
            return False
        name = rel.parts[-1]
        if name.endswith(".md"):
            return True
        if os.path.isdir(path):
            return True
        # Gone: a folder if its name has no suffix (files nearly always have one; a false hit costs a no-op sync).
        return int(change) == 3 and "." not in name  # watchfiles.Change.deleted

    def sync(self, changes: int) -> IndexReport | None:
        """One sync under the vault lock, waiting (and saying so) while another command holds it."""
        said_waiting = False
        while not self.stop_event.is_set():
            vault = Vault(self.root)
            try:
                with ExitStack() as held:
                    try:
                        held.enter_context(vault.lock("watch", wait=LOCK_POLL))
                    except LockError as exc:
                        if not said_waiting:
                            self.listener(WatchEvent("waiting", changes, message=f"waiting: {exc}"))
                            said_waiting = True
                        continue
                    return self._synced(vault, changes)
            finally:
                vault.close()
        return None

    def _retry_due(self) -> bool:
        return self._failed_at is not None and time.monotonic() - self._failed_at >= self.retry_s

    def _synced(self, vault: Vault, changes: int) -> IndexReport | None:
        try:
            report = sync(vault, self.embedder)
        except Exception as exc:
            # A failed write (a full disk, a read-only file) never ends the watcher: it says so in one
            # line and tries again after ``retry_s``, or with the next change, whichever comes first.
            fault: BaseException = storage_fault(exc) or exc
            said = str(fault) if isinstance(fault, VaultError) else f"{type(exc).__name__}: {str(exc)[:300]}"
            self._failed_at = time.monotonic()
            self.listener(WatchEvent("error", changes, message=f"error: {' '.join(said.split())}; will retry"))
            return None
        self._failed_at = None
        self.listener(WatchEvent("synced", changes, report))
        return report


def wait_until(predicate: Callable[[], bool], timeout: float, interval: float = 0.02) -> bool:
    """Poll ``predicate`` until it holds or ``timeout`` seconds pass (for tests and the benchmark)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()
