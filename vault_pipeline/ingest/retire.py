"""Re-ingest with a changed extractor: notes it no longer writes leave the inbox, never the vault.

Thread maps too: a map of ours whose sessions the current rule no longer chains is archived the
same way (``retire_map``), with ``superseded_by`` naming the map that now holds its line.

When a conversation is ingested again, an atomic note of it in ``inbox/`` that this run did not
write (the extractor or the selector no longer makes it) is archived: moved to ``archive/`` with
``status: archived`` and an ``archived_by`` line that says why and how to undo it. Only notes
exactly as vault_pipeline wrote them are touched: a note the user edited, kept (``status:
kept``) or moved elsewhere stays where it is. Every move is journaled like a sweep's, so
``vault clean --undo <run>`` puts the notes back byte for byte.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from vault_pipeline.errors import VaultError
from vault_pipeline.vault.files import Vault
from vault_pipeline.vault.journal import Journal

INBOX, ARCHIVE = "inbox", "archive"


@dataclass
class Retirement:
    """The inbox's atomic notes by conversation (read once), and the journal of what this run moved."""

    vault: Vault
    _by_conversation: dict[tuple[str, str], list[tuple[str, str]]] | None = None
    journal: Journal | None = None
    moved: list[str] = field(default_factory=list)

    def retire(self, kind: str, conversation: str, written: Iterable[str]) -> list[str]:
        """Archive the conversation's inbox notes (ours, untouched, provisional) not among ``written`` ids."""
        keep = set(written)
        done = []
        for relpath, note_id in self._notes().get((kind, conversation), []):
            if note_id not in keep and (path := self._retire_one(relpath, note_id)):
                done.append(path)
        self.moved += done
        return done

    def retire_map(self, relpath: str, note_id: str, successor: str = "") -> list[str]:
        """Archive a thread map whose sessions no longer form one line (``write_threads``), if it is
        still exactly as vault_pipeline wrote it; ``successor``: the stem of the map that now holds
        its sessions, as ``superseded_by``. Returns its new path, or nothing."""
        try:
            data = self.vault.path(relpath).read_bytes()
        except (VaultError, OSError):
            return []
        moved = f"{ARCHIVE}/{relpath.rsplit('/', 1)[-1]}"
        if not self.vault.ours(relpath, data) or (self.vault.root / moved).exists():
            return []
        journal = self.journal = self.journal or Journal(self.vault, "ingest", relpath)
        why = "its sessions no longer continue each other" if not successor else "its line is mapped anew"
        changes: dict[str, str] = {
            "status": "archived",
            "archived_by": f"ingest {journal.stamp} — {why} (undo: vault clean --undo {journal.run_id})",
        }
        if successor:
            changes["superseded_by"] = f"[[{successor}]]"
        try:
            done = [journal.edit(note_id, relpath, data, changes, note_id=note_id, folder=ARCHIVE)]
        except VaultError:
            return []
        self.moved += done
        return done

    def finish(self) -> str:
        """The journal's run id ("" when nothing moved)."""
        if self.journal is None or self.journal.finish([], []) is None:
            return ""
        return self.journal.run_id

    def _notes(self) -> dict[tuple[str, str], list[tuple[str, str]]]:
        if self._by_conversation is None:
            found: dict[tuple[str, str], list[tuple[str, str]]] = defaultdict(list)
            for relpath in self.vault.iter_note_paths():
                if not relpath.startswith(INBOX + "/"):
                    continue
                try:
                    fm, _, _ = self.vault.read(relpath)
                except VaultError:
                    continue  # unreadable: not ours to move
                if fm.get("type") == "atomic" and fm.get("source_conversation"):
                    key = (str(fm.get("source_kind", "")), str(fm["source_conversation"]))
                    found[key].append((relpath, str(fm.get("id", ""))))
            self._by_conversation = found
        return self._by_conversation

    def _retire_one(self, relpath: str, note_id: str) -> str | None:
        """Archive one note if it is still exactly ours and provisional; its new path, else None."""
        try:
            fm, _, _ = self.vault.read(relpath)
            data = self.vault.path(relpath).read_bytes()
        except (VaultError, OSError):
            return None
        if str(fm.get("status", "")).strip().lower() != "provisional" or not self.vault.ours(relpath, data):
            return None
        moved = f"{ARCHIVE}/{relpath.rsplit('/', 1)[-1]}"
        if (self.vault.root / moved).exists():
            return None  # a file of that name is in archive/ already: leave this one where it is
        journal = self.journal = self.journal or Journal(self.vault, "ingest", relpath)
        changes = {
            "status": "archived",
            "archived_by": f"ingest {journal.stamp} — no longer written by the extractor "
            f"(undo: vault clean --undo {journal.run_id})",
        }
        try:
            return journal.edit(note_id, relpath, data, changes, note_id=note_id, folder=ARCHIVE)
        except VaultError:
            return None  # changed by the user meanwhile, or the move refused: it stays where it is
