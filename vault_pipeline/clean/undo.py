"""Undo a sweep run: put every file it touched back to its old path and bytes.

Each file goes back unless it changed after the run (then it is left alone, with a reason).
``action=N`` undoes one action of a sweep run (its journal entries carry the action number):
its files go back byte for byte; a file a later action of the run changed too (a canonical note
that was then related) gets back only the keys this action set, the later actions' keys stay.
A run that crashed before its summary is undone from its ``files.jsonl`` entries, including a
change it was in the middle of. Undo is journaled the same way, so it can be undone too.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath
from typing import Any

from vault_pipeline.errors import VaultError
from vault_pipeline.vault.files import Vault
from vault_pipeline.vault.frontmatter import split_frontmatter
from vault_pipeline.vault.journal import Journal, journal_dir, load_journal
from vault_pipeline.vault.state import atomic_write, edit_frontmatter_text, sha256_bytes


@dataclass
class UndoReport:
    """What an undo restored and left alone; the undo's own run id (it is journaled too)."""

    undone: str = ""
    run_id: str = ""
    restored: int = 0
    skipped: list[str] = field(default_factory=list)
    journal: str = ""
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        """The report as ``vault clean --undo RUN --json`` prints it (the CLI adds ``exit_code``)."""
        return {"undone": self.undone, "restored": self.restored, "run_id": self.run_id, "skipped": self.skipped}


def undo(vault: Vault, run_id: str, *, action: int | None = None, wait: float = 0) -> UndoReport:
    """Put every file a run (or only its action number ``action``) touched back, unless changed since."""
    with vault.lock("undo", wait=wait):
        return undo_held(vault, run_id, action=action)


def undo_held(vault: Vault, run_id: str, *, action: int | None = None) -> UndoReport:
    """``undo`` for a caller that already holds the vault lock."""
    started = datetime.now(UTC)
    report = UndoReport(undone=run_id if action is None else f"{run_id} action {action}")
    record = load_journal(vault, run_id)
    entries = _entries_to_undo(record["files"], run_id, action)
    journal = Journal(vault, "undo", run_id, undoes=run_id)
    restored: set[str] = set()
    for entry in reversed(entries):
        why = _undo_entry(vault, journal, entry, [] if action is None else _later(record["files"], entry))
        if why:
            report.skipped.append(f"{entry['path_after']}: {why}")
        else:
            restored.add(entry.get("note_id") or entry["id"])
    report.restored = len(restored)  # notes, not journal entries: two actions on one note restore one file
    done = {"action": "undo", "run_id": run_id, **({"undone_action": action} if action is not None else {})}
    path = journal.finish([done], report.skipped)
    report.run_id = journal.run_id if path else ""
    report.journal = str(path or "")
    report.seconds = (datetime.now(UTC) - started).total_seconds()
    return report


def _entries_to_undo(files: list[dict[str, Any]], run_id: str, action: int | None) -> list[dict[str, Any]]:
    """The journal entries to put back: one per note for a whole run, or those of action ``action``."""
    if action is None:
        return _per_note(files)
    entries = [e for e in files if e.get("action") == action]
    if not entries:
        numbers = sorted({e["action"] for e in files if "action" in e})
        known = f"its actions are {_ranges(numbers)}" if numbers else "it records no action numbers"
        raise VaultError(f"run {run_id} has no action {action} that changed a file; {known}")
    return entries


def _undo_entry(vault: Vault, journal: Journal, entry: dict[str, Any], later: list[dict[str, Any]]) -> str:
    """Put one entry back; '' on success, else why it was left alone."""
    if not later:
        return _restore(vault, journal, entry)
    why = _revert_keys(vault, journal, entry, later)
    if why:
        why += f"; the same note was also changed by action(s) {_ranges([e['action'] for e in later])} of this run"
    return why


def _per_note(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One entry per note for a whole-run undo: its first state before the run, its last after.

    A note two actions touched has an entry per action; restoring straight to the first one's
    bytes is the same result with no intermediate state for a later undo of the undo to trip on.
    """
    merged: dict[str, dict[str, Any]] = {}
    for entry in entries:
        key = entry.get("note_id") or entry["id"]
        if key not in merged:
            merged[key] = dict(entry)
            continue
        first = merged[key]
        first.update(path_after=entry["path_after"], sha256_after=entry["sha256_after"])
        first.pop("pending", None)
        if "pending" in entry:
            first["pending"] = entry["pending"]
    return list(merged.values())


def _later(files: list[dict[str, Any]], entry: dict[str, Any]) -> list[dict[str, Any]]:
    """The run's later entries for the same note (other actions that changed it after this one)."""
    at = files.index(entry)
    return [e for e in files[at + 1 :] if e.get("note_id") and e.get("note_id") == entry.get("note_id")]


def _revert_keys(vault: Vault, journal: Journal, entry: dict[str, Any], later: list[dict[str, Any]]) -> str:
    """Undo one action on a note later actions of the run changed too: put back only the keys it set.

    The note's bytes after this action are the next entry's copy, so the keys this action changed
    are known exactly; every other byte (including the later actions' keys) stays as it is now.
    """
    root = Path(vault.root)
    if entry["path_before"] != entry["path_after"]:
        return "moved by this action and changed by a later one; undo the whole run instead"
    found = _as_the_run_left_it(root, later[-1])
    if found is None:
        return (
            f"changed after the run; left as it is (its bytes before the action: {journal_dir(vault) / entry['copy']})"
        )
    now_path, current = found
    copies = journal_dir(vault)
    before = split_frontmatter((copies / entry["copy"]).read_text(encoding="utf-8"), entry["path_before"])[0]
    after = split_frontmatter((copies / later[0]["copy"]).read_text(encoding="utf-8"), entry["path_after"])[0]
    changes = {k: before.get(k) for k in sorted(set(before) | set(after)) if before.get(k) != after.get(k)}
    if not changes:
        return "already as it was before the action"
    journal.before(entry["id"], now_path, current, note_id=entry.get("note_id", ""))
    new_sha = sha256_bytes(edit_frontmatter_text(current.decode("utf-8"), changes, now_path).encode("utf-8"))
    journal.expect(entry["id"], [(now_path, new_sha)])
    vault.update_frontmatter(now_path, changes, expected_sha256=sha256_bytes(current))
    journal.after(entry["id"], now_path)
    return ""


def _ranges(numbers: list[int]) -> str:
    return ", ".join(str(n) for n in numbers)


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
    journal.before(entry["id"], now_path, current, note_id=entry.get("note_id", ""))
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
