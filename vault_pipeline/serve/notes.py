"""The note tools of a memory server, as library calls on one vault: read what changed, list notes by
tag, folder or person, a note's neighbourhood, and the journaled changes (``edit.py``).

Every answer is bounded: a listing holds at most ``MAX_LIMIT`` notes and ``MAX_RESULT_BYTES`` of
JSON (``bounded``: the tail is left off and counted, never cut mid-entry). Writes hold the vault
lock and re-sync the index after, as ``remember`` does. Decision 0141.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from vault_pipeline.errors import VaultError
from vault_pipeline.serve import edit
from vault_pipeline.serve.catalogue import (
    Catalogue,
    Entry,
    by_stem,
    check_folder,
    matches_tag,
    modified_iso,
    parse_since,
    person_notes,
)
from vault_pipeline.vault.files import Vault

LIST_LIMIT, MAX_LIMIT = 20, 100
MAX_RESULT_BYTES = 64 * 1024  # a tool result's structured JSON (and its text) stays under this
MAX_FILTER_CHARS = 200


class NoteTools:
    """recent, list_notes, neighbours, edit_note, archive_note, supersede and undo on the vault at ``root``."""

    def __init__(self, root: Path, *, embedder=None, lock_wait: float = 30.0):
        self.root, self.embedder, self.lock_wait = root, embedder, lock_wait
        self.catalogue = Catalogue(root)

    def entry(self, path: str | None = None, note_id: str | None = None) -> Entry:
        """The note named by vault-relative ``path`` or frontmatter ``id``."""
        return self.catalogue.resolve(_short(path, "path", 1024), _short(note_id, "id"))

    # ----------------------------------------------------------------------- reading

    def recent(self, since: str = "7d", limit: int = LIST_LIMIT, folder: str | None = None) -> dict[str, Any]:
        """Notes changed (file modified) since ``since``, newest first."""
        _check_limit(limit)
        after = parse_since(_short(since, "since") or "7d").timestamp()
        entries = [e for e in self.catalogue.entries() if e.modified >= after]
        if folder:
            name = check_folder(folder)
            entries = [e for e in entries if e.path.startswith(f"{name}/")]
        entries.sort(key=lambda e: (-e.modified, e.path))
        notes = bounded([e.summary() for e in entries[:limit]])
        return {"since": modified_iso(after), "total": len(entries), **notes}

    def list_notes(
        self,
        *,
        tag: str | None = None,
        folder: str | None = None,
        person: str | None = None,
        type: str | None = None,
        limit: int = LIST_LIMIT,
        offset: int = 0,
    ) -> dict[str, Any]:
        """Notes with ``tag`` (or one nested under it), in ``folder``, of ``person`` and/or of ``type``, by path."""
        _check_limit(limit)
        if offset < 0:
            raise VaultError(f"offset {offset}: give 0 or more")
        entries = self.catalogue.entries()
        person, tag, type = _short(person, "person").strip(), _short(tag, "tag").strip(), _short(type, "type").strip()
        if person:
            entries = person_notes(entries, person)
        if tag:
            entries = [e for e in entries if matches_tag(e, tag)]
        if folder:
            name = check_folder(folder)
            entries = [e for e in entries if e.path.startswith(f"{name}/")]
        if type:
            entries = [e for e in entries if e.type == type]
        entries.sort(key=lambda e: e.path)
        page = bounded([e.summary() for e in entries[offset : offset + limit]])
        end = offset + len(page["notes"])
        return {"total": len(entries), "offset": offset, "next_offset": end if end < len(entries) else None, **page}

    def neighbours(
        self, path: str | None = None, note_id: str | None = None, limit: int = LIST_LIMIT
    ) -> dict[str, Any]:
        """What a note links, what links it, and its session with the session's other notes."""
        _check_limit(limit)
        entries = self.catalogue.entries()
        note = self.catalogue.resolve(_short(path, "path", 1024), _short(note_id, "id"))
        stems = by_stem(entries)
        linked = [stems[s] for s in note.links if s in stems and stems[s].path != note.path]
        missing = [s for s in note.links if s not in stems]
        backlinks = sorted((e for e in entries if note.stem in e.links and e.path != note.path), key=lambda e: e.path)
        session, siblings = _session_of(note, entries, stems)
        parts = {
            "links": _some(linked, limit),
            "backlinks": _some(backlinks, limit),
            "same_session": _some(siblings, limit),
        }
        result = {
            "note": note.summary(),
            "session": session.summary() if session is not None and session is not note else None,
            "unresolved_links": missing[:limit],
            **parts,
        }
        return _fit_parts(result, list(parts))

    # ----------------------------------------------------------------------- writing

    def edit_note(self, path: str | None = None, note_id: str | None = None, **change: Any) -> dict[str, Any]:
        """``edit.edit_note`` on the note named by path or id; journaled, under the lock."""
        with self._writing("edit") as vault:
            return edit.edit_note(vault, self.entry(path, note_id), **change).to_dict()

    def archive_note(
        self, path: str | None = None, note_id: str | None = None, reason: str = "", version: str | None = None
    ) -> dict[str, Any]:
        """``edit.archive_note``: moved to archive/, journaled, undoable; never deleted."""
        with self._writing("archive") as vault:
            return edit.archive_note(vault, self.entry(path, note_id), reason, version).to_dict()

    def supersede(
        self,
        older_path: str | None = None,
        older_id: str | None = None,
        newer_path: str | None = None,
        newer_id: str | None = None,
        reason: str = "",
    ) -> dict[str, Any]:
        """``edit.supersede``: the newer note replaces the older, which is archived."""
        with self._writing("supersede") as vault:
            older, newer = edit.supersede(
                vault, self.entry(older_path, older_id), self.entry(newer_path, newer_id), _short(reason, "reason", 300)
            )
            return {"older": older.to_dict(), "newer": newer.to_dict(), "run_id": older.run_id}

    def undo(self, run_id: str) -> dict[str, Any]:
        """Undo a run of these tools (``edit.undo_run``)."""
        with self._writing("undo") as vault:
            return edit.undo_run(vault, _short(run_id, "run_id"))

    @contextmanager
    def _writing(self, command: str) -> Iterator[Vault]:
        vault = Vault(self.root)
        try:
            with vault.lock(command, wait=self.lock_wait):
                yield vault
                if self.embedder is not None:
                    from vault_pipeline.index.sync import sync

                    sync(vault, self.embedder)
        finally:
            vault.close()


def _session_of(note: Entry, entries: list[Entry], stems: dict[str, Entry]) -> tuple[Entry | None, list[Entry]]:
    """A note's session (itself, for a session note) and the session's other notes, by path."""
    session = stems.get(note.session) if note.session else None
    if session is None and note.type == "session":
        session = note
    if session is None:
        return None, []
    return session, sorted(
        (e for e in entries if e.session == session.stem and e.path != note.path), key=lambda e: e.path
    )


def bounded(items: list[dict[str, Any]], key: str = "notes", limit: int = MAX_RESULT_BYTES) -> dict[str, Any]:
    """``{key: items}`` with as many whole items as fit ``limit`` bytes of JSON; ``left_off`` counts the rest."""
    size, kept = 2, []
    for item in items:
        size += len(json.dumps(item, ensure_ascii=False).encode("utf-8")) + 1
        if size > limit:
            break
        kept.append(item)
    out: dict[str, Any] = {key: kept}
    if len(kept) < len(items):
        out["left_off"] = len(items) - len(kept)
    return out


def _fit_parts(result: dict[str, Any], parts: list[str]) -> dict[str, Any]:
    """Halve the longest list until the whole result fits ``MAX_RESULT_BYTES``."""
    while len(json.dumps(result, ensure_ascii=False).encode("utf-8")) > MAX_RESULT_BYTES:
        name = max(parts, key=lambda p: len(result[p]["notes"]))
        notes = result[name]["notes"]
        if not notes:
            break
        result[name] = {**result[name], "notes": notes[: len(notes) // 2]}
    return result


def _some(entries: list[Entry], limit: int) -> dict[str, Any]:
    return {"total": len(entries), "notes": [e.summary() for e in entries[:limit]]}


def _check_limit(limit: int) -> None:
    if not 1 <= limit <= MAX_LIMIT:
        raise VaultError(f"limit {limit}: give 1 to {MAX_LIMIT}")


def _short(value: str | None, name: str, most: int = MAX_FILTER_CHARS) -> str:
    """``value`` ("" for None) unless it is longer than any such argument can sensibly be (refused in one line)."""
    if value is not None and len(value) > most:
        raise VaultError(f"{name}: {len(value):,} characters; at most {most:,}")
    return value or ""
