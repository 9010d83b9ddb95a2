"""A damaged index is found by `vault check` and rebuilt from the vault by whoever finds it.

Each kind of damage the reliability probe made (issue 42): data files cut to half, random bytes
in them, zero-length index files, truncated version manifests.
"""

from __future__ import annotations

import pytest

from tests.support.damage import KINDS, damage_index
from tests.support.fakes import HashEmbedder
from vault_pipeline import pipeline
from vault_pipeline.index.check import check
from vault_pipeline.index.damage import DAMAGED_PREFIX, IndexDamagedError, is_damage, probe
from vault_pipeline.index.search import Index
from vault_pipeline.index.table import INDEX_DIR
from vault_pipeline.vault.files import STATE_DIR

SENTENCES = [
    "Raked gravel in a dry garden stands for water.",
    "The moss garden at Saihoji holds over a hundred kinds of moss.",
    "A cold sourdough starter needs two feedings to become lively again.",
    "The release ships on Friday after the final review.",
    "Peer review for the paper is due at the end of the month.",
]


@pytest.fixture
def indexed(make_vault):
    notes = {f"inbox/note-{i:02d}.md": (f"a-{i:04d}", SENTENCES[i % len(SENTENCES)] + f" Note {i}.") for i in range(40)}
    vault = make_vault(notes=notes)
    pipeline.index(vault, HashEmbedder(dim=64))
    return vault


def _note_ids(vault) -> set[str]:
    return {row.note_id for row in Index.open(vault).rows([f"a-{i:04d}" for i in range(40)])}


@pytest.mark.parametrize("kind", KINDS)
def test_check_reports_each_kind_of_damage(indexed, kind):
    assert check(indexed).index_damage == ""
    damage_index(indexed.root, kind)
    report = check(indexed)
    assert report.index_damage and report.problems == 1


@pytest.mark.parametrize("kind", KINDS)
def test_index_sets_the_broken_copy_aside_and_rebuilds_the_same_notes(indexed, kind):
    before = _note_ids(indexed)
    damage_index(indexed.root, kind)
    report = pipeline.index(indexed, HashEmbedder(dim=64))
    assert report.rebuilt and "could not be read" in report.rebuild_reason
    assert report.damaged_copy.startswith(f"{STATE_DIR}/{DAMAGED_PREFIX}")
    assert (indexed.root / report.damaged_copy).is_dir()  # kept for the user
    assert "\n" not in report.rebuild_reason
    assert _note_ids(indexed) == before and report.rows == 40
    assert check(indexed).problems == 0
    again = pipeline.index(indexed, HashEmbedder(dim=64))
    assert not again.rebuilt and again.unchanged == 40


def test_probe_is_quiet_on_an_intact_index_and_on_none(indexed, tmp_path):
    assert probe(indexed.root / STATE_DIR / INDEX_DIR) == ""
    assert probe(indexed.root / STATE_DIR / INDEX_DIR, full=True) == ""
    assert probe(tmp_path / "nowhere") == ""


def test_status_turns_unreadable_files_into_one_error(indexed):
    damage_index(indexed.root, "truncated data")
    with pytest.raises(IndexDamagedError) as caught:
        pipeline.status(indexed)
    assert is_damage(caught.value) and "\n" not in str(caught.value)
    assert "run `vault index`" in str(caught.value)


@pytest.fixture
def cli(monkeypatch):
    """Run `vault` in process with the fast hash embedder."""
    from typer.testing import CliRunner

    import vault_pipeline.models.embed as embed
    from vault_pipeline.cli import app

    monkeypatch.setattr(embed, "build_embedder", lambda *args, **kwargs: HashEmbedder(dim=64))
    for name in ("VAULT_DIR", "VAULT_EMBED_MODEL"):
        monkeypatch.delenv(name, raising=False)
    return lambda *args: CliRunner().invoke(app, [str(a) for a in args], prog_name="vault")


@pytest.mark.parametrize("kind", KINDS)
def test_query_rebuilds_an_unreadable_index_with_a_one_line_notice(indexed, cli, kind):
    damage_index(indexed.root, kind)
    result = cli("query", "sourdough starter feedings", "--json", "--vault", indexed.root)
    assert result.exit_code == 0, result.output
    assert "Traceback" not in result.output
    (notice,) = [line for line in result.stderr.splitlines() if "could not be read" in line]
    assert "rebuilt it from the notes" in notice and DAMAGED_PREFIX in notice
    assert '"blocks"' in result.stdout


def test_status_rebuilds_an_unreadable_index(indexed, cli):
    damage_index(indexed.root, "truncated data")
    result = cli("status", "--vault", indexed.root)
    assert result.exit_code == 0, result.output
    assert "Traceback" not in result.output and "could not be read" in result.stderr
    assert "notes indexed" in result.stdout


def test_check_names_the_damage_and_the_command_that_repairs_it(indexed, cli):
    damage_index(indexed.root, "truncated manifests")
    result = cli("check", "--vault", indexed.root)
    assert result.exit_code == 1
    (line,) = [line for line in result.stdout.splitlines() if line.startswith("index: cannot be read")]
    assert line.endswith("run `vault index` to rebuild it from the notes")
    fixed = cli("index", "--vault", indexed.root)
    assert fixed.exit_code == 0 and "rebuilt the index: the index could not be read" in fixed.stderr
    assert cli("check", "--vault", indexed.root).exit_code == 0


def test_status_lists_every_model_role_the_quality_model_included(indexed, cli):
    result = cli("status", "--json", "--vault", indexed.root)
    import json

    roles = [m["role"] for m in json.loads(result.stdout)["models"]]
    assert roles == ["extract", "gate", "quality", "embed"]


def test_check_prints_its_summary_and_the_count_on_lines_of_their_own(indexed):
    import subprocess
    import sys

    damage_index(indexed.root, "truncated data")
    cli = [sys.executable, "-m", "vault_pipeline.cli", "check", "--vault", str(indexed.root)]
    done = subprocess.run(cli, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = done.stdout.splitlines()
    assert done.returncode == 1
    assert [line for line in lines if line.startswith("checked ")] == ["checked 40 notes: 1 problem(s)"]
    assert lines[-1] == "incomplete: 1 problem(s) found (exit 1)"


def test_the_library_query_rebuilds_an_unreadable_index_itself_and_says_so(indexed):
    """Repair belongs to the facade: a caller of ``pipeline.query`` needs no wrapper of its own."""
    from vault_pipeline.models.offline import OfflineBackend

    damage_index(indexed.root, "truncated data")
    told = []
    llm = OfflineBackend()
    (package,) = pipeline.query(
        indexed,
        [("sourdough starter feedings", None)],
        embedder=HashEmbedder(dim=64),
        llm_plan=llm,
        llm_gate=llm,
        on_repair=told.append,
    )
    assert package.blocks and len(told) == 1 and told[0].rebuilt and told[0].rows == 40
    repaired = []
    pipeline.status(indexed, embedder=lambda: HashEmbedder(dim=64), on_repair=repaired.append)
    assert repaired == []  # healthy again: nothing to rebuild


def test_the_library_search_rebuilds_an_unreadable_index_itself(indexed):
    """``pipeline.search`` (what ``vault mcp``'s search calls) repairs as ``pipeline.query`` does."""
    damage_index(indexed.root, "truncated manifests")
    told = []
    hits = pipeline.search(
        indexed, "sourdough starter feedings", embedder=HashEmbedder(dim=64), floor=0.0, on_repair=told.append
    )
    assert hits and len(told) == 1 and told[0].rebuilt
    assert len({c.row.note_id for c in hits}) == len(hits)  # one per note
