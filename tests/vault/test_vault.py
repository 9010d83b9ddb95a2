"""vault.py: init/open, guarded atomic writes, locate, frontmatter edits, moves, the lock."""

from __future__ import annotations

import errno
import os
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
import tomllib
from pathlib import Path

import pytest

from tests.support.fakes import note_value
from tests.support.paths import REPO
from vault_pipeline.errors import ConfigError, DirtyFileError, FrontmatterError, LockError, StorageError, VaultError
from vault_pipeline.vault.files import FOLDERS, STATE_DIR, Vault
from vault_pipeline.vault.frontmatter import render_note
from vault_pipeline.vault.note import Note


def make_note(
    stem: str = "we-use-postgres-abc123",
    nid: str = "a-000000abc123",
    body: str = "We use Postgres.\n",
    folder: str = "inbox",
    **extra,
) -> Note:
    """The same note (one id, one stem) unless a test says otherwise, so rewrites hit one file."""
    return note_value(nid, body, folder=folder, stem=stem, source_conversation="c-1", **extra)


@pytest.fixture
def vault(make_vault) -> Vault:
    return make_vault()


def snapshot(root: Path) -> dict[str, tuple[bytes, int]]:
    return {
        str(p.relative_to(root)): (p.read_bytes(), p.stat().st_mtime_ns) for p in sorted(root.rglob("*")) if p.is_file()
    }


# --------------------------------------------------------------------------- init and open


def test_init_creates_folders_state_and_config(tmp_path):
    vault = Vault.init(tmp_path / "v")
    for folder in FOLDERS:
        assert (vault.root / folder).is_dir()
    assert (vault.root / STATE_DIR / "state.sqlite").is_file()
    config = tomllib.loads((vault.root / "vault.toml").read_text())
    assert config["models"] == {
        "extract": "offline",
        "gate": "offline",
        "quality": "offline",
        "embed": "minilm",
        "api_base": "",
        "output": "auto",
        "concurrency": 4,
        "timeout": 60,
    }
    assert {k: config["retrieval"][k] for k in ("wide", "budget", "window")} == {
        "wide": 15,
        "budget": 2000,
        "window": 8000,
    }
    assert "floor" not in config["retrieval"]  # unset: the embedder's calibration applies (models/embed.py)
    assert config["log"]["calls"] is True
    assert "#" in (vault.root / "vault.toml").read_text()  # commented
    db = sqlite3.connect(vault.root / STATE_DIR / "state.sqlite")
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    columns = [row[1] for row in db.execute("PRAGMA table_info(files)")]
    assert columns == ["relpath", "note_id", "sha256", "size", "mtime_ns"]


def test_init_an_existing_obsidian_vault_touches_no_user_file(tmp_path):
    root = tmp_path / "obsidian"
    (root / ".obsidian").mkdir(parents=True)
    (root / ".obsidian" / "app.json").write_text("{}")
    (root / "My note.md").write_text("# Mine\n")
    (root / "inbox").mkdir()
    (root / "inbox" / "todo.md").write_text("my own inbox\n")
    (root / "vault.toml").write_text('[models]\nextract = "ollama/llama3.1"\n')
    before = snapshot(root)
    time.sleep(0.01)
    vault = Vault.init(root)
    after = snapshot(root)
    assert {k: v for k, v in after.items() if not k.startswith(STATE_DIR)} == before
    assert Vault.open(root).root == vault.root


def test_open_requires_a_vault(tmp_path):
    with pytest.raises(ConfigError, match=str(tmp_path)):
        Vault.open(tmp_path)


# --------------------------------------------------------------------------- write outcomes


def test_write_outcomes_created_unchanged_updated(vault):
    note = make_note()
    assert vault.write(note).outcome == "created"
    path = vault.root / note.relpath
    assert path.read_text() == note.text()
    mtime = path.stat().st_mtime_ns
    assert vault.write(note).outcome == "unchanged"
    assert path.stat().st_mtime_ns == mtime
    newer = make_note(body="We use Postgres 16.\n")
    outcome = vault.write(newer)
    assert (outcome.outcome, outcome.relpath) == ("updated", note.relpath)
    assert path.read_text() == newer.text()


def test_rewriting_the_same_notes_writes_zero_files(vault):
    notes = [make_note(stem=f"note-{i}-abc12{i}", nid=f"a-00000abc12{i}") for i in range(5)]
    assert {vault.write(n).outcome for n in notes} == {"created"}
    before = snapshot(vault.root / "inbox")
    again = Vault.open(vault.root)
    assert [again.write(n).outcome for n in notes] == ["unchanged"] * 5
    assert snapshot(vault.root / "inbox") == before


def test_a_user_edit_survives_a_second_write(vault):
    note = make_note()
    vault.write(note)
    path = vault.root / note.relpath
    edited = path.read_bytes().replace(b"We use Postgres.", b"We use Postgres, says me.")
    path.write_bytes(edited)
    outcome = vault.write(make_note(body="Something new.\n"))
    assert outcome.outcome == "refused" and "edited" in outcome.reason
    assert path.read_bytes() == edited


def test_a_file_unknown_to_the_state_is_refused(vault):
    note = make_note()
    path = vault.root / note.relpath
    path.write_text("---\nid: a-000000abc123\n---\nI wrote this myself.\n")
    outcome = vault.write(note)
    assert outcome.outcome == "refused" and "unknown" in outcome.reason
    assert path.read_text().endswith("I wrote this myself.\n")


def test_moved_elsewhere_via_state_and_via_scan(vault):
    note = make_note()
    vault.write(note)
    kept = vault.move(note.relpath, "engrams")
    outcome = vault.write(note)
    assert (outcome.outcome, outcome.relpath) == ("moved-elsewhere", kept)
    assert not (vault.root / note.relpath).exists()
    # The user moves it by hand (no state update); a fresh Vault finds it by its frontmatter id.
    os.makedirs(vault.root / "Projects")
    os.rename(vault.root / kept, vault.root / "Projects" / "mine.md")
    fresh = Vault.open(vault.root)
    assert fresh.locate(note.id) == "Projects/mine.md"
    assert fresh.write(note).outcome == "moved-elsewhere"
    assert Vault.open(vault.root).state.paths_for(note.id) == ["Projects/mine.md"]


def test_locate(vault):
    note = make_note()
    assert vault.locate(note.id) is None
    vault.write(note)
    assert vault.locate(note.id) == note.relpath
    (vault.root / note.relpath).unlink()
    assert vault.locate(note.id) is None


def test_a_note_the_user_deleted_is_not_recreated(vault):
    note = make_note()
    vault.write(note)
    os.makedirs(vault.root / ".trash")
    os.rename(vault.root / note.relpath, vault.root / ".trash" / "gone.md")  # Obsidian's delete
    outcome = Vault.open(vault.root).write(note)
    assert outcome.outcome == "refused" and "deleted" in outcome.reason
    assert not (vault.root / note.relpath).exists()


def test_atomic_write_leaves_no_temp_file(vault, monkeypatch):
    note = make_note()
    vault.write(note)
    vault.write(make_note(body="v2\n"))
    assert not [p for p in vault.root.rglob("*") if ".vp-tmp-" in p.name]

    def fail(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "replace", fail)
    before = (vault.root / note.relpath).read_bytes()
    with pytest.raises(StorageError, match=f"{note.relpath}: No space left on device; free disk space"):
        vault.write(make_note(body="v3\n"))
    assert (vault.root / note.relpath).read_bytes() == before
    assert not [p for p in vault.root.rglob("*") if ".vp-tmp-" in p.name]


def test_unsafe_stems_and_symlinks_are_refused(vault, tmp_path):
    assert vault.write(make_note(stem="../../escape")).outcome == "refused"
    assert not (tmp_path / "escape.md").exists()
    outside = tmp_path / "outside"
    outside.mkdir()
    (vault.root / "web").rmdir()
    (vault.root / "web").symlink_to(outside, target_is_directory=True)
    outcome = vault.write(make_note(folder="web"))
    assert outcome.outcome == "refused" and "outside" in outcome.reason
    assert not list(outside.iterdir())
    target = tmp_path / "target.md"
    target.write_text("not yours")
    (vault.root / "inbox" / "link-abc123.md").symlink_to(target)
    assert vault.write(make_note(stem="link-abc123")).outcome == "refused"
    assert target.read_text() == "not yours"
    with pytest.raises(VaultError):
        vault.move("inbox/x.md", "../elsewhere")


# --------------------------------------------------------------------------- reading and editing


USER_FILE = textwrap.dedent("""\
    ---
    # my comment stays
    id: a-000000abc123
    status:   provisional    # odd spacing
    tags:
    - idea
    - 'quoted'
    custom: {a: 1}

    tier: chat
    ---

    Body *stays*   exactly.
    """)


def test_read_returns_frontmatter_body_and_hash(vault):
    (vault.root / "inbox" / "n.md").write_text(USER_FILE)
    frontmatter, body, digest = vault.read("inbox/n.md")
    assert frontmatter["status"] == "provisional" and frontmatter["tags"] == ["idea", "quoted"]
    assert body == "Body *stays*   exactly.\n" and len(digest) == 64
    (vault.root / "inbox" / "bad.md").write_text("---\nid: [\n---\n")
    with pytest.raises(FrontmatterError, match=r"inbox/bad\.md"):
        vault.read("inbox/bad.md")


def test_update_frontmatter_keeps_every_other_byte(vault):
    path = vault.root / "inbox" / "n.md"
    path.write_text(USER_FILE)
    vault.update_frontmatter("inbox/n.md", {"status": "kept", "kept": "2024-05-01", "tier": None})
    expected = USER_FILE.replace("status:   provisional    # odd spacing\n", "status: kept\n").replace(
        "tier: chat\n", "kept: 2024-05-01\n"
    )
    assert path.read_text() == expected
    frontmatter, _, _ = vault.read("inbox/n.md")
    assert frontmatter["status"] == "kept" and "tier" not in frontmatter and frontmatter["custom"] == {"a": 1}


def test_update_frontmatter_replaces_list_values_and_keeps_crlf(vault):
    path = vault.root / "inbox" / "n.md"
    path.write_bytes(b"---\r\nid: x\r\ntags:\r\n  - a\r\nz: 1\r\n---\r\nbody\r\n")
    vault.update_frontmatter("inbox/n.md", {"tags": ["b", "c"]})
    assert path.read_bytes() == b"---\r\nid: x\r\ntags:\r\n  - b\r\n  - c\r\nz: 1\r\n---\r\nbody\r\n"


def test_update_frontmatter_adds_a_block_to_a_plain_note(vault):
    path = vault.root / "My idea.md"
    path.write_text("# My idea\n\nText.\n")
    vault.update_frontmatter("My idea.md", {"status": "kept"})
    assert path.read_text() == "---\nstatus: kept\n---\n# My idea\n\nText.\n"


def test_update_frontmatter_refuses_a_changed_file(vault):
    path = vault.root / "inbox" / "n.md"
    path.write_text(USER_FILE)
    _, _, digest = vault.read("inbox/n.md")
    path.write_text(USER_FILE + "more\n")
    with pytest.raises(DirtyFileError):
        vault.update_frontmatter("inbox/n.md", {"status": "kept"}, expected_sha256=digest)
    assert path.read_text() == USER_FILE + "more\n"


def test_update_frontmatter_keeps_a_user_edited_file_protected(vault):
    note = make_note()
    vault.write(note)
    path = vault.root / note.relpath
    path.write_text(path.read_text() + "user line\n")
    vault.update_frontmatter(note.relpath, {"related": ["[[x]]"]})
    assert vault.write(make_note(body="overwrite?\n")).outcome == "refused"
    assert path.read_text().endswith("user line\n")


def test_move_never_overwrites(vault):
    (vault.root / "inbox" / "n.md").write_text("inbox copy\n")
    (vault.root / "engrams" / "n.md").write_text("engram copy\n")
    with pytest.raises(DirtyFileError):
        vault.move("inbox/n.md", "engrams")
    assert (vault.root / "inbox" / "n.md").read_text() == "inbox copy\n"
    assert (vault.root / "engrams" / "n.md").read_text() == "engram copy\n"


def test_move_updates_state(vault):
    note = make_note()
    vault.write(note)
    new = vault.move(note.relpath, "archive")
    assert new == f"archive/{note.stem}.md" and (vault.root / new).is_file()
    assert vault.state.paths_for(note.id) == [new]
    assert vault.locate(note.id) == new


def test_iter_note_paths(vault):
    for rel in [
        "inbox/b.md",
        "inbox/a.md",
        "Projects/deep/x.md",
        "root.md",
        ".obsidian/w.md",
        ".trash/old.md",
        f"{STATE_DIR}/s.md",
        "inbox/.hidden.md",
        "inbox/.a.md.vp-tmp-1",
        "resources/file.pdf",
    ]:
        (vault.root / rel).parent.mkdir(parents=True, exist_ok=True)
        (vault.root / rel).write_text("x")
    assert vault.iter_note_paths() == ["Projects/deep/x.md", "inbox/a.md", "inbox/b.md", "root.md"]


# --------------------------------------------------------------------------- the lock


HOLDER = """
import sys
from vault_pipeline.vault.files import Vault
with Vault.open(sys.argv[1]).lock("ingest"):
    print("held", flush=True)
    sys.stdin.readline()  # hold until the test writes a line (or closes stdin)
"""


def _hold_lock(vault: Vault) -> subprocess.Popen:
    """Another process holding the vault's lock as ``ingest`` until a line is written to its stdin."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(vault.root)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_lock_contention_names_the_holder(vault):
    proc = _hold_lock(vault)
    try:
        with pytest.raises(LockError) as caught, vault.lock("keep"):
            pass
        assert "ingest" in str(caught.value) and str(proc.pid) in str(caught.value)
    finally:
        proc.kill()
        proc.wait()
    with vault.lock("keep"):
        assert "keep" in (vault.root / STATE_DIR / "lock").read_text()


def test_lock_waits_for_the_holder(vault):
    proc = _hold_lock(vault)
    events: list[str] = []
    acquired = threading.Event()
    failed: list[Exception] = []

    def waiter():
        try:
            with vault.lock("keep", wait=60):
                events.append("acquired")
                acquired.set()
        except Exception as error:  # handed to the test's thread, which asserts there was none
            failed.append(error)

    thread = threading.Thread(target=waiter)
    try:
        # wait=0: refused at once, while the holder still holds the lock.
        with pytest.raises(LockError, match="ingest"), vault.lock("keep", wait=0):
            pass
        thread.start()
        # However long the machine takes, the waiter cannot get the lock before the holder lets go.
        assert not acquired.wait(0.3) and thread.is_alive()
        events.append("released")
        proc.stdin.write("release\n")
        proc.stdin.flush()
        thread.join(60)
        assert not failed and acquired.is_set()
        assert events == ["released", "acquired"]
        assert proc.wait(60) == 0
    finally:
        proc.kill()
        proc.wait()
        if thread.is_alive():
            thread.join(60)


def test_render_then_write_round_trip_is_exact(vault):
    note = make_note(tags=["b", "a"], session="[[s-abc123]]")
    vault.write(note)
    frontmatter, body, _ = vault.read(note.relpath)
    assert render_note(frontmatter, body) == (vault.root / note.relpath).read_text()


def test_a_secret_shaped_title_never_reaches_the_stem():
    from vault_pipeline.vault.note import safe_stem

    for title in (
        "my key is sk-proj-msgsecret1234567890abcdef and the database",
        "api_key=abcdef1234567890 for staging",
        "Authorization: Bearer abcdefgh12345678",
    ):
        stem = safe_stem(title, "a-0123456789ab")
        assert "abcdef" not in stem and "12345678" not in stem, stem
    assert safe_stem("my key is sk-proj-msgsecret1234567890abcdef", "a-0123456789ab") == "my-key-is-redacted-6789ab"
