"""The index's statement rows: every candidate sentence of a session's transcript gets a row of its own,
owned by the session note, citing its message, never counted as a note."""

from __future__ import annotations

import json

from tests.support.fakes import HashEmbedder, locomo_conversation, write_file
from vault_pipeline.index.search import Index
from vault_pipeline.index.statements import statement_chunks
from vault_pipeline.index.sync import sync
from vault_pipeline.index.table import INDEX_DIR, TABLE, connect
from vault_pipeline.ingest.notes import block_id, session_note
from vault_pipeline.vault.files import STATE_DIR

TURNS = [
    ("Ada", "D1:1", "I finally finished the ceramics course at the community studio."),
    ("Ben", "D1:2", "Nice! Did the glazes come out the way you hoped?"),
    ("Ada", "D1:3", "Mostly. The blue one cracked in the kiln. My manager approved the transfer to Lisbon."),
]


def _session(tmp_path):
    conv = locomo_conversation(tmp_path, TURNS, "conv-s")
    return conv, session_note(conv, "Ada and Ben talked.")


def test_each_statement_of_a_turn_is_a_row_citing_its_message(tmp_path):
    conv, note = _session(tmp_path)
    chunks = statement_chunks(note.id, note.relpath, note.frontmatter, note.body, 3)
    texts = [c.text.split("\n")[0] for c in chunks]
    assert any("Lisbon" in t for t in texts) and any("ceramics course" in t for t in texts)
    assert not any("Lisbon" in t and "kiln" in t for t in texts)  # one sentence per row, not the whole turn
    assert [c.ordinal for c in chunks] == list(range(3, 3 + len(chunks)))
    lisbon = next(c for c in chunks if "Lisbon" in c.text)
    (message,) = json.loads(lisbon.columns["source_messages"])
    assert message == conv.messages[2].id
    assert f"#^{block_id(message)}]]" in lisbon.text and lisbon.columns["type"] == "atomic"
    assert "Context: Ada" in lisbon.text  # the speaker's name, since the sentence says "my"


def test_only_session_notes_have_statement_rows(tmp_path):
    _, note = _session(tmp_path)
    atomic = {**note.frontmatter, "type": "atomic"}
    assert statement_chunks(note.id, note.relpath, atomic, note.body, 1) == []


def test_statement_rows_belong_to_the_session_and_are_not_notes(make_vault, tmp_path):
    _, note = _session(tmp_path)
    vault = make_vault(notes={})
    write_file(vault, note.relpath, note.text())
    report = sync(vault, HashEmbedder(dim=64))
    rows = (
        connect(vault.root / STATE_DIR / INDEX_DIR)
        .open_table(TABLE)
        .search()
        .select(["note_id", "path", "ordinal", "type", "text"])
        .limit(None)
        .to_arrow()
        .to_pylist()
    )
    statements = [r for r in rows if r["type"] == "atomic"]
    assert statements and report.rows == len(rows)
    assert {(r["note_id"], r["path"]) for r in statements} == {(note.id, note.relpath)}
    assert min(r["ordinal"] for r in statements) > max(r["ordinal"] for r in rows if r["type"] != "atomic")
    stats = Index.open(vault).stats()
    assert stats["notes"] == 1 and stats["rows"] == len(rows)
