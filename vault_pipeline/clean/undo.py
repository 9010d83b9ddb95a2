"""Undo a sweep run: put every file it touched back to its old path and bytes.

Each file goes back unless it changed after the run (then it is left alone, with a reason).
A run that crashed before its summary is undone from its ``files.jsonl`` entries, including a
change it was in the middle of. Undo is journaled the same way, so it can be undone too.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath
from typing import Any

from vault_pipeline.clean.journal import Journal, journal_dir, load_journal
from vault_pipeline.vault.files import Vault
from vault_pipeline.vault.state import atomic_write, sha256_bytes


@dataclass
class UndoReport:
    """What an undo restored and left alone; the undo's own run id (it is journaled too)."""

    undone: str = ""
    run_id: str = ""
    restored: int = 0
    skipped: list[str] = field(default_factory=list)
    journal: str = ""
    seconds: float = 0.0


def undo(vault: Vault, run_id: str, *, wait: float = 0) -> UndoReport:
    """Put every file a run touched back to its old path and bytes, unless it changed since."""
    with vault.lock("undo", wait=wait):
        return undo_held(vault, run_id)


def undo_held(vault: Vault, run_id: str) -> UndoReport:
    """``undo`` for a caller that already holds the vault lock."""
    started = datetime.now(UTC)
    report = UndoReport(undone=run_id)
    record = load_journal(vault, run_id)
    journal = Journal(vault, "undo", run_id, undoes=run_id)
    for entry in reversed(record["files"]):
        why = _restore(vault, journal, entry)
        if why:
            report.skipped.append(f"{entry['path_after']}: {why}")
        else:
            report.restored += 1
    path = journal.finish([{"action": "undo", "run_id": run_id}], report.skipped)
    report.run_id = journal.run_id if path else ""
    report.journal = str(path or "")
    report.seconds = (datetime.now(UTC) - started).total_seconds()
    return report


def _restore(vault: Vault, journal: Journal, entry: dict[str, Any]) -> str:
    """Move one file back and restore its bytes; '' on success, else why it was left alone."""
    root = Path(vault.root)
    old_path = entry["path_before"]
    found = _as_the_run_left_it(root, entry)
    if found is None:
        original_now = _read(root / old_path)
        if original_now is not None and sha256_bytes(original_now) == entry["sha256_before"]:
            return "already as it was before the run"
        gone = _read(root / entry["path_after"]) is None
        why = "gone since the run" if gone else "changed after the run; left as it is"
        return f"{why} (its bytes before the run: {journal_dir(vault) / entry['copy']})"
    now_path, current = found
    if now_path != old_path and (root / old_path).exists():
        return f"{old_path} is taken by another file; left where it is"
    original = (journal_dir(vault) / entry["copy"]).read_bytes()
    journal.before(entry["id"], now_path, current)
    journal.expect(entry["id"], [(old_path, sha256_bytes(current)), (old_path, sha256_bytes(original))])
    path = now_path
    if now_path != old_path:
        path = vault.move(now_path, str(PurePosixPath(old_path).parent))
    _put_bytes(vault, path, original, sha256_bytes(current))
    journal.after(entry["id"], path)
    return ""


def _as_the_run_left_it(root: Path, entry: dict[str, Any]) -> tuple[str, bytes] | None:
    """(path, bytes) of the file as the run left it: as recorded, as a crash mid-change left it
    (the entry's pending states), or moved back by an undo that crashed before restoring bytes."""
    states = [
        (entry["path_after"], entry["sha256_after"]),
        *map(tuple, entry.get("pending", ())),
        (entry["path_before"], entry["sha256_after"]),
    ]
    for relpath, sha in states:
        data = _read(root / relpath)
        if data is not None and sha256_bytes(data) == sha:
            return relpath, data
    return None


def _read(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except OSError:
        return None


def _put_bytes(vault: Vault, relpath: str, data: bytes, expected_sha256: str) -> None:
    """Restore a file's exact bytes (vault.py edits keys; undo needs the whole file back).

    The vault's state follows, as ``update_frontmatter`` does it: a file that was still ours
    stays ours, so a later ingest may update it again; a user's file stays the user's.
    """
    record = vault.state.get(relpath)
    stat = atomic_write(vault.path(relpath), data, expect_sha256=expected_sha256)
    if record is not None and record.sha256 == expected_sha256:
        vault.state.record(relpath, record.note_id, sha256_bytes(data), stat.st_size, stat.st_mtime_ns)
