"""`vault check`: every kind of problem is found; --fix repairs only what is ours."""

from __future__ import annotations

import shutil
import subprocess
import sys

from tests.support.fakes import EVERY_CANDIDATE, HashEmbedder
from tests.support.paths import REPO
from vault_pipeline import pipeline
from vault_pipeline.index.check import check
from vault_pipeline.models.offline import OfflineBackend
from vault_pipeline.vault.files import Vault


def built(tmp_path):
    shutil.copytree(REPO / "vault_example" / "vault", tmp_path / "v")
    vault = Vault.open(tmp_path / "v")
    pipeline.ingest(vault, [REPO / "vault_example" / "exports" / "chatgpt"], OfflineBackend(), selector=EVERY_CANDIDATE)
    pipeline.index(vault, HashEmbedder())
    return vault


def test_a_fresh_vault_has_no_problems(tmp_path):
    report = check(built(tmp_path))
    assert report.notes > 50 and report.problems == 0


def test_every_kind_of_problem_is_reported(tmp_path):
    vault = built(tmp_path)
    root = vault.root
    (root / "broken.md").write_text("---\nid: [unclosed\n---\nbody\n", encoding="utf-8")
    (root / "links.md").write_text(
        "See [[no-such-note]] and [[ideas-for-the-essay#^nope]] and [[ideas-for-the-essay]].\n", encoding="utf-8"
    )
    twin = root / "engrams" / "twin.md"
    twin.write_text((root / "engrams" / "moss-garden-saihoji.md").read_text(encoding="utf-8"), encoding="utf-8")
    edited = root / "engrams" / "karesansui-gravel-as-water.md"
    edited.write_text(edited.read_text(encoding="utf-8") + "\nA thought of mine.\n", encoding="utf-8")
    (root / "inbox" / ".note.md.vp-tmp-999999999").write_text("half a note", encoding="utf-8")
    report = check(vault)
    assert [p for p, _ in report.invalid] == ["broken.md"]
    assert report.dangling_links == [("links.md", "no-such-note")]
    assert report.dangling_blocks == [("links.md", "ideas-for-the-essay#^nope")]
    assert report.duplicate_ids == {"e-6f0b3e8a2c4d": ["engrams/moss-garden-saihoji.md", "engrams/twin.md"]}
    mismatches = dict(report.index_mismatches)
    assert mismatches["engrams/karesansui-gravel-as-water.md"] == "changed since it was indexed"
    assert mismatches["links.md"] == "not indexed yet"
    assert report.temp_files == ["inbox/.note.md.vp-tmp-999999999"]


def test_fix_removes_temp_files_and_resyncs_but_never_edits_a_note(tmp_path):
    vault = built(tmp_path)
    edited = vault.root / "engrams" / "karesansui-gravel-as-water.md"
    text = edited.read_text(encoding="utf-8") + "\nA thought of mine.\n"
    edited.write_text(text, encoding="utf-8")
    temp = vault.root / "inbox" / ".x.md.vp-tmp-999999999"
    temp.write_text("partial", encoding="utf-8")
    report = check(vault, embedder=HashEmbedder(), fix=True)
    assert not temp.exists() and edited.read_text(encoding="utf-8") == text
    assert len(report.fixed) == 2
    assert check(vault).problems == 0


def test_cli_check_exit_code(tmp_path):
    vault = built(tmp_path)
    cli = [sys.executable, "-m", "vault_pipeline.cli", "check", "--vault", str(vault.root)]
    assert subprocess.run(cli, capture_output=True, text=True).returncode == 0
    (vault.root / "links.md").write_text("[[missing-note]]\n", encoding="utf-8")
    result = subprocess.run(cli, capture_output=True, text=True)
    assert (
        result.returncode == 1 and "dangling link: links.md -> [[missing-note]]" in result.stdout
    )  # 1: problems found


def test_links_resolve_without_regard_to_case_as_in_obsidian(tmp_path):
    vault = built(tmp_path)
    (vault.root / "links.md").write_text(
        "[[MOSS-GARDEN-SAIHOJI]], [[Moss-Garden-Saihoji.md]] and [[no-SUCH-note]]\n", encoding="utf-8"
    )
    assert check(vault).dangling_links == [("links.md", "no-SUCH-note")]


def test_a_copy_with_the_same_id_is_reported_once_and_fix_gives_it_its_own_id(tmp_path):
    vault = built(tmp_path)
    original = vault.root / "engrams" / "moss-garden-saihoji.md"
    copy = vault.root / "engrams" / "moss-garden-saihoji 1.md"  # Obsidian's "Make a copy"
    text = original.read_text(encoding="utf-8") + "\nMy variation on it.\n"
    copy.write_text(text, encoding="utf-8")
    report = check(vault)
    assert report.duplicate_ids == {
        "e-6f0b3e8a2c4d": ["engrams/moss-garden-saihoji 1.md", "engrams/moss-garden-saihoji.md"]
    }
    assert report.copies == {"e-6f0b3e8a2c4d": ["engrams/moss-garden-saihoji 1.md"]}
    assert report.problems == 1  # the copy is not reported a second time as "not indexed yet"
    fixed = check(vault, embedder=HashEmbedder(), fix=True)
    new_text = copy.read_text(encoding="utf-8")
    (new_id,) = [line[4:] for line in new_text.splitlines() if line.startswith("id: ")]
    assert new_id != "e-6f0b3e8a2c4d" and new_text == text.replace("id: e-6f0b3e8a2c4d", f"id: {new_id}")
    assert "e-6f0b3e8a2c4d" in original.read_text(encoding="utf-8")
    assert any("gave the copy engrams/moss-garden-saihoji 1.md a new id" in line for line in fixed.fixed)
    assert check(vault).problems == 0  # the copy is indexed now: no mismatch, no duplicate


def test_cli_check_names_the_fix_for_a_duplicate_id(tmp_path):
    vault = built(tmp_path)
    original = vault.root / "engrams" / "moss-garden-saihoji.md"
    (vault.root / "engrams" / "copy.md").write_text(original.read_text(encoding="utf-8"), encoding="utf-8")
    cli = [sys.executable, "-m", "vault_pipeline.cli", "check", "--vault", str(vault.root)]
    result = subprocess.run(cli, capture_output=True, text=True)
    (line,) = [line for line in result.stdout.splitlines() if line.startswith("duplicate id")]
    assert "`vault check --fix` gives engrams/copy.md an id of its own" in line
    assert "problem(s)" in result.stdout.splitlines()[-1] and " 1 problem" in result.stdout.splitlines()[-1]
