"""`vault check`: every kind of problem is found; --fix repairs only what is ours."""

from __future__ import annotations

import shutil
import subprocess
import sys

from conftest import REPO

from tests.fakes import HashEmbedder
from vault_pipeline import pipeline
from vault_pipeline.index.check import check
from vault_pipeline.models.offline import OfflineBackend
from vault_pipeline.vault.files import Vault


def built(tmp_path):
    shutil.copytree(REPO / "vault_example" / "vault", tmp_path / "v")
    vault = Vault.open(tmp_path / "v")
    pipeline.ingest(vault, [REPO / "vault_example" / "exports" / "chatgpt"], OfflineBackend())
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
    assert result.returncode == 2 and "dangling link: links.md -> [[missing-note]]" in result.stdout
