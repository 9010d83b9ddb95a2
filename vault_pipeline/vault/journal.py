"""The journal: every file a run (a sweep, or an ingest retiring notes) touches, recorded so the run can be undone.

Before a file is first touched its bytes are copied to ``<vault>/.vault_pipeline/journal/<run-id>/``
and, after each change, its entry (path before/after, sha256 before/after, copy) is appended to
``files.jsonl`` there, so even a crashed run can be undone; ``<run-id>.json`` sums the run up when
it ends. Nothing is ever deleted: the journal keeps its copies.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath
from typing import Any

from vault_pipeline.errors import VaultError, as_storage_error
from vault_pipeline.vault.files import STATE_DIR, Vault
from vault_pipeline.vault.state import atomic_write, edit_frontmatter_text, sha256_bytes

JOURNAL_DIR = "journal"


def journal_dir(vault: Vault) -> Path:
    """``<vault>/.vault_pipeline/journal``: one ``<run-id>.json`` per applied run, copies beside it."""
    return Path(vault.root) / STATE_DIR / JOURNAL_DIR


def _write_atomic(path: Path, data: bytes) -> None:
    """A journal file, written atomically (temp file, fsync, rename)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, data)
    except OSError as exc:
        raise as_storage_error(exc, path) from None  # before the note is touched: the note stays as it was


class Journal:
    """Records each touched file's first 'before' (path + a byte copy) and last 'after'.

    Copies are written before the file is touched and each entry is appended to
    ``<run-id>/files.jsonl`` as it happens, so a crashed run can still be undone;
    ``<run-id>.json`` is written when the run ends.
    """

    def __init__(self, vault: Vault, kind: str, seed: str, undoes: str = ""):
        now = datetime.now(UTC)
        # Sortable: UTC time to the microsecond, then a short hash of what the run does.
        self.run_id = now.strftime("%Y%m%dT%H%M%S%fZ") + "-" + sha256_bytes(f"{now.isoformat()}{seed}".encode())[:8]
        self.vault, self.kind, self.undoes = vault, kind, undoes
        self.started = now.isoformat(timespec="seconds")
        self.stamp = now.strftime("%Y-%m-%dT%H:%M")  # the run's time as a note's archived_by shows it
        self.dir = journal_dir(vault) / self.run_id
        self.entries: dict[str, dict[str, Any]] = {}
        self._latest: dict[str, str] = {}  # note id -> key of its latest entry in this run

    def before(self, key: str, relpath: str, data: bytes, *, note_id: str = "", action: int = 0) -> None:
        """Keep the file's bytes the first time this run (or, with ``action``, this action) touches it.

        The sweep keys entries by action and note (``"<n>:<note id>"``), so one action can be undone
        alone; a note two actions touch then has one entry per action, each with its own copy.
        """
        if key in self.entries:
            return
        copy = self.dir / f"{len(self.entries):05d}.md"
        _write_atomic(copy, data)
        self.entries[key] = {
            "id": key,
            "path_before": relpath,
            "sha256_before": sha256_bytes(data),
            "copy": copy.relative_to(journal_dir(self.vault)).as_posix(),
            "path_after": relpath,
            "sha256_after": sha256_bytes(data),
            **({"note_id": note_id} if note_id else {}),
            **({"action": action} if action else {}),
        }
        self._latest[note_id or key] = key
        self._append(key)  # before the first change: a crash mid-edit still leaves a trace

    def latest(self, note_id: str) -> dict[str, Any] | None:
        """The latest entry of this run for a note (where and how this run last left it)."""
        key = self._latest.get(note_id)
        return self.entries[key] if key is not None else None

    @property
    def files(self) -> int:
        """How many distinct notes this run touched."""
        return len(self._latest)

    def expect(self, key: str, states: Sequence[tuple[str, str]]) -> None:
        """Before a change: the (path, sha256) states a crash in the middle of it can leave."""
        self.entries[key]["pending"] = [list(state) for state in states]
        self._append(key)

    def after(self, key: str, relpath: str) -> str:
        """Record where the file is now and its hash; returns that hash."""
        sha = sha256_bytes((Path(self.vault.root) / relpath).read_bytes())
        self.entries[key].update(path_after=relpath, sha256_after=sha)
        self.entries[key].pop("pending", None)
        self._append(key)
        return sha

    def edit(
        self,
        key: str,
        relpath: str,
        data: bytes,
        changes: dict[str, Any],
        *,
        note_id: str,
        action: int = 0,
        folder: str = "",
    ) -> str:
        """Change named frontmatter keys of the file whose bytes are ``data`` (and move it into
        ``folder``), journaled: its bytes first, the bytes it will have, then where it ended; returns
        its path. A file the user changed since ``data`` is refused (``DirtyFileError``): nothing of
        ours to record, so undo leaves it alone."""
        self.before(key, relpath, data, note_id=note_id, action=action)
        new_sha = sha256_bytes(edit_frontmatter_text(data.decode("utf-8"), changes, relpath).encode("utf-8"))
        moved = f"{folder}/{PurePosixPath(relpath).name}" if folder else relpath
        # A crash before ``after`` leaves the file edited in place or edited and moved: undo accepts both.
        self.expect(key, [(relpath, new_sha), (moved, new_sha)])
        self.vault.update_frontmatter(relpath, changes, expected_sha256=sha256_bytes(data))
        path = relpath
        try:
            if folder:
                path = self.vault.move(relpath, folder)
        finally:  # the edit happened even if the move did not: undo must know the new bytes
            self.after(key, path)
        return path

    def _append(self, key: str) -> None:
        path = self.dir / "files.jsonl"
        try:
            with open(path, "a", encoding="utf-8") as fh:
                fh.write(json.dumps(self.entries[key], sort_keys=True) + "\n")
        except OSError as exc:
            raise as_storage_error(exc, path) from None

    def finish(self, actions: list[dict[str, Any]], skipped: list[str]) -> Path | None:
        """Write ``<run-id>.json`` (nothing when the run touched no file)."""
        if not self.entries:
            return None
        record = {
            "run_id": self.run_id,
            "kind": self.kind,
            "undoes": self.undoes,
            "started": self.started,
            "finished": datetime.now(UTC).isoformat(timespec="seconds"),
            "actions": actions,
            "skipped": skipped,
            "files": list(self.entries.values()),
        }
        path = journal_dir(self.vault) / f"{self.run_id}.json"
        _write_atomic(path, (json.dumps(record, indent=1, sort_keys=True) + "\n").encode())
        return path


def load_journal(vault: Vault, run_id: str) -> dict[str, Any]:
    """A run's journal; for a run that crashed before finishing, its files.jsonl entries."""
    path = journal_dir(vault) / f"{run_id}.json"
    if path.is_file():
        return json.loads(path.read_text(encoding="utf-8"))
    partial = journal_dir(vault) / run_id / "files.jsonl"
    if not partial.is_file():
        raise VaultError(f"no journal for run {run_id!r} in {journal_dir(vault)}")
    latest: dict[str, dict] = {}
    for line in partial.read_text(encoding="utf-8").splitlines():
        try:
            entry = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line torn by a crash mid-append: the entry before it still holds
        latest[entry["id"]] = entry
    return {"run_id": run_id, "kind": "clean", "files": list(latest.values())}
