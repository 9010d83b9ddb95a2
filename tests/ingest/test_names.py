"""What ingest writes into names and headings: no secret in a file name, no live link from a title (issue 42)."""

from __future__ import annotations

import json

from tests.support.paths import REPO
from vault_pipeline import pipeline
from vault_pipeline.index.check import check
from vault_pipeline.ingest.notes import heading_text
from vault_pipeline.ingest.select import Selector
from vault_pipeline.models.offline import OfflineBackend
from vault_pipeline.text import wikilinks
from vault_pipeline.vault.files import Vault

KEY = "sk-proj-msgsecret1234567890abcdef"
WRITE_ALL = Selector({}, 0.0, write=0.0, keep=0.0)  # every candidate the extractor finds is written


def export(tmp_path, title: str, said: str):
    """The example ChatGPT export's first conversation, retitled, with its first user message replaced."""
    path = REPO / "vault_example" / "exports" / "chatgpt" / "conversations.json"
    record = json.loads(path.read_text(encoding="utf-8"))[0]
    record["title"] = title
    node = next(
        n for n in record["mapping"].values() if (n.get("message") or {}).get("author", {}).get("role") == "user"
    )
    node["message"]["content"]["parts"] = [said]
    out = tmp_path / "conversations.json"
    out.write_text(json.dumps([record]), encoding="utf-8")
    return out


def test_a_secret_never_reaches_a_file_name_but_the_note_keeps_it(tmp_path):
    said = f"My key is {KEY} and the database is on the staging server."
    vault = Vault.init(tmp_path / "v")
    pipeline.ingest(vault, [export(tmp_path, f"Deploy with {KEY}", said)], OfflineBackend(), selector=WRITE_ALL)
    names = list(vault.iter_note_paths())
    assert names and not [p for p in names if "msgsecret" in p]
    holding = [p for p in names if KEY in (vault.root / p).read_text(encoding="utf-8")]
    assert any(p.startswith("sessions/") for p in holding)  # the user's text is kept
    report = check(vault)
    assert set(holding) <= set(report.secrets) and report.problems >= len(holding)
    vault.close()


def test_a_title_written_into_markdown_never_becomes_a_link(tmp_path):
    title = "[[../../etc/passwd]]"
    vault = Vault.init(tmp_path / "v")
    pipeline.ingest(
        vault, [export(tmp_path, title, "We decided to ship on Friday.")], OfflineBackend(), selector=WRITE_ALL
    )
    for relpath in vault.iter_note_paths():
        body = (vault.root / relpath).read_text(encoding="utf-8").split("\n---\n", 1)[-1]
        assert not [link for link in wikilinks(body) if "../" in link.target], relpath
    sessions = [p for p in vault.iter_note_paths() if p.startswith("sessions/")]
    assert r"# \[\[../../etc/passwd\]\]" in (vault.root / sessions[0]).read_text(encoding="utf-8")
    assert check(vault).dangling_links == []
    vault.close()


def test_heading_text_escapes_what_makes_a_link():
    assert heading_text(r"a [[b|c]] \ d") == r"a \[\[b|c\]\] \\ d"
    assert heading_text("Plain title") == "Plain title"
