"""A renamed note is reported as moved, with or without an id of its own (issue 42)."""

from __future__ import annotations

import os
from datetime import datetime

from tests.support.fakes import HashEmbedder
from vault_pipeline import pipeline
from vault_pipeline.serve.watch import WatchEvent


def test_a_renamed_note_without_an_id_is_moved_not_added_and_removed(make_vault, write_file):
    vault = make_vault()
    write_file(vault, "inbox/thought.md", "A note typed in Obsidian, with no properties at all.\n")
    embedder = HashEmbedder(dim=64)
    pipeline.index(vault, embedder)
    os.rename(vault.root / "inbox/thought.md", vault.root / "inbox/renamed-thought.md")
    embedder.calls.clear()
    report = pipeline.index(vault, embedder)
    assert (report.added, report.removed, report.moved) == (0, 0, 1)
    assert embedder.calls == []  # the text did not change: its vector moved with it


def test_a_renamed_note_with_an_id_is_moved(make_vault):
    vault = make_vault(notes={"inbox/a.md": ("a-0001", "Raked gravel stands for water.")})
    pipeline.index(vault, HashEmbedder(dim=64))
    os.rename(vault.root / "inbox/a.md", vault.root / "inbox/b.md")
    report = pipeline.index(vault, HashEmbedder(dim=64))
    assert (report.added, report.removed, report.moved) == (0, 0, 1)


def test_a_watch_event_says_when_it_happened():
    event = WatchEvent("synced", 1).to_dict()
    assert datetime.fromisoformat(event["time"]).tzinfo is not None
