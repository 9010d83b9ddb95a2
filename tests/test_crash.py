"""Crash safety: SIGKILL the real `vault ingest`, `vault index` and `vault clean` at seeded random
points of their write phase, then prove no note is corrupt or lost and the next run finishes the job.

Every command runs as a subprocess of the real CLI. Only the embedder is swapped for the test
fake (``HashEmbedder``): with MiniLM almost all of `vault index` is model time, so random kills
would land in matrix maths rather than in the writes this file is about (vault.toml has no
cheaper offline embedder to pick).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.fakes import HANG_GUARD
from vault_pipeline.errors import FrontmatterError
from vault_pipeline.index.check import check
from vault_pipeline.vault.files import Vault
from vault_pipeline.vault.frontmatter import split_frontmatter

REPO = Path(__file__).resolve().parent.parent
EXAMPLE = REPO / "vault_example"
EXPORTS = EXAMPLE / "exports"
SOURCES = [
    str(EXPORTS / "chatgpt"),
    str(EXPORTS / "claude"),
    *sorted(str(p) for p in (EXPORTS / "transcripts").glob("*.md")),
]
# The real CLI with the fast fake embedder; everything else (models, vault, lock) as shipped.
CLI = (
    "import sys\nfrom tests.support.fakes import HashEmbedder\nimport vault_pipeline.models.embed as embed\n"
    "embed.build_embedder = lambda *args, **kwargs: HashEmbedder(dim=64)\n"
    "from vault_pipeline.cli import main\nsys.argv[0] = 'vault'\nmain()\n"
)
ENV = {**os.environ, "PYTHONPATH": str(REPO), "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
KILLS = {"ingest": 6, "index": 4, "clean": 4}
WRITE_SPAN = 0.3  # seconds: kills land up to this long after the write phase starts
DEADLINE = HANG_GUARD  # a run that never reaches its write phase or never ends is a failure, not a hang


def vault_cmd(*args: str) -> list[str]:
    """The argv of one `vault` command."""
    return [sys.executable, "-c", CLI, *args]


def run(*args: str, ok: bool = True) -> subprocess.CompletedProcess:
    """Run a `vault` command to the end; with ``ok``, it must succeed."""
    result = subprocess.run(vault_cmd(*args), capture_output=True, text=True, env=ENV, timeout=DEADLINE)
    if ok:
        assert result.returncode == 0, f"vault {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}"
    return result


def run_json(*args: str) -> dict:
    """Run a `vault ... --json` command and parse its report."""
    return json.loads(run(*args, "--json").stdout)


def kill_during(args: list[str], started: Callable[[int], bool], delay: float) -> bool:
    """Start `vault <args>`; SIGKILL it ``delay`` s after ``started(pid)``. True if it died by the kill."""
    proc = subprocess.Popen(vault_cmd(*args), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=ENV)
    deadline = time.monotonic() + DEADLINE
    try:
        while not started(proc.pid) and proc.poll() is None:
            assert time.monotonic() < deadline, f"vault {' '.join(args)} never reached its write phase"
            time.sleep(0.002)
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        return proc.wait(timeout=DEADLINE) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def holds_lock(root: Path) -> Callable[[int], bool]:
    """True once process ``pid`` holds the vault lock (the write phase of ingest and index)."""

    def started(pid: int) -> bool:
        try:
            return json.loads((root / ".vault_pipeline" / "lock").read_text() or "{}").get("pid") == pid
        except (OSError, ValueError):
            return False

    return started


def journal_runs(root: Path) -> set[str]:
    """Run ids with a journal folder (a run that touched a file, finished or not)."""
    folder = root / ".vault_pipeline" / "journal"
    return {p.name for p in folder.iterdir() if p.is_dir()} if folder.is_dir() else set()


def new_journal(root: Path) -> Callable[[int], bool]:
    """True once a journal folder appears that was not there before: an apply (or undo) is writing."""
    before = journal_runs(root)
    return lambda pid: bool(journal_runs(root) - before)


def notes(root: Path) -> dict[str, bytes]:
    """Every .md file of the vault (hidden folders and temp files aside): relpath -> bytes."""
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*.md"))
        if not any(part.startswith(".") for part in p.relative_to(root).parts)
    }


def note_ids(files: dict[str, bytes]) -> dict[str, str]:
    """id -> relpath of every note; a note that does not parse fails the test here."""
    ids = {}
    for relpath, data in files.items():
        try:
            frontmatter, _ = split_frontmatter(data.decode("utf-8"), relpath)
        except (FrontmatterError, UnicodeDecodeError) as exc:
            pytest.fail(f"corrupt note after a kill: {relpath}: {exc}")
        if frontmatter.get("id"):
            assert str(frontmatter["id"]) not in ids, f"id {frontmatter['id']} twice: {relpath}"
            ids[str(frontmatter["id"])] = relpath
    return ids


def assert_sound(root: Path, before: dict[str, bytes]) -> dict[str, bytes]:
    """After a kill: `vault check` finds nothing corrupt, and every note id of ``before`` is still here."""
    vault = Vault.open(root)  # check in-process: the same report as `vault check --json`, no start-up
    try:
        report = check(vault)
    finally:
        vault.close()
    assert report.invalid == [] and report.duplicate_ids == {}, report
    assert report.dangling_links == [] and report.dangling_blocks == [], report
    assert all(Path(p).name.startswith(".") for p in report.temp_files), report.temp_files
    now = notes(root)
    lost = set(note_ids(before)) - set(note_ids(now))
    assert not lost, f"notes lost by a kill: {sorted(lost)}"
    return now


def assert_check_clean(root: Path) -> None:
    """`vault check --fix` removes the temp files killed writes left; then `vault check` finds nothing."""
    run("check", "--vault", str(root), "--fix")
    report = json.loads(run("check", "--vault", str(root), "--json").stdout)
    assert report["problems"] == 0, report


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    """The example vault, before any ingest, writing every candidate (more notes: a longer write to kill)."""
    root = tmp_path_factory.mktemp("crash") / "base"
    shutil.copytree(EXAMPLE / "vault", root)
    toml = root / "vault.toml"
    toml.write_text(toml.read_text(encoding="utf-8").replace("write_threshold = 0.4", "write_threshold = 0.0"))
    assert "write_threshold = 0.0" in toml.read_text(encoding="utf-8")
    return root


def copy_of(base: Path, tmp_path: Path, name: str) -> Path:
    return Path(shutil.copytree(base, tmp_path / name))


@pytest.mark.slow
def test_ingest_killed_anywhere_loses_nothing_and_the_next_run_completes_it(base, tmp_path):
    reference = copy_of(base, tmp_path, "reference")
    run("ingest", *SOURCES, "--vault", str(reference))
    expected = notes(reference)
    root = copy_of(base, tmp_path, "vault")
    rng, kills = random.Random(6_3), 0
    for _ in range(KILLS["ingest"]):
        before = notes(root)
        kills += kill_during(["ingest", *SOURCES, "--vault", str(root)], holds_lock(root), rng.uniform(0, WRITE_SPAN))
        now = assert_sound(root, before)
        # Whatever a killed ingest left is exactly what a whole run writes: no half-written note.
        assert {p: d for p, d in now.items() if expected.get(p) != d} == {}
    assert kills >= KILLS["ingest"] // 2, f"only {kills} of {KILLS['ingest']} runs died mid-write"
    run("ingest", *SOURCES, "--vault", str(root))
    assert notes(root) == expected
    assert run_json("ingest", *SOURCES, "--vault", str(root))["files_written"] == 0
    assert_check_clean(root)


@pytest.fixture(scope="module")
def ingested(base, tmp_path_factory) -> Path:
    """The example vault with the example exports ingested, not indexed."""
    root = Path(shutil.copytree(base, tmp_path_factory.mktemp("crash") / "ingested"))
    run("ingest", *SOURCES, "--vault", str(root))
    return root


@pytest.mark.slow
def test_index_killed_anywhere_leaves_notes_alone_and_the_next_run_repairs_it(ingested, tmp_path):
    root = copy_of(ingested, tmp_path, "vault")
    files = notes(root)
    rng, kills = random.Random(6_3_1), 0
    for i in range(KILLS["index"]):
        # Alternate incremental syncs and full rebuilds (drop the table, re-add every row).
        args = ["index", "--vault", str(root), *(["--rebuild"] if i % 2 else [])]
        kills += kill_during(args, holds_lock(root), rng.uniform(0, WRITE_SPAN))
        assert assert_sound(root, files) == files  # the index never touches a note
    assert kills >= KILLS["index"] // 2, f"only {kills} of {KILLS['index']} runs died mid-write"
    first = run_json("index", "--vault", str(root))
    assert first["skipped"] == [] and first["rows"] > 0
    assert_check_clean(root)
    again = run_json("index", "--vault", str(root), "--verify")
    work = ("added", "changed", "moved", "removed", "repaired", "embedded_notes")
    assert {k: again[k] for k in work} == dict.fromkeys(work, 0) and again["rows"] == first["rows"]
    assert run_json("index", "--vault", str(root), "--rebuild")["rows"] == first["rows"]


@pytest.fixture(scope="module")
def indexed(ingested, tmp_path_factory) -> Path:
    """The ingested example vault, indexed."""
    root = Path(shutil.copytree(ingested, tmp_path_factory.mktemp("crash") / "indexed"))
    run("index", "--vault", str(root))
    return root


def crashed_run(root: Path, earlier: set[str]) -> str:
    """The one run journaled since ``earlier``: mostly unfinished, finished when the kill came
    during the re-index after the apply (undo must work on either journal)."""
    new = sorted(journal_runs(root) - earlier)
    assert len(new) == 1, new
    return new[0]


@pytest.mark.slow
def test_clean_killed_mid_apply_loses_nothing_and_can_be_undone_or_finished(indexed, tmp_path):
    root = copy_of(indexed, tmp_path, "vault")
    start = notes(root)
    rng, kills, undo_kills = random.Random(6_3_2), 0, 0
    for i in range(KILLS["clean"]):
        before, earlier = notes(root), journal_runs(root)
        if not kill_during(["clean", "--vault", str(root)], new_journal(root), rng.uniform(0, WRITE_SPAN)):
            continue
        kills += 1
        assert_sound(root, before)
        if i % 2:
            continue  # leave the half-applied sweep for the next run to finish
        # Undo the crashed run from its partial journal, once killed half-way itself, then again.
        run_id = crashed_run(root, earlier)
        undo_kills += kill_during(
            ["clean", "--vault", str(root), "--undo", run_id], new_journal(root), rng.uniform(0, WRITE_SPAN / 3)
        )
        assert_sound(root, before)
        run("clean", "--vault", str(root), "--undo", run_id)
        assert notes(root) == before
    assert kills >= KILLS["clean"] // 2, f"only {kills} of {KILLS['clean']} runs died mid-apply"
    report = run_json("clean", "--vault", str(root))
    assert report["skipped"] == []
    assert set(note_ids(notes(root))) == set(note_ids(start))
    assert_check_clean(root)
    assert run_json("clean", "--vault", str(root))["counts"] == {}  # the sweep is done
    print(f"clean kills: {kills} mid-apply, {undo_kills} mid-undo")
