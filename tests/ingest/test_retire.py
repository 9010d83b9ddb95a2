"""Re-ingest with a changed extractor: notes it no longer writes are archived, undoably; the user's stay."""

from __future__ import annotations

from pathlib import Path

from tests.support.fakes import EVERY_CANDIDATE
from tests.support.paths import REPO
from vault_pipeline import pipeline
from vault_pipeline.clean.undo import undo
from vault_pipeline.ingest.select import Selector
from vault_pipeline.models.offline import OfflineBackend
from vault_pipeline.vault.files import Vault

EXPORT = REPO / "vault_example" / "exports" / "chatgpt"
NOTHING = Selector({}, 0.0, write=0.99, keep=0.99)  # writes no candidate: every note of before is stale


def snapshot(root: Path, summaries: bool = True) -> dict[str, bytes]:
    """The vault's notes (the journal's copies under .vault_pipeline/ are not notes); without
    ``summaries``, session notes without their summary section."""
    notes = (p for p in sorted(root.rglob("*.md")) if ".vault_pipeline" not in p.parts)
    return {p.relative_to(root).as_posix(): _unsummarised(p.read_bytes(), summaries) for p in notes}


def _unsummarised(text: bytes, summaries: bool) -> bytes:
    if summaries or b"\n## Summary\n" not in text:
        return text
    head, rest = text.split(b"\n## Summary\n", 1)
    return head + b"\n## Transcript\n" + rest.split(b"\n## Transcript\n", 1)[1]


def test_untouched_notes_no_longer_written_are_archived_and_the_users_stay(tmp_path: Path):
    vault = Vault.init(tmp_path / "v")
    first = pipeline.ingest(vault, [EXPORT], OfflineBackend(), selector=EVERY_CANDIDATE)
    inbox = sorted((vault.root / "inbox").glob("*.md"))
    assert first.notes > 10 and first.archived == [] and len(inbox) > 10
    edited, flipped = inbox[0], inbox[1]
    edited.write_text(edited.read_text(encoding="utf-8") + "\nMy own thought.\n", encoding="utf-8")
    flipped.write_text(
        flipped.read_text(encoding="utf-8").replace("status: provisional", "status: kept"), encoding="utf-8"
    )
    before = snapshot(vault.root)

    again = pipeline.ingest(Vault.open(vault.root), [EXPORT], OfflineBackend(), selector=NOTHING)
    assert again.notes == 0 and again.archive_run
    assert sorted(again.archived) == sorted(f"archive/{p.name}" for p in inbox[2:])
    assert edited.exists() and flipped.exists()  # the user's: edited, or kept in Obsidian
    for path in again.archived:
        text = (vault.root / path).read_text(encoding="utf-8")
        assert "status: archived" in text and f"vault clean --undo {again.archive_run}" in text
    # The third run finds nothing more to archive and writes nothing.
    third = pipeline.ingest(Vault.open(vault.root), [EXPORT], OfflineBackend(), selector=NOTHING)
    assert third.archived == [] and third.files_written == 0

    report = undo(Vault.open(vault.root), again.archive_run)
    assert report.restored == len(again.archived)
    # A session's summary names the notes written from it (ingest/summary.py): the run that wrote
    # none rewrote the summaries, which is no archiving for the undo to take back.
    assert snapshot(vault.root, summaries=False) == {k: _unsummarised(v, False) for k, v in before.items()}


def test_a_first_ingest_archives_nothing(tmp_path: Path):
    vault = Vault.init(tmp_path / "v")
    report = pipeline.ingest(vault, [EXPORT], OfflineBackend())
    assert report.archived == [] and report.archive_run == ""
    assert report.to_dict()["archived"] == [] and report.to_dict()["archive_run"] == ""


def test_a_note_the_user_edits_while_it_is_retired_keeps_the_users_bytes_through_undo(tmp_path: Path, monkeypatch):
    vault = Vault.init(tmp_path / "v")
    pipeline.ingest(vault, [EXPORT], OfflineBackend(), selector=EVERY_CANDIDATE)
    racing = sorted((vault.root / "inbox").glob("*.md"))[0]
    mine = racing.read_text(encoding="utf-8") + "\nWritten while the ingest ran.\n"
    original = Vault.update_frontmatter

    def user_saves_first(self, relpath, changes, **kwargs):
        if relpath == f"inbox/{racing.name}":
            racing.write_text(mine, encoding="utf-8")  # the user's save lands between the read and the edit
        return original(self, relpath, changes, **kwargs)

    monkeypatch.setattr(Vault, "update_frontmatter", user_saves_first)
    again = pipeline.ingest(Vault.open(vault.root), [EXPORT], OfflineBackend(), selector=NOTHING)
    monkeypatch.undo()
    assert f"archive/{racing.name}" not in again.archived and racing.read_text(encoding="utf-8") == mine
    undo(Vault.open(vault.root), again.archive_run)
    assert racing.read_text(encoding="utf-8") == mine  # undo restores only what the run changed
