"""The write side of the cleaning sweep: apply a plan, journal every file, undo a run.

Every change goes through ``vault.py`` (named frontmatter keys only, the rest of the file's
bytes kept; moves never overwrite) under the vault lock. Before a file is first touched its
bytes are copied to ``<vault>/.vault_pipeline/journal/<run-id>/`` and, after each change, its
entry (path before/after, sha256 before/after, copy) is appended to ``files.jsonl`` there, so
even a crashed run can be undone; ``<run-id>.json`` sums the run up when it ends. ``undo``
moves each file back to its old path and restores its bytes, unless the file changed after
the run (then it is left alone, with a reason). Undo is journaled the same way, so it can be
undone too. Nothing is ever deleted: the journal keeps its copies.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from vault_pipeline.errors import DirtyFileError, VaultError
from vault_pipeline.vault.files import STATE_DIR, Vault
from vault_pipeline.vault.state import atomic_write, edit_frontmatter_text

if TYPE_CHECKING:
    from vault_pipeline.clean.plan import Action, Plan

ARCHIVE = "archive"
JOURNAL_DIR = "journal"
_LINK = re.compile(r"^\[\[([^\]|#]+)(?:[#|][^\]]*)?\]\]$")


def link_stem(value: Any) -> str:
    """The note stem of ``[[stem]]``, ``[[stem|alias]]``, ``[[stem#heading]]`` or a bare stem."""
    text = str(value or "").strip()
    match = _LINK.match(text)
    return (match.group(1) if match else text).strip()


def as_list(value: Any) -> list[Any]:
    """A frontmatter value as a list (None -> [], a scalar -> [scalar])."""
    return [] if value is None else list(value) if isinstance(value, (list, tuple)) else [value]


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# --------------------------------------------------------------------------- journal


def journal_dir(vault: Vault) -> Path:
    """``<vault>/.vault_pipeline/journal``: one ``<run-id>.json`` per applied run, copies beside it."""
    return Path(vault.root) / STATE_DIR / JOURNAL_DIR


def _write_atomic(path: Path, data: bytes) -> None:
    """A journal file, written atomically (temp file, fsync, rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, data)


class _Journal:
    """Records each touched file's first 'before' (path + a byte copy) and last 'after'.

    Copies are written before the file is touched and each entry is appended to
    ``<run-id>/files.jsonl`` as it happens, so a crashed run can still be undone;
    ``<run-id>.json`` is written when the run ends.
    """

    def __init__(self, vault: Vault, kind: str, seed: str, undoes: str = ""):
        now = datetime.now(timezone.utc)
        # Sortable: UTC time to the microsecond, then a short hash of what the run does.
        self.run_id = now.strftime("%Y%m%dT%H%M%S%fZ") + "-" + _sha(f"{now.isoformat()}{seed}".encode())[:8]
        self.vault, self.kind, self.undoes = vault, kind, undoes
        self.started = now.isoformat(timespec="seconds")
        self.dir = journal_dir(vault) / self.run_id
        self.entries: dict[str, dict[str, Any]] = {}

    def before(self, key: str, relpath: str, data: bytes) -> None:
        """Keep the file's bytes the first time this run touches it."""
        if key in self.entries:
            return
        copy = self.dir / f"{len(self.entries):05d}.md"
        _write_atomic(copy, data)
        self.entries[key] = {"id": key, "path_before": relpath, "sha256_before": _sha(data),
                             "copy": copy.relative_to(journal_dir(self.vault)).as_posix(),
                             "path_after": relpath, "sha256_after": _sha(data)}
        self._append(key)  # before the first change: a crash mid-edit still leaves a trace

    def expect(self, key: str, states: Sequence[tuple[str, str]]) -> None:
        """Before a change: the (path, sha256) states a crash in the middle of it can leave."""
        self.entries[key]["pending"] = [list(state) for state in states]
        self._append(key)

    def after(self, key: str, relpath: str) -> str:
        """Record where the file is now and its hash; returns that hash."""
        sha = _sha((Path(self.vault.root) / relpath).read_bytes())
        self.entries[key].update(path_after=relpath, sha256_after=sha)
        self.entries[key].pop("pending", None)
        self._append(key)
        return sha

    def _append(self, key: str) -> None:
        with open(self.dir / "files.jsonl", "a", encoding="utf-8") as fh:
            fh.write(json.dumps(self.entries[key], sort_keys=True) + "\n")

    def finish(self, actions: list[dict[str, Any]], skipped: list[str]) -> Path | None:
        """Write ``<run-id>.json`` (nothing when the run touched no file)."""
        if not self.entries:
            return None
        record = {"run_id": self.run_id, "kind": self.kind, "undoes": self.undoes, "started": self.started,
                  "finished": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                  "actions": actions, "skipped": skipped, "files": list(self.entries.values())}
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


# --------------------------------------------------------------------------- apply


@dataclass
class CleanReport:
    """What an applied sweep did: actions per kind, what it skipped and why, and its run id."""

    run_id: str = ""
    counts: Counter = field(default_factory=Counter)
    skipped: list[str] = field(default_factory=list)
    files: int = 0
    journal: str = ""
    seconds: float = 0.0


def apply(vault: Vault, plan: Plan, *, wait: float = 0) -> CleanReport:
    """Perform ``plan`` under the vault lock; notes edited since planning are skipped, never overwritten."""
    with vault.lock("clean", wait=wait):
        return apply_held(vault, plan)


def apply_held(vault: Vault, plan: Plan) -> CleanReport:
    """``apply`` for a caller that already holds the vault lock."""
    started = datetime.now(timezone.utc)
    report = CleanReport()
    journal = _Journal(vault, "clean", json.dumps(plan.to_json(), sort_keys=True))
    done = []
    for action in plan.actions:
        why = _apply_action(vault, journal, action)
        if why:
            report.skipped.append(f"{action.action} {' / '.join(action.notes)}: {why}")
        else:
            report.counts[action.action] += 1
            done.append(action.to_dict())
    path = journal.finish(done, report.skipped)
    report.run_id = journal.run_id if path else ""
    report.journal = str(path or "")
    report.files = len(journal.entries)
    report.seconds = (datetime.now(timezone.utc) - started).total_seconds()
    return report


@dataclass
class _Live:
    """One note as it is on disk right now, checked against what the plan (or this run) saw."""

    path: str
    sha: str
    frontmatter: dict[str, Any]
    data: bytes


def _apply_action(vault: Vault, journal: _Journal, action: Action) -> str:
    """Apply one action; '' on success, else why it was skipped (no file of it is touched)."""
    live: dict[str, _Live] = {}
    for note_id in action.notes:
        entry = journal.entries.get(note_id)  # touched earlier in this run: expect our own write
        path = entry["path_after"] if entry else action.paths[note_id]
        expected = entry["sha256_after"] if entry else action.expected_sha256[note_id]
        try:
            data = (Path(vault.root) / path).read_bytes()
            frontmatter, _, _ = vault.read(path)
        except (OSError, VaultError):
            return f"{path} is gone or unreadable since the plan was made"
        if _sha(data) != expected:
            return f"{path} was edited since the plan was made; left untouched"
        live[note_id] = _Live(path, expected, dict(frontmatter), data)
    touched = len(journal.entries)
    try:
        _perform(vault, journal, action, live)
    except DirtyFileError as exc:  # edited between our check and the write, or archive/ has that name
        partly = " (the action was partly applied; the journal records what changed)" \
            if len(journal.entries) > touched else ""
        return f"{exc}{partly}"
    return ""


def _perform(vault: Vault, journal: _Journal, action: Action, live: dict[str, _Live]) -> None:
    match action.action:
        case "duplicate":
            canon, others = action.notes[0], action.notes[1:]
            _edit(vault, journal, canon, live[canon], _absorb(live[canon], [live[o] for o in others]))
            for other in others:
                _edit(vault, journal, other, live[other],
                      {"duplicate_of": _wikilink(live[canon].path), "status": "archived"}, ARCHIVE)
        case "supersede":
            newer, older = action.notes
            supersedes = _union(live[newer].frontmatter.get("supersedes"), [_wikilink(live[older].path)])
            _edit(vault, journal, newer, live[newer], {"supersedes": supersedes})
            _edit(vault, journal, older, live[older],
                  {"superseded_by": _wikilink(live[newer].path), "status": "archived"}, ARCHIVE)
        case "relate":
            a, b = action.notes
            _edit(vault, journal, a, live[a], {"related": _union(live[a].frontmatter.get("related"),
                                                                  [_wikilink(live[b].path)])})
            _edit(vault, journal, b, live[b], {"related": _union(live[b].frontmatter.get("related"),
                                                                  [_wikilink(live[a].path)])})
        case _:
            raise VaultError(f"unknown sweep action {action.action!r}")


def _edit(vault: Vault, journal: _Journal, note_id: str, note: _Live, changes: dict[str, Any],
          folder: str = "") -> None:
    """Change named frontmatter keys (and move), journaling the bytes first."""
    journal.before(note_id, note.path, note.data)
    new_sha = _sha(edit_frontmatter_text(note.data.decode("utf-8"), changes, note.path).encode("utf-8"))
    moved = f"{folder}/{PurePosixPath(note.path).name}" if folder else note.path
    # A crash before ``after`` leaves the file edited in place or edited and moved: undo accepts both.
    journal.expect(note_id, [(note.path, new_sha), (moved, new_sha)])
    # Refused (the user's bytes are there): nothing of ours to record, so undo leaves it alone.
    vault.update_frontmatter(note.path, changes, expected_sha256=note.sha)
    path = note.path
    try:
        if folder:
            path = vault.move(note.path, folder)
    finally:  # the edit happened even if the move did not: undo must know the new bytes
        journal.after(note_id, path)


def _mapping(value: Any) -> dict[str, Any]:
    return dict(value) if isinstance(value, dict) else {}


def _wikilink(relpath: str) -> str:
    return f"[[{PurePosixPath(relpath).stem}]]"


def _union(existing: Any, new: Sequence[str]) -> list[str]:
    """Links as ``[[stem]]``, one per stem, sorted."""
    stems = {link_stem(v) for v in as_list(existing)} | {link_stem(v) for v in new}
    return [f"[[{s}]]" for s in sorted(s for s in stems if s)]


def _absorb(canon: _Live, others: list[_Live]) -> dict[str, Any]:
    """The canonical note's merged source messages, related links and tags."""
    source = _mapping(canon.frontmatter.get("source"))
    messages = [str(m) for m in as_list(source.get("messages"))]
    for other in others:
        other_source = _mapping(other.frontmatter.get("source"))
        messages += [str(m) for m in as_list(other_source.get("messages")) if str(m) not in messages]
    source["messages"] = list(dict.fromkeys(messages))
    own = PurePosixPath(canon.path).stem
    dropped = {PurePosixPath(o.path).stem for o in others}
    related = [r for o in [canon, *others] for r in as_list(o.frontmatter.get("related"))
               if link_stem(r) not in dropped | {own}]
    tags = sorted({str(t) for o in [canon, *others] for t in as_list(o.frontmatter.get("tags"))})
    changes: dict[str, Any] = {"source": source}
    if related:
        changes["related"] = _union([], related)
    if tags:
        changes["tags"] = tags
    return changes


# --------------------------------------------------------------------------- undo


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
    started = datetime.now(timezone.utc)
    report = UndoReport(undone=run_id)
    record = load_journal(vault, run_id)
    journal = _Journal(vault, "undo", run_id, undoes=run_id)
    for entry in reversed(record["files"]):
        why = _restore(vault, journal, entry)
        if why:
            report.skipped.append(f"{entry['path_after']}: {why}")
        else:
            report.restored += 1
    path = journal.finish([{"action": "undo", "run_id": run_id}], report.skipped)
    report.run_id = journal.run_id if path else ""
    report.journal = str(path or "")
    report.seconds = (datetime.now(timezone.utc) - started).total_seconds()
    return report


def _restore(vault: Vault, journal: _Journal, entry: dict[str, Any]) -> str:
    """Move one file back and restore its bytes; '' on success, else why it was left alone."""
    root = Path(vault.root)
    old_path = entry["path_before"]
    found = _as_the_run_left_it(root, entry)
    if found is None:
        original_now = _read(root / old_path)
        if original_now is not None and _sha(original_now) == entry["sha256_before"]:
            return "already as it was before the run"
        gone = _read(root / entry["path_after"]) is None
        why = "gone since the run" if gone else "changed after the run; left as it is"
        return f"{why} (its bytes before the run: {journal_dir(vault) / entry['copy']})"
    now_path, current = found
    if now_path != old_path and (root / old_path).exists():
        return f"{old_path} is taken by another file; left where it is"
    original = (journal_dir(vault) / entry["copy"]).read_bytes()
    journal.before(entry["id"], now_path, current)
    journal.expect(entry["id"], [(old_path, _sha(current)), (old_path, _sha(original))])
    path = now_path
    if now_path != old_path:
        path = vault.move(now_path, str(PurePosixPath(old_path).parent))
    _put_bytes(vault, path, original, _sha(current))
    journal.after(entry["id"], path)
    return ""


def _as_the_run_left_it(root: Path, entry: dict[str, Any]) -> tuple[str, bytes] | None:
    """(path, bytes) of the file as the run left it: as recorded, as a crash mid-change left it
    (the entry's pending states), or moved back by an undo that crashed before restoring bytes."""
    states = [(entry["path_after"], entry["sha256_after"]), *map(tuple, entry.get("pending", ())),
              (entry["path_before"], entry["sha256_after"])]
    for relpath, sha in states:
        data = _read(root / relpath)
        if data is not None and _sha(data) == sha:
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
        vault.state.record(relpath, record.note_id, _sha(data), stat.st_size, stat.st_mtime_ns)
