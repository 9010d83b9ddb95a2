"""The live index: with the watcher running, the index follows saves, edits, renames, moves and deletes.

Every check polls with a generous timeout and asserts what the index holds, never how fast.
"""

from __future__ import annotations

import os
import shutil
import threading

import pytest

from tests.support.fakes import HashEmbedder, note_text, write_file
from vault_pipeline.errors import IndexStateError
from vault_pipeline.index.search import Index
from vault_pipeline.serve.watch import Watcher, WatchEvent, wait_until

TIMEOUT = 600.0  # seconds: a wait that ends when the line comes, generous for a loaded machine (a pass takes well under a second)


def indexed_paths(root) -> set[str]:
    """Every path with rows in the index."""
    try:
        table = Index.open(str(root)).table  # a str: every Path has a .root ("/")
    except IndexStateError:  # no index yet
        return set()
    return set(table.to_arrow().column("path").to_pylist())


def found_by_text(root, word: str) -> set[str]:
    """Paths whose rows the full-text lane finds for ``word`` (what a query retrieves)."""
    return {row.path for row in Index.open(str(root)).text_search(word, 20, with_vectors=False)}


@pytest.fixture
def watched(make_vault):
    """A small vault with a watcher running on it; yields (root, events)."""
    vault = make_vault(
        notes={
            "engrams/garden.md": ("e-garden", "Raked gravel in a dry garden stands for water.", {"tier": "engram"}),
            "engrams/stones.md": ("e-stones", "Fifteen stones are placed so one is always hidden.", {"tier": "engram"}),
        }
    )
    events: list[WatchEvent] = []
    watcher = Watcher(vault.root, HashEmbedder(dim=64), listener=events.append)
    watcher.start()
    try:
        assert watcher.ready.wait(TIMEOUT), "the first sync never finished"
        assert indexed_paths(vault.root) == {"engrams/garden.md", "engrams/stones.md"}
        yield vault.root, events
    finally:
        watcher.stop()


def test_a_saved_note_becomes_retrievable_and_an_edit_replaces_it(watched):
    root, _ = watched
    write_file(root, "inbox/new.md", note_text("n-new", "The zebrafinch sings at dawn in the orchard."))
    assert wait_until(lambda: "inbox/new.md" in found_by_text(root, "zebrafinch"), TIMEOUT)
    write_file(root, "inbox/new.md", note_text("n-new", "The quokka smiles at every visitor on the island."))
    assert wait_until(lambda: "inbox/new.md" in found_by_text(root, "quokka"), TIMEOUT)
    assert "inbox/new.md" not in found_by_text(root, "zebrafinch")  # the old text left with the edit


def test_rename_move_and_delete_leave_the_index(watched):
    root, _ = watched
    os.rename(root / "engrams/garden.md", root / "engrams/dry-garden.md")
    assert wait_until(lambda: indexed_paths(root) == {"engrams/dry-garden.md", "engrams/stones.md"}, TIMEOUT)
    (root / "essays").mkdir()
    os.rename(root / "engrams/stones.md", root / "essays/stones.md")
    assert wait_until(lambda: indexed_paths(root) == {"engrams/dry-garden.md", "essays/stones.md"}, TIMEOUT)
    # A whole folder moved: the watcher hears of the folder only, and the notes in it follow.
    shutil.move(root / "essays", root / "archive-of-essays")
    assert wait_until(lambda: indexed_paths(root) == {"engrams/dry-garden.md", "archive-of-essays/stones.md"}, TIMEOUT)
    (root / "engrams/dry-garden.md").unlink()
    assert wait_until(lambda: indexed_paths(root) == {"archive-of-essays/stones.md"}, TIMEOUT)
    shutil.rmtree(root / "archive-of-essays")
    assert wait_until(lambda: indexed_paths(root) == set(), TIMEOUT)


def test_hidden_folders_and_other_files_are_ignored(watched):
    root, events = watched
    syncs_before = sum(1 for e in events if e.kind == "synced")
    write_file(root, ".obsidian/workspace.md", note_text("x-obsidian", "Obsidian workspace settings."))
    write_file(root, ".trash/old.md", note_text("x-trash", "A note the user threw away."))
    (root / "engrams/picture.png").write_bytes(b"\x89PNG\r\n")
    write_file(root, "engrams/notes.txt", "plain text, not a note")
    # A note saved afterwards: once it is in the index, the ignored files' changes are long past.
    write_file(root, "inbox/after.md", note_text("n-after", "The heron waits in the shallow pond."))
    assert wait_until(lambda: "inbox/after.md" in indexed_paths(root), TIMEOUT)
    assert indexed_paths(root) == {"engrams/garden.md", "engrams/stones.md", "inbox/after.md"}
    synced = [e for e in events if e.kind == "synced"][syncs_before:]
    assert sum(e.changes for e in synced) == 1  # only the note counted as a change


def test_relevant_filter(tmp_path):
    from watchfiles import Change

    watcher = Watcher(tmp_path, HashEmbedder(dim=8))
    (tmp_path / "folder").mkdir()
    root = str(tmp_path.resolve())
    assert watcher.relevant(Change.modified, f"{root}/inbox/a.md")
    assert watcher.relevant(Change.added, f"{root}/folder")  # a folder moved in brings its notes
    assert watcher.relevant(Change.deleted, f"{root}/gone-folder")
    assert not watcher.relevant(Change.deleted, f"{root}/gone.png")
    assert not watcher.relevant(Change.modified, f"{root}/a.png")
    assert not watcher.relevant(Change.modified, f"{root}/.obsidian/workspace.md")
    assert not watcher.relevant(Change.modified, f"{root}/.trash/a.md")
    assert not watcher.relevant(Change.modified, f"{root}/.vault_pipeline/index/x.lance")
    assert not watcher.relevant(Change.modified, "/elsewhere/a.md")


def test_a_burst_is_batched(watched):
    root, events = watched
    syncs_before = sum(1 for e in events if e.kind == "synced")
    files = 300
    for i in range(files):
        write_file(root, f"inbox/burst-{i:03d}.md", note_text(f"b-{i}", f"Burst note number {i} about herons."))
    assert wait_until(lambda: len(indexed_paths(root)) == 2 + files, TIMEOUT)

    def added() -> int:
        return sum(e.report.added for e in [e for e in events if e.kind == "synced"][syncs_before:] if e.report)

    # The rows are readable as soon as a sync commits; its event is reported just after.
    wait_until(lambda: added() == files, TIMEOUT)
    synced = [e for e in events if e.kind == "synced"][syncs_before:]
    assert sum(e.report.added for e in synced if e.report) == files
    assert len(synced) < files / 10  # batches, not a sync per file


def test_the_watcher_waits_for_the_vault_lock(watched):
    from vault_pipeline.vault.files import Vault

    root, events = watched
    vault = Vault(root)
    release = threading.Event()
    held = threading.Event()

    def ingest_holding_the_lock():
        with vault.lock("ingest"):
            held.set()
            release.wait(TIMEOUT)

    holder = threading.Thread(target=ingest_holding_the_lock)
    holder.start()
    try:
        assert held.wait(TIMEOUT)
        write_file(root, "inbox/during.md", note_text("n-during", "The kingfisher dives into the stream."))
        assert wait_until(lambda: any(e.kind == "waiting" for e in events), TIMEOUT)
        waiting = next(e for e in events if e.kind == "waiting")
        assert "`ingest`" in waiting.message  # it names the command it waits for
        assert "inbox/during.md" not in indexed_paths(root)  # no sync while ingest holds the lock
    finally:
        release.set()
        holder.join(TIMEOUT)
        vault.close()
    assert wait_until(lambda: "inbox/during.md" in indexed_paths(root), TIMEOUT)


@pytest.mark.slow
def test_vault_watch_command_prints_a_json_line_per_sync(make_vault, tmp_path):
    import json
    import queue
    import subprocess
    import sys

    vault = make_vault(notes={"engrams/garden.md": ("e-garden", "Raked gravel stands for water.", {"tier": "engram"})})
    env = {**os.environ, "HOME": str(tmp_path / "home"), "XDG_CACHE_HOME": str(tmp_path / "home" / ".cache")}
    watcher = subprocess.Popen(
        [sys.executable, "-m", "vault_pipeline.cli", "watch", "--vault", str(vault.root), "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in watcher.stdout], daemon=True).start()
    try:
        first = json.loads(lines.get(timeout=TIMEOUT))  # the first sync
        assert (first["event"], first["added"]) == ("synced", 1)
        write_file(vault.root, "inbox/new.md", note_text("n-new", "The heron waits in the shallow pond."))
        second = json.loads(lines.get(timeout=TIMEOUT))
        assert (second["event"], second["added"], second["changes"]) == ("synced", 1, 1)
    finally:
        watcher.terminate()
        watcher.wait(30)
    assert indexed_paths(vault.root) == {"engrams/garden.md", "inbox/new.md"}
