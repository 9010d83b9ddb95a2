"""The smaller findings of issue 50, one test each.

A long prompt at a small budget (2,478 tokens for a budget of 500, `found: true` and no block); a
symlink loop at a note's path (a traceback); `keep` counting unreadable inbox notes without naming
them; a note with two `id:` keys (the index and the write state read different ids, `check` quiet);
a file rewritten under sudo becoming root's.
"""

from __future__ import annotations

import json
import os
import pwd

import pytest
from typer.testing import CliRunner

from tests.cli.test_cli import PACKAGE_KEYS
from tests.serve.test_mcp import tools  # noqa: F401  (the fixture)
from vault_pipeline.cli import app
from vault_pipeline.retrieve.metering import token_counter
from vault_pipeline.vault.note import Note
from vault_pipeline.vault.state import atomic_write, read_note_id


def test_a_long_prompt_keeps_the_package_within_its_budget(tools):  # noqa: F811
    prompt = "What does the raked gravel in a dry garden stand for, and why is it raked? " * 130
    package = tools.query(prompt, None, 500)
    assert package.tokens <= 500, package.tokens
    assert package.found == bool(package.blocks)  # never "found" and empty
    assert package.blocks  # the gravel note fits once the title no longer repeats the whole prompt


GRAVEL = "Raked gravel in a dry garden stands for water."
GRAVEL_PROMPT = "What does the raked gravel in a dry garden stand for, and why is it raked? " * 130


def _package_at(root, budget: int) -> dict:
    result = CliRunner().invoke(
        app, ["query", GRAVEL_PROMPT, "--budget", str(budget), "--vault", str(root), "--json"], prog_name="vault"
    )
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


@pytest.mark.parametrize("budget", [1, 12, 20])
def test_a_budget_too_small_for_any_block_is_no_found_package_and_says_what_would_do(
    make_vault, monkeypatch, tmp_path, budget
):
    import vault_pipeline.models.embed as embed
    from tests.support.fakes import HashEmbedder
    from vault_pipeline import pipeline

    monkeypatch.setattr(embed, "build_embedder", lambda *args, **kwargs: HashEmbedder(dim=64))
    monkeypatch.chdir(tmp_path)
    vault = make_vault(notes={"engrams/gravel.md": ("e-gravel", GRAVEL, {"tier": "engram"})})
    pipeline.index(vault, HashEmbedder(dim=64))
    tight = _package_at(vault.root, budget)
    assert set(PACKAGE_KEYS) - {"trace"} == set(tight) and "budget_needed" in tight["stats"]  # keys kept, one added
    assert tight["blocks"] == [] and tight["found"] is False  # no block: never "found"
    assert tight["stats"]["found"] is True  # the evidence was there: the budget left it out
    needed = tight["stats"]["budget_needed"]
    assert needed > budget and tight["stats"]["dropped_for_budget"]
    markdown = CliRunner().invoke(app, ["query", GRAVEL_PROMPT, "--budget", str(budget), "--vault", str(vault.root)])
    notice = f"Budget {budget} too small for any block found: ask for {needed}."
    assert notice in markdown.stdout
    # Its size is what it is, counted truthfully, and no more than its budget or, below that, the
    # notice alone (the prompt's echo goes first).
    floor = token_counter(tight["tokenizer"]).count(f"# Context\n\n> {notice}\n")
    assert tight["tokens"] == tight["stats"]["tokens"] == token_counter(tight["tokenizer"]).count(markdown.stdout)
    assert tight["tokens"] <= max(budget, floor)
    at_needed = _package_at(vault.root, needed)
    assert at_needed["found"] is True and len(at_needed["blocks"]) == 1 and at_needed["tokens"] <= needed
    assert at_needed["stats"]["budget_needed"] == 0
    below = _package_at(vault.root, needed - 1)
    assert below["blocks"] == [] and below["stats"]["budget_needed"] == needed  # the smallest that holds one


def test_a_small_budget_is_for_blocks_not_for_the_prompts_echo(make_vault, monkeypatch, tmp_path):
    import vault_pipeline.models.embed as embed
    from tests.support.fakes import HashEmbedder
    from vault_pipeline import pipeline

    monkeypatch.setattr(embed, "build_embedder", lambda *args, **kwargs: HashEmbedder(dim=64))
    monkeypatch.chdir(tmp_path)
    vault = make_vault(notes={"engrams/gravel.md": ("e-gravel", GRAVEL, {"tier": "engram"})})
    pipeline.index(vault, HashEmbedder(dim=64))
    for budget in (40, 60, 100, 200, 500):
        package = _package_at(vault.root, budget)
        assert package["tokens"] <= budget, (budget, package["tokens"])
        assert package["found"] == bool(package["blocks"])
        assert package["found"] or package["stats"]["budget_needed"] > budget


def test_a_symlink_loop_at_a_note_path_is_refused_in_one_line(make_vault):
    vault = make_vault()
    (vault.root / "inbox" / "loop.md").symlink_to("loop.md")
    note = Note("n-loop", "atomic", "inbox", "loop", {"id": "n-loop", "type": "atomic"}, "A sentence.\n")
    outcome = vault.write(note)
    assert outcome.outcome == "refused" and "symlink loop" in outcome.reason
    assert (vault.root / "inbox" / "loop.md").is_symlink()  # left as it was


def test_keep_names_the_inbox_notes_it_cannot_read(make_vault, tmp_path, monkeypatch):
    vault = make_vault()
    (vault.root / "inbox" / "broken.md").write_text("---\nid: [unclosed\n---\nText.\n", encoding="utf-8")
    (vault.root / "inbox" / "binary.md").write_bytes(b"---\nid: b\n---\n\xff\xfe\n")
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["keep", "--all-passing", "--vault", str(vault.root)], prog_name="vault")
    assert result.exit_code == 1
    assert "inbox/broken.md" in result.output and "inbox/binary.md" in result.output


def test_two_id_keys_are_read_alike_and_check_reports_them(make_vault):
    from vault_pipeline.index.check import check
    from vault_pipeline.vault.frontmatter import split_frontmatter

    vault = make_vault()
    path = vault.root / "inbox" / "twice.md"
    path.write_text("---\nid: first-id\ntype: atomic\nid: second-id\n---\nThe pump runs at night.\n", encoding="utf-8")
    frontmatter, _ = split_frontmatter(path.read_text(encoding="utf-8"))
    assert read_note_id(path) == frontmatter["id"]  # the write state and the index agree on the note's id
    report = check(vault)
    assert any(p == "inbox/twice.md" and "two `id:` keys" in why for p, why in report.invalid), report.invalid


def test_a_file_rewritten_as_root_keeps_its_owner(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("only root changes another user's file's owner")
    try:
        nobody = pwd.getpwnam("nobody")
    except KeyError:
        pytest.skip("no `nobody` account to own the file")
    path = tmp_path / "note.md"
    path.write_text("old\n", encoding="utf-8")
    os.chown(path, nobody.pw_uid, nobody.pw_gid)
    atomic_write(path, b"new\n")
    assert (path.stat().st_uid, path.stat().st_gid) == (nobody.pw_uid, nobody.pw_gid)
    fresh = tmp_path / "folder"
    fresh.mkdir()
    os.chown(fresh, nobody.pw_uid, nobody.pw_gid)
    atomic_write(fresh / "new.md", b"made\n")  # a new file takes its folder's owner
    assert (fresh / "new.md").stat().st_uid == nobody.pw_uid
