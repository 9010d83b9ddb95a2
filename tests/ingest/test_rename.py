"""Notes are found by their ``id``, not their file name: a renamed or moved note keeps receiving updates."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from tests.support.fakes import EVERY_CANDIDATE
from vault_pipeline import pipeline
from vault_pipeline.index.check import check
from vault_pipeline.models.offline import OfflineBackend
from vault_pipeline.vault.files import Vault
from vault_pipeline.vault.frontmatter import split_frontmatter

FIRST = [
    ("user", "We decided to ground the AI laws in the Asimov tradition."),
    ("assistant", "The Asimov laws put human safety first."),
]
LATER = [*FIRST, ("user", "We decided to add a transparency law for every deployed model.")]


def chatgpt_export(path: Path, turns: list[tuple[str, str]]) -> Path:
    """A one-conversation ChatGPT export holding ``turns`` on its main branch."""
    mapping: dict = {"root": {"id": "root", "parent": None, "children": ["m0"], "message": None}}
    parent = "root"
    for i, (role, text) in enumerate(turns):
        mapping[f"m{i}"] = {
            "id": f"m{i}",
            "parent": parent,
            "children": [f"m{i + 1}"] if i + 1 < len(turns) else [],
            "message": {
                "id": f"m{i}",
                "author": {"role": role},
                "create_time": 1_700_000_000 + i,
                "content": {"content_type": "text", "parts": [text]},
                "recipient": "all",
            },
        }
        parent = f"m{i}"
    record = {
        "title": "AI laws",
        "id": "conv-ai-laws",
        "create_time": 1_700_000_000,
        "update_time": 1_700_000_000 + len(turns),
        "mapping": mapping,
        "current_node": parent,
    }
    path.write_text(json.dumps([record]), encoding="utf-8")
    return path


def ingested(tmp_path: Path) -> tuple[Vault, Path]:
    vault = Vault.init(tmp_path / "v")
    pipeline.ingest(vault, [chatgpt_export(tmp_path / "first.json", FIRST)], OfflineBackend(), selector=EVERY_CANDIDATE)
    (session,) = (vault.root / "sessions").glob("*.md")
    return vault, session


def atomic_bodies(vault: Vault) -> dict[str, str]:
    return {p.name: p.read_text(encoding="utf-8") for p in sorted((vault.root / "inbox").glob("*.md"))}


def test_a_renamed_session_note_receives_the_new_message_and_new_links_use_its_name(tmp_path):
    vault, session = ingested(tmp_path)
    old_stem = session.stem
    before = set(atomic_bodies(vault))
    renamed = session.with_name("AI Laws for Ethics.md")
    os.rename(session, renamed)  # a rename in Obsidian (or a file manager): the bytes stay as they were

    fresh = Vault.open(vault.root)  # a new run: nothing cached from the first
    report = pipeline.ingest(
        fresh, [chatgpt_export(tmp_path / "later.json", LATER)], OfflineBackend(), selector=EVERY_CANDIDATE
    )

    assert not report.refused and not report.skipped
    assert not session.exists(), "the old file name must not come back"
    assert sorted(p.name for p in (vault.root / "sessions").glob("*.md")) == ["AI Laws for Ethics.md"]
    text = renamed.read_text(encoding="utf-8")
    assert "transparency law for every deployed model" in text  # the new message reached the renamed note
    new = {name: body for name, body in atomic_bodies(vault).items() if name not in before}
    assert any("transparency" in body for body in new.values())
    for body in atomic_bodies(vault).values():  # new notes, and old ones rewritten, link to the current name
        assert "[[AI Laws for Ethics" in body and old_stem not in body
    assert check(fresh).dangling_links == [] and check(fresh).dangling_blocks == []


def test_obsidian_link_updates_do_not_turn_notes_into_user_edits(tmp_path):
    """Obsidian rewrites the links pointing at a renamed note; those notes still count as unchanged."""
    vault, session = ingested(tmp_path)
    old = session.stem
    os.rename(session, session.with_name("AI Laws for Ethics.md"))
    for path in (vault.root / "inbox").glob("*.md"):
        path.write_text(path.read_text(encoding="utf-8").replace(old, "AI Laws for Ethics"), encoding="utf-8")
    report = pipeline.ingest(
        Vault.open(vault.root),
        [chatgpt_export(tmp_path / "first.json", FIRST)],
        OfflineBackend(),
        selector=EVERY_CANDIDATE,
    )
    assert report.files_written == 0 and not report.refused, report.writes


def test_a_note_moved_to_another_folder_is_updated_where_it_is(tmp_path):
    vault, session = ingested(tmp_path)
    (vault.root / "Projects" / "Ethics").mkdir(parents=True)
    moved = vault.root / "Projects" / "Ethics" / "laws.md"
    os.rename(session, moved)
    report = pipeline.ingest(
        Vault.open(vault.root),
        [chatgpt_export(tmp_path / "later.json", LATER)],
        OfflineBackend(),
        selector=EVERY_CANDIDATE,
    )
    assert report.writes["updated"] >= 1 and not report.refused
    assert not list((vault.root / "sessions").glob("*.md"))
    frontmatter, body = split_frontmatter(moved.read_text(encoding="utf-8"))
    assert "transparency law" in body and frontmatter["type"] == "session"
    links = {m for body in atomic_bodies(vault).values() for m in re.findall(r"\[\[([^#\]|]+)", body)}
    assert links == {"laws"}


def test_a_renamed_note_the_user_edited_is_left_alone(tmp_path):
    vault, session = ingested(tmp_path)
    renamed = session.with_name("AI Laws for Ethics.md")
    os.rename(session, renamed)
    mine = renamed.read_text(encoding="utf-8") + "\nMy own annotation.\n"
    renamed.write_text(mine, encoding="utf-8")
    report = pipeline.ingest(
        Vault.open(vault.root),
        [chatgpt_export(tmp_path / "later.json", LATER)],
        OfflineBackend(),
        selector=EVERY_CANDIDATE,
    )
    assert renamed.read_text(encoding="utf-8") == mine
    assert [line.split(":")[0] for line in report.refused] == ["sessions/AI Laws for Ethics.md"]
    assert not session.exists()


def test_a_note_clean_archived_is_followed_but_not_rewritten(tmp_path):
    """Following moves must not undo clean: its keys (``archived_by`` too) stay, nothing is rewritten."""
    vault, _ = ingested(tmp_path)
    note = next(p for p in (vault.root / "inbox").glob("*.md") if "asimov-laws-put" in p.name)
    relpath = note.relative_to(vault.root).as_posix()
    why = "clean 2026-11-23T10:00 — duplicate of [[x]] (undo: vault clean --undo r1 --action 1)"
    vault.update_frontmatter(relpath, {"status": "archived", "duplicate_of": "[[x]]", "archived_by": why})
    archived = vault.root / vault.move(relpath, "archive")
    before = archived.read_bytes()
    report = pipeline.ingest(
        Vault.open(vault.root),
        [chatgpt_export(tmp_path / "first.json", FIRST)],
        OfflineBackend(),
        selector=EVERY_CANDIDATE,
    )
    assert report.files_written == 0 and archived.read_bytes() == before and not note.exists()


def test_the_id_map_rereads_only_notes_whose_size_or_mtime_changed(tmp_path, monkeypatch):
    import vault_pipeline.vault.files as files

    vault, session = ingested(tmp_path)
    notes = len(vault.iter_note_paths())
    reads: list[Path] = []
    real = files.read_note_id
    monkeypatch.setattr(files, "read_note_id", lambda path: reads.append(path) or real(path))

    def scan() -> int:
        reads.clear()
        assert Vault.open(vault.root).locate("a-nothing-has-this-id") is None
        return len(reads)

    assert scan() == notes  # the first scan reads every note's head
    assert scan() == 0  # nothing changed: every id comes from the state
    os.rename(session, session.with_name("AI Laws for Ethics.md"))
    assert scan() == 1 and Vault.open(vault.root).locate(session_id(session)) == "sessions/AI Laws for Ethics.md"


def session_id(path: Path) -> str:
    text = path.with_name("AI Laws for Ethics.md").read_text(encoding="utf-8")
    return str(split_frontmatter(text)[0]["id"])
