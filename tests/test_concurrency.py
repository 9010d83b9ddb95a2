"""Concurrency: every write command takes the vault lock; a second process fails fast naming the
holder, or with ``--wait`` runs after it; two ingests at once write exactly the union of notes.

Real subprocesses of the CLI (with the fast fake embedder, as in test_crash.py) against a
holder process that takes ``Vault(...).lock("ingest")`` and keeps it until told to let go.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.fakes import HANG_GUARD
from tests.test_crash import ENV, EXAMPLE, EXPORTS, SOURCES, note_ids, notes, run, vault_cmd
from vault_pipeline.index.check import check
from vault_pipeline.vault.files import Vault

HOLDER = (
    "import sys\nfrom vault_pipeline.vault.files import Vault\n"
    "with Vault.open(sys.argv[1]).lock('ingest'):\n    print('held', flush=True)\n    sys.stdin.read()\n"
)
WRITE_COMMANDS = {
    "ingest": ["ingest", str(EXPORTS / "transcripts" / "reading-group.md")],
    "index": ["index"],
    "clean": ["clean"],
    "keep": ["keep", "--all-passing"],
}
STARTUP = 3.0  # seconds given to waiting commands to start and find the lock held (not a speed claim)


class Holder:
    """A process holding the vault lock as `ingest` until ``release()``."""

    def __init__(self, root: Path):
        self.proc = subprocess.Popen(
            [sys.executable, "-c", HOLDER, str(root)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=ENV
        )
        assert self.proc.stdout.readline().strip() == "held"

    def release(self) -> None:
        self.proc.stdin.close()
        assert self.proc.wait(timeout=HANG_GUARD) == 0

    def __enter__(self) -> Holder:
        return self

    def __exit__(self, *exc) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def sound(root: Path) -> None:
    """`vault check` finds no broken note, duplicate id or dangling link."""
    vault = Vault.open(root)
    try:
        report = check(vault)
    finally:
        vault.close()
    assert (report.invalid, report.duplicate_ids, report.dangling_links, report.dangling_blocks) == ([], {}, [], [])


@pytest.fixture()
def vault_root(tmp_path) -> Path:
    """The example vault with the sample transcripts ingested and indexed."""
    root = Path(shutil.copytree(EXAMPLE / "vault", tmp_path / "vault"))
    run("ingest", *SOURCES[2:], "--vault", str(root))
    run("index", "--vault", str(root))
    return root


@pytest.mark.slow
def test_a_second_writer_fails_fast_naming_the_holder_or_waits_for_it(vault_root):
    before = notes(vault_root)
    with Holder(vault_root) as holder:
        for name, args in WRITE_COMMANDS.items():
            result = run(*args, "--vault", str(vault_root), ok=False)
            message = result.stderr.strip()
            assert result.returncode == 1, (name, result.stdout, result.stderr)
            assert "\n" not in message and "Traceback" not in message, message
            assert "`ingest`" in message and f"pid {holder.proc.pid}" in message, message
        assert notes(vault_root) == before  # nothing was written past the lock
        waiting = {
            name: subprocess.Popen(
                vault_cmd(*args, "--vault", str(vault_root), "--wait", "120"),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=ENV,
            )
            for name, args in WRITE_COMMANDS.items()
        }
        time.sleep(STARTUP)
        assert {name: proc.poll() for name, proc in waiting.items()} == dict.fromkeys(waiting)
        holder.release()
        outcomes = {name: (proc.wait(timeout=HANG_GUARD), proc.communicate()[1]) for name, proc in waiting.items()}
    assert {name: code for name, (code, _) in outcomes.items()} == dict.fromkeys(waiting, 0), outcomes
    sound(vault_root)
    assert any(p.startswith("engrams/") for p in notes(vault_root))  # keep ran after the holder let go


def ingested_ids(tmp_path: Path, name: str, *batches: list[str]) -> set[str]:
    """The note ids of the example vault after one ingest per batch, one after the other."""
    root = Path(shutil.copytree(EXAMPLE / "vault", tmp_path / name))
    for sources in batches:
        run("ingest", *sources, "--vault", str(root))
    return set(note_ids(notes(root)))


@pytest.mark.slow
def test_two_ingests_at_once_write_exactly_the_union_of_their_notes(tmp_path):
    first, second = SOURCES[:1], SOURCES[1:]
    alone = ingested_ids(tmp_path, "first", first) | ingested_ids(tmp_path, "second", second)
    # The lock runs them one after the other, in either order. A subject that chats of both share
    # gets a hub neither writes alone (ingest/topics.py), and the first to write a subject's hub names
    # it; so the vault holds exactly what one of the two orders writes, and every note either writes alone.
    orders = [ingested_ids(tmp_path, "ab", first, second), ingested_ids(tmp_path, "ba", second, first)]
    root = Path(shutil.copytree(EXAMPLE / "vault", tmp_path / "both"))
    with Holder(root) as holder:  # both start while the lock is held, so they really contend
        procs = [
            subprocess.Popen(
                vault_cmd("ingest", *sources, "--vault", str(root), "--wait", "120"),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=ENV,
            )
            for sources in (first, second)
        ]
        time.sleep(STARTUP)
        holder.release()
        results = [(proc.wait(timeout=HANG_GUARD), proc.communicate()[1]) for proc in procs]
    assert [code for code, _ in results] == [0, 0], results
    written = set(note_ids(notes(root)))
    assert written in orders, [sorted(written ^ order) for order in orders]
    assert {i for i in alone if not i.startswith("h-")} <= written
    sound(root)
