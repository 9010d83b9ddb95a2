"""The write side of the cleaning sweep: perform a plan's actions, journaling every file.

Every change goes through the vault (named frontmatter keys only, the rest of the file's bytes
kept; moves never overwrite) under the vault lock, and every touched file is journaled first,
per action (``journal.py``), so a run, even a crashed one, or one action of it can be undone
(``undo.py``). An archived note says why in its own frontmatter: ``archived_by: clean
<run time> — duplicate of [[...]]`` (or ``superseded by``), with the undo command for it. A note edited since
the plan was made is skipped, never overwritten.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath
from typing import Any, assert_never

from vault_pipeline.clean.notes import ARCHIVE, as_list
from vault_pipeline.clean.types import Action, Collapse, Plan, Relate, Supersede, action_json, action_kind, action_refs
from vault_pipeline.errors import DirtyFileError, StorageError, VaultError
from vault_pipeline.text import link_target
from vault_pipeline.vault.files import Vault
from vault_pipeline.vault.frontmatter import source_messages, source_properties
from vault_pipeline.vault.journal import Journal
from vault_pipeline.vault.state import sha256_bytes


@dataclass
class CleanReport:
    """What an applied sweep did: actions per kind, what it skipped and why, and its run id."""

    run_id: str = ""
    counts: Counter = field(default_factory=Counter)
    skipped: list[str] = field(default_factory=list)
    files: int = 0
    journal: str = ""
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        """The report as ``vault clean --json`` prints it (the CLI adds ``exit_code``)."""
        return {"run_id": self.run_id, "counts": dict(self.counts), "skipped": self.skipped, "files": self.files}


def apply(vault: Vault, plan: Plan, *, wait: float = 0) -> CleanReport:
    """Perform ``plan`` under the vault lock; notes edited since planning are skipped, never overwritten."""
    with vault.lock("clean", wait=wait):
        return apply_held(vault, plan)


def apply_held(vault: Vault, plan: Plan) -> CleanReport:
    """``apply`` for a caller that already holds the vault lock."""
    started = datetime.now(UTC)
    report = CleanReport()
    journal = Journal(vault, "clean", json.dumps(plan.to_json(), sort_keys=True))
    done = []
    for n, action in enumerate(plan.actions, 1):
        why = _apply_action(vault, journal, action, n)
        kind = action_kind(action)
        if why:
            report.skipped.append(f"{kind} {' / '.join(ref.id for ref in action_refs(action))}: {why}")
        else:
            report.counts[kind] += 1
            done.append({"n": n, **action_json(action)})
    path = journal.finish(done, report.skipped)
    report.run_id = journal.run_id if path else ""
    report.journal = str(path or "")
    report.files = journal.files
    report.seconds = (datetime.now(UTC) - started).total_seconds()
    return report


@dataclass
class _Live:
    """One note as it is on disk right now, checked against what the plan (or this run) saw."""

    path: str
    sha: str
    frontmatter: dict[str, Any]
    data: bytes


def _apply_action(vault: Vault, journal: Journal, action: Action, n: int) -> str:
    """Apply action number ``n``; '' on success, else why it was skipped (no file of it is touched)."""
    live: dict[str, _Live] = {}
    for ref in action_refs(action):
        note_id = ref.id
        entry = journal.latest(note_id)  # touched earlier in this run: expect our own write
        path = entry["path_after"] if entry else ref.path
        expected = entry["sha256_after"] if entry else ref.sha256
        try:
            data = (Path(vault.root) / path).read_bytes()
            frontmatter, _, _ = vault.read(path)
        except (OSError, VaultError):
            return f"{path} is gone or unreadable since the plan was made"
        if sha256_bytes(data) != expected:
            return f"{path} was edited since the plan was made; left untouched"
        live[note_id] = _Live(path, expected, dict(frontmatter), data)
    touched = len(journal.entries)
    try:
        _perform(vault, _Step(journal, n), action, live)
    except StorageError as exc:
        if exc.stops:
            raise  # a full or read-only disk: every later action would fail too
        return f"{exc} (the action was skipped; the journal records any file it changed)"
    except DirtyFileError as exc:  # edited between our check and the write, or archive/ has that name
        partly = (
            " (the action was partly applied; the journal records what changed)"
            if len(journal.entries) > touched
            else ""
        )
        return f"{exc}{partly}"
    return ""


@dataclass(frozen=True)
class _Step:
    """The run's journal and the number of the action being applied (its entries carry it)."""

    journal: Journal
    n: int

    def archived_by(self, why: str) -> str:
        """The ``archived_by`` line an archived note shows in Obsidian: run, reason, how to undo."""
        return f"clean {self.journal.stamp} — {why} (undo: vault clean --undo {self.journal.run_id} --action {self.n})"


def _perform(vault: Vault, step: _Step, action: Action, live: dict[str, _Live]) -> None:
    match action:
        case Collapse(canonical=canon, duplicates=duplicates):
            kept = live[canon.id]
            _edit(vault, step, canon.id, kept, _absorb(kept, [live[d.id] for d in duplicates]))
            for dup in duplicates:
                link = _wikilink(kept.path)
                changes = {
                    "duplicate_of": link,
                    "status": "archived",
                    "archived_by": step.archived_by(f"duplicate of {link}"),
                }
                _edit(vault, step, dup.id, live[dup.id], changes, ARCHIVE)
        case Supersede(newer=newer, older=older):
            new, old = live[newer.id], live[older.id]
            supersedes = _union(new.frontmatter.get("supersedes"), [_wikilink(old.path)])
            _edit(vault, step, newer.id, new, {"supersedes": supersedes})
            link = _wikilink(new.path)
            changes = {
                "superseded_by": link,
                "status": "archived",
                "archived_by": step.archived_by(f"superseded by {link}"),
            }
            _edit(vault, step, older.id, old, changes, ARCHIVE)
        case Relate(a=a, b=b):
            one, two = live[a.id], live[b.id]
            _edit(vault, step, a.id, one, {"related": _union(one.frontmatter.get("related"), [_wikilink(two.path)])})
            _edit(vault, step, b.id, two, {"related": _union(two.frontmatter.get("related"), [_wikilink(one.path)])})
        case _:
            assert_never(action)


def _edit(vault: Vault, step: _Step, note_id: str, note: _Live, changes: dict[str, Any], folder: str = "") -> None:
    """Change named frontmatter keys (and move), journaling the bytes first (one entry per action and note)."""
    step.journal.edit(
        f"{step.n}:{note_id}", note.path, note.data, changes, note_id=note_id, action=step.n, folder=folder
    )


def _wikilink(relpath: str) -> str:
    return f"[[{PurePosixPath(relpath).stem}]]"


def _union(existing: Any, new: Sequence[str]) -> list[str]:
    """Links as ``[[stem]]``, one per stem, sorted."""
    stems = {link_target(v) for v in as_list(existing)} | {link_target(v) for v in new}
    return [f"[[{s}]]" for s in sorted(s for s in stems if s)]


def _absorb(canon: _Live, others: list[_Live]) -> dict[str, Any]:
    """The canonical note's merged source messages, related links and tags."""
    changes = _merged_source(canon, others)
    own = PurePosixPath(canon.path).stem
    dropped = {PurePosixPath(o.path).stem for o in others}
    related = [
        r
        for o in [canon, *others]
        for r in as_list(o.frontmatter.get("related"))
        if link_target(r) not in dropped | {own}
    ]
    tags = sorted({str(t) for o in [canon, *others] for t in as_list(o.frontmatter.get("tags"))})
    if related:
        changes["related"] = _union([], related)
    if tags:
        changes["tags"] = tags
    return changes


def _merged_source(canon: _Live, others: list[_Live]) -> dict[str, Any]:
    """The canonical note's source keys with every note's source messages added."""
    # Flat source_* properties; a canon in the older nested ``source`` form is moved to them.
    legacy = "source" in canon.frontmatter
    source = {k: v for k, v in source_properties(canon.frontmatter).items() if v} if legacy else {}
    messages = source_messages(canon.frontmatter)
    for other in others:
        messages += [m for m in source_messages(other.frontmatter) if m not in messages]
    if messages:
        source["source_messages"] = list(dict.fromkeys(messages))
    return {**source, "source": None} if legacy else dict(source)
