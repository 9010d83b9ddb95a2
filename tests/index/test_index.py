"""The derived index: incremental sync, integrity repair, and the read lanes."""

from __future__ import annotations

import os
import sqlite3
import textwrap
from dataclasses import fields, replace
from pathlib import Path

import numpy as np
import pytest

from tests.support.fakes import HashEmbedder, note_text, write_file, write_note
from vault_pipeline.errors import IndexStateError, ModelError
from vault_pipeline.index import sync as index_mod
from vault_pipeline.index import table as index_table
from vault_pipeline.index.manifest import MANIFEST_FILE, Manifest
from vault_pipeline.index.search import Index, Row
from vault_pipeline.index.sync import sync, user_note_id
from vault_pipeline.index.table import EMPTY_VALUES, INDEX_DIR, ROW_COLUMNS, TABLE, connect, note_columns
from vault_pipeline.vault.files import STATE_DIR, Vault

# --------------------------------------------------------------------------- vault builders


def _atomic(note_id: str, sentence: str, *, status: str = "provisional", category: str = "fact", **frontmatter) -> str:
    """An atomic note's text, no tier of its own (its folder decides), citing the storage talk."""
    source = {"kind": "chatgpt", "conversation": "conv-1", "title": "Storage talk", "messages": ["m-1", "m-2"]}
    return note_text(
        note_id,
        f"{sentence}\n\nSource: [[2024-03-01 storage talk#^m-1]]\n",
        status=status,
        category=category,
        tier=None,
        source=source,
        created="2024-03-01T10:00:00",
        tags=["test"],
        **frontmatter,
    )


SESSION = textwrap.dedent("""\
    ---
    id: s-0001
    type: session
    status: kept
    source:
      kind: chatgpt
      conversation: conv-1
    created: 2024-03-01
    ---
    # Storage talk

    A conversation about where the vault keeps its derived index.

    ## Summary

    We compared LanceDB with a flat numpy file and chose LanceDB for full-text search.

    ## Risks

    Index corruption after a migration could weld identifiers to other rows.

    ### Mitigation

    An integrity check runs on every synchronisation of the index.
    """)

NOTES = {
    "inbox/lancedb.md": _atomic("n-0001", "We will store vectors in LanceDB on local disk."),
    "inbox/budget.md": _atomic("n-0002", "The query budget is fifty milliseconds at p50.", category="constraint"),
    "engrams/obsidian.md": _atomic("n-0003", "Obsidian is the editor for reviewing atomic notes.", status="kept"),
    "archive/old-store.md": _atomic(
        "n-0004", "We will store vectors in parquet files on disk.", status="archived", superseded_by="[[lancedb]]"
    ),
    "inbox/dup.md": _atomic("n-0005", "Pelicans migrate along the coast every spring.", duplicate_of="[[pelicans]]"),
    "sessions/2024-03-01 storage talk.md": SESSION,
    "resources/garden notes.md": "Japanese gardens use raked gravel to suggest water and emptiness.\n",
}


def _edit(path: Path, text: str) -> None:
    """Rewrite a file and move its mtime on, so even a coarse clock sees the change."""
    st = path.stat()
    path.write_text(text, encoding="utf-8")
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))


@pytest.fixture()
def vault(make_vault) -> Vault:
    return make_vault(notes=NOTES)


@pytest.fixture()
def embedder() -> HashEmbedder:
    return HashEmbedder(dim=64)


def _table(vault: Vault):
    return connect(vault.root / STATE_DIR / INDEX_DIR).open_table(TABLE)


def _all_rows(vault: Vault) -> list[dict]:
    return (
        _table(vault)
        .search()
        .select(["chunk_id", "note_id", "path", "tier", "status", "text"])
        .limit(None)
        .to_arrow()
        .sort_by("chunk_id")
        .to_pylist()
    )


def _clean(report) -> bool:
    return report.embedded_notes == 0 and report.repaired == 0 and not report.skipped and not report.rebuilt


# --------------------------------------------------------------------------- sync


def test_first_sync_indexes_every_note(vault, embedder):
    seen: list[tuple[int, int]] = []
    report = sync(vault, embedder, progress=lambda done, total: seen.append((done, total)))
    # Progress counts rows with their vectors ready, of an estimated total that is exact at the end.
    assert seen[-1] == (report.rows, report.rows) and [d for d, _ in seen] == sorted(d for d, _ in seen)
    assert report.scanned == report.added == len(NOTES) and report.embedded_notes == len(NOTES)
    assert not report.skipped and not report.rebuilt and report.repaired == 0
    rows = _all_rows(vault)
    assert len({r["path"] for r in rows}) == len(NOTES)
    assert report.rows == len(rows) == report.embedded_chunks
    assert report.embedder == "hash-64"


def test_second_sync_embeds_nothing_and_reads_no_file(vault, embedder):
    sync(vault, embedder)
    calls = len(embedder.calls)
    report = sync(vault, embedder)
    assert _clean(report) and report.unchanged == len(NOTES)
    assert len(embedder.calls) == calls
    assert report.integrity == "version"  # the table is as the last sync left it: no scan


def test_editing_one_note_reembeds_exactly_that_note(vault, embedder):
    sync(vault, embedder)
    _edit(
        vault.root / "inbox/budget.md",
        _atomic("n-0002", "The query budget is forty milliseconds at p50.", category="constraint"),
    )
    report = sync(vault, embedder)
    assert (report.changed, report.embedded_notes, report.embedded_chunks) == (1, 1, 1)
    assert report.unchanged == len(NOTES) - 1 and report.repaired == 0
    texts = [r["text"] for r in _all_rows(vault) if r["note_id"] == "n-0002"]
    assert texts == ["The query budget is forty milliseconds at p50.\n\nSource: [[2024-03-01 storage talk#^m-1]]"]


def test_frontmatter_only_edit_keeps_vectors(vault, embedder):
    sync(vault, embedder)
    _edit(
        vault.root / "inbox/lancedb.md",
        _atomic("n-0001", "We will store vectors in LanceDB on local disk.", status="kept"),
    )
    report = sync(vault, embedder)
    assert (report.changed, report.embedded_chunks, report.reused_chunks) == (1, 0, 1)
    assert [r["status"] for r in _all_rows(vault) if r["note_id"] == "n-0001"] == ["kept"]


def test_touched_but_identical_file_is_unchanged(vault, embedder):
    sync(vault, embedder)
    path = vault.root / "inbox/lancedb.md"
    _edit(path, path.read_text(encoding="utf-8"))
    report = sync(vault, embedder)
    assert _clean(report) and report.unchanged == len(NOTES)


def test_deleting_a_file_removes_its_rows(vault, embedder):
    sync(vault, embedder)
    (vault.root / "inbox/budget.md").unlink()
    report = sync(vault, embedder)
    assert report.removed == 1 and report.embedded_notes == 0
    assert not [r for r in _all_rows(vault) if r["note_id"] == "n-0002"]
    assert _clean(sync(vault, embedder))


def test_moving_a_file_keeps_one_copy_and_reembeds_nothing(vault, embedder):
    sync(vault, embedder)
    (vault.root / "inbox/lancedb.md").rename(vault.root / "engrams/lancedb.md")
    report = sync(vault, embedder)
    assert (report.moved, report.removed, report.embedded_chunks, report.reused_chunks) == (1, 0, 0, 1)
    rows = [r for r in _all_rows(vault) if r["note_id"] == "n-0001"]
    assert [(r["path"], r["tier"]) for r in rows] == [("engrams/lancedb.md", "engram")]
    assert _clean(sync(vault, embedder))


def test_moving_a_note_without_frontmatter_is_a_move_found_by_its_bytes(vault, embedder):
    sync(vault, embedder)
    (vault.root / "resources/garden notes.md").rename(vault.root / "web/garden notes.md")
    report = sync(vault, embedder)  # no id in it: the same bytes under a new path are the same note
    assert (report.added, report.removed, report.moved) == (0, 0, 1)
    paths = [r["path"] for r in _all_rows(vault) if r["note_id"].startswith("u-")]
    assert paths == ["web/garden notes.md"]


def test_broken_frontmatter_is_indexed_from_its_body_with_a_warning(vault, embedder):
    write_file(
        vault, "inbox/broken.md", "---\nid: n-9\ncategory: [unclosed\ntier: kept\n---\nThe heron nests by the mill.\n"
    )
    report = sync(vault, embedder)
    assert not report.skipped and [p for p, _ in report.warnings] == ["inbox/broken.md"]
    reason = report.warnings[0][1]
    assert (
        reason.startswith("frontmatter is not valid YAML") and "\n" not in reason and "indexed from its body" in reason
    )
    assert report.added == len(NOTES) + 1
    rows = [r for r in _all_rows(vault) if r["path"] == "inbox/broken.md"]
    assert rows and {r["note_id"] for r in rows} == {"n-9"}  # its id read from the lines that still parse
    assert any("heron nests" in r["text"] for r in rows)
    # Still broken next time: named again (the record keeps it), nothing embedded again.
    again = sync(vault, embedder)
    assert [p for p, _ in again.warnings] == ["inbox/broken.md"] and again.embedded_notes == 0
    _edit(vault.root / "inbox/broken.md", "---\nid: n-9\ntier: kept\n---\nThe heron nests by the mill.\n")
    assert sync(vault, embedder).warnings == []  # fixed: no warning left


def test_a_note_that_breaks_later_keeps_its_rows_from_its_body(vault, embedder):
    sync(vault, embedder)
    _edit(vault.root / "inbox/budget.md", "---\nid: n-0002\nstatus: [\n---\nBody.\n")
    report = sync(vault, embedder)
    assert [p for p, _ in report.warnings] == ["inbox/budget.md"] and report.removed == 0
    assert [r["note_id"] for r in _all_rows(vault) if r["path"] == "inbox/budget.md"] == ["n-0002"]


def test_duplicate_note_id_is_skipped_not_mixed(vault, embedder):
    write_file(vault, "inbox/zz-copy.md", NOTES["inbox/lancedb.md"])
    report = sync(vault, embedder)
    assert report.skipped == [("inbox/zz-copy.md", "id n-0001 is already used by inbox/lancedb.md")]
    assert [r["path"] for r in _all_rows(vault) if r["note_id"] == "n-0001"] == ["inbox/lancedb.md"]


def test_embedder_change_forces_a_clean_rebuild(vault, embedder):
    sync(vault, embedder)
    other = HashEmbedder(dim=32)
    report = sync(vault, other)
    assert report.rebuilt and report.rebuild_reason == "embedder changed: hash-64 -> hash-32"
    assert report.embedded_notes == len(NOTES) and report.added == len(NOTES)
    assert _table(vault).schema.field("vector").type.list_size == 32
    assert _clean(sync(vault, other))


def test_a_chunking_change_rechunks_every_note_and_keeps_unchanged_vectors(vault, embedder, monkeypatch):
    from vault_pipeline.index import chunk as chunking
    from vault_pipeline.index import sync as syncing

    transcript = "\n## Transcript\n\n**Ann:** We chose LanceDB. ^m-a-1\n\n**Bob:** For its full-text index. ^m-b-2\n"
    write_file(vault, "sessions/talk.md", SESSION.replace("id: s-0001", "id: s-0002") + transcript)
    # The index as the chunking before version 2 left it: a transcript was one section like any other.
    with monkeypatch.context() as old:
        old.setattr(chunking, "TRANSCRIPT_HEADING", "(none)")
        old.setattr(syncing, "CHUNKING_VERSION", 1)
        sync(vault, embedder)
    before = {r["chunk_id"] for r in _all_rows(vault)}
    report = sync(vault, embedder)
    assert report.rechunked == f"chunking changed: 1 -> {chunking.CHUNKING_VERSION}" and not report.rebuilt
    assert report.changed == len(NOTES) + 1 and report.embedded_notes == 1  # only the transcript's texts are new
    talk = sorted((r["chunk_id"], r["text"]) for r in _all_rows(vault) if r["path"] == "sessions/talk.md")
    assert [t.split("\n\n", 1)[1] for _, t in talk if "^m-" in t] == [
        "**Ann:** We chose LanceDB. ^m-a-1",
        "**Bob:** For its full-text index. ^m-b-2",
    ]
    assert {r["chunk_id"] for r in _all_rows(vault)} != before
    again = sync(vault, embedder)
    assert _clean(again) and not again.rechunked


def test_rebuild_on_request(vault, embedder):
    first = sync(vault, embedder)
    before = {r["chunk_id"]: r for r in _table(vault).search().limit(None).to_arrow().to_pylist()}
    embedder.calls.clear()
    report = sync(vault, embedder, rebuild=True)
    assert report.rebuilt and report.rebuild_reason == "requested" and report.rows == first.rows
    # Every vector comes from the embedding store: the rebuild embeds nothing, and its rows (checks
    # and vectors too) are the ones a fresh embedding wrote.
    assert embedder.calls == [] and report.embedded_chunks == 0 and report.cached_chunks == first.embedded_chunks
    after = {r["chunk_id"]: r for r in _table(vault).search().limit(None).to_arrow().to_pylist()}
    assert after == before


def test_rebuild_without_the_store_embeds_again(vault, embedder):
    first = sync(vault, embedder)
    (vault.root / STATE_DIR / "embeddings.sqlite").unlink()
    report = sync(vault, embedder, rebuild=True)
    assert report.embedded_chunks == first.embedded_chunks and report.cached_chunks == 0


@pytest.mark.parametrize("batch_notes", [1, 2, index_mod.BATCH_NOTES])
def test_each_distinct_text_is_embedded_once(vault, embedder, monkeypatch, batch_notes):
    # One note a batch: the twins are in neighbouring batches (the first still being embedded
    # while the second is prepared); two a batch: further apart (the first already stored).
    monkeypatch.setattr(index_mod, "BATCH_NOTES", batch_notes)
    write_file(vault, "inbox/lancedb-zz-twin.md", NOTES["inbox/lancedb.md"].replace("n-0001", "n-0102"))
    twin = NOTES["inbox/lancedb.md"].replace("n-0001", "n-0101")
    write_file(vault, "inbox/lancedb-twin.md", twin)
    report = sync(vault, embedder)
    sent = [t for call in embedder.calls for t in call]
    assert len(sent) == len(set(sent)) == report.embedded_chunks
    # A first index: a vector from the store is one this run embedded for an earlier batch.
    assert report.shared_chunks + report.cached_chunks >= 2
    assert report.rows == report.embedded_chunks + report.shared_chunks + report.cached_chunks
    rows = {
        r["chunk_id"]: r
        for r in _table(vault).search().select(["chunk_id", "vector"]).limit(None).to_arrow().to_pylist()
    }
    assert rows["n-0101:0"]["vector"] == rows["n-0001:0"]["vector"] == rows["n-0102:0"]["vector"]


def test_an_unreadable_store_is_left_alone_and_the_sync_embeds(vault, embedder):
    store = vault.root / STATE_DIR / "embeddings.sqlite"
    store.parent.mkdir(parents=True, exist_ok=True)
    store.write_bytes(b"this is not a sqlite database" * 100)
    report = sync(vault, embedder)
    assert report.store_error.startswith("embeddings.sqlite: ") and report.rows == report.embedded_chunks
    assert store.read_bytes() == b"this is not a sqlite database" * 100
    assert _clean(sync(vault, embedder))


def test_a_wrong_sized_stored_vector_is_embedded_again(vault, embedder):
    first = sync(vault, embedder)
    with sqlite3.connect(vault.root / STATE_DIR / "embeddings.sqlite") as db:
        db.execute("UPDATE vectors SET vector = ?", (b"\x00" * 12,))
    report = sync(vault, embedder, rebuild=True)
    assert report.cached_chunks == 0 and report.embedded_chunks == first.embedded_chunks
    assert _clean(sync(vault, embedder, verify=True))


def test_empty_note_and_user_note_ids(vault, embedder):
    write_file(vault, "inbox/empty.md", "---\nid: n-empty\ntype: atomic\n---\n")
    sync(vault, embedder)
    assert user_note_id("resources/garden notes.md").startswith("u-")
    rows = [r for r in _all_rows(vault) if r["path"] == "resources/garden notes.md"]
    assert [(r["note_id"], r["tier"]) for r in rows] == [(user_note_id("resources/garden notes.md"), "resource")]
    assert _clean(sync(vault, embedder))  # a note with no chunks is consistent with no rows


# --------------------------------------------------------------------------- integrity


def test_welded_note_id_is_repaired(vault, embedder):
    sync(vault, embedder)
    _table(vault).update(where="chunk_id = 'n-0001:0'", values={"note_id": "n-0003"})
    report = sync(vault, embedder)
    assert report.repaired == 1 and report.repairs[0][0] == "inbox/lancedb.md"
    assert report.embedded_notes == 1 and report.reused_chunks == 0  # a repair trusts no old vector
    assert [r["note_id"] for r in _all_rows(vault) if r["path"] == "inbox/lancedb.md"] == ["n-0001"]
    assert _clean(sync(vault, embedder))


def test_overwritten_text_is_caught_by_the_content_check(vault, embedder):
    sync(vault, embedder)
    _table(vault).update(where="chunk_id = 'n-0003:0'", values={"text": "Hubble's law and negative space."})
    report = sync(vault, embedder)
    assert report.integrity == "layout+content"  # the table moved behind the manifest's back
    assert report.repairs == [("engrams/obsidian.md", "row n-0003:0 content does not match its check")]
    assert "Obsidian" in next(r["text"] for r in _all_rows(vault) if r["note_id"] == "n-0003")


def test_swapped_vectors_are_caught(vault, embedder):
    sync(vault, embedder)
    table = _table(vault)
    one = table.search().where("chunk_id = 'n-0001:0'").to_arrow()["vector"].to_pylist()[0]
    table.update(where="chunk_id = 'n-0002:0'", values={"vector": one})
    report = sync(vault, embedder)
    assert [p for p, _ in report.repairs] == ["inbox/budget.md"]


def test_missing_manifest_row_is_repaired(vault, embedder):
    sync(vault, embedder)
    with sqlite3.connect(vault.root / STATE_DIR / MANIFEST_FILE) as db:
        db.execute("DELETE FROM indexed WHERE relpath = 'inbox/budget.md'")
    report = sync(vault, embedder)
    assert report.repairs == [("inbox/budget.md", "rows for a path the manifest does not know")]
    assert report.added == 0 and report.embedded_notes == 1
    assert len([r for r in _all_rows(vault) if r["note_id"] == "n-0002"]) == 1
    assert _clean(sync(vault, embedder))


def test_deleted_rows_and_orphan_rows_are_repaired(vault, embedder):
    sync(vault, embedder)
    table = _table(vault)
    table.delete("path = 'inbox/budget.md'")
    orphan = table.search().where("chunk_id = 'n-0003:0'").to_arrow()
    table.add(
        orphan.set_column(orphan.schema.get_field_index("path"), "path", [["nowhere/ghost.md"] * orphan.num_rows])
    )
    report = sync(vault, embedder)
    # The copy shares n-0003:0 with the real row: neither is trusted, both paths are redone.
    assert report.repairs == [
        ("engrams/obsidian.md", "duplicate chunk ids"),
        ("inbox/budget.md", "rows missing"),
        ("nowhere/ghost.md", "duplicate chunk ids"),
    ]
    assert not [r for r in _all_rows(vault) if r["path"] == "nowhere/ghost.md"]
    assert _clean(sync(vault, embedder))


def test_crash_between_rows_and_manifest_is_repaired(vault, embedder, monkeypatch):
    real_apply = Manifest.apply

    def crash(self, upserts=(), deletes=()):
        if upserts:
            raise KeyboardInterrupt("power cut")
        return real_apply(self, upserts, deletes)

    monkeypatch.setattr(Manifest, "apply", crash)
    with pytest.raises(KeyboardInterrupt):
        sync(vault, embedder)
    monkeypatch.setattr(Manifest, "apply", real_apply)
    report = sync(vault, embedder)
    # The rows were written but the manifest never vouched for them: all are redone.
    assert report.repaired == len(NOTES) and {p for p, _ in report.repairs} == set(NOTES)
    assert _clean(sync(vault, embedder))


def test_crash_mid_sync_resumes_where_it_stopped(vault, embedder, monkeypatch):
    monkeypatch.setattr(index_mod, "BATCH_NOTES", 2)
    calls = {"n": 0}
    real = embedder.embed

    def flaky(texts):
        calls["n"] += 1
        if calls["n"] == 2:
            raise ModelError("embed", "hash-64", "connection reset")
        return real(texts)

    embedder.embed = flaky
    with pytest.raises(ModelError):
        sync(vault, embedder)
    embedder.embed = real
    report = sync(vault, embedder)
    assert report.repaired == 0 and report.added == len(NOTES) - 2  # the first batch was kept
    assert _clean(sync(vault, embedder))


def test_verify_rehashes_every_file(vault, embedder):
    sync(vault, embedder)
    report = sync(vault, embedder, verify=True)
    assert report.integrity == "layout+content" and _clean(report) and report.unchanged == len(NOTES)


# --------------------------------------------------------------------------- reading


def test_empty_vault_indexes_and_answers_nothing(make_vault, embedder):
    vault = make_vault()
    report = sync(vault, embedder)
    assert (report.scanned, report.rows, report.embedded_notes) == (0, 0, 0)
    index = Index.open(vault, embedder)
    assert index.vector_search(embedder.embed(["anything"])[0], 5) == []
    assert index.text_search("anything", 5) == [] and index.rows(["n-1"]) == []
    assert index.all_vectors()[2].shape == (0, 64) and index.stats()["notes"] == 0


def test_open_without_an_index_says_what_to_run(make_vault):
    with pytest.raises(IndexStateError, match="run `vault index`"):
        Index.open(make_vault())


class _NoModel:
    name = "hash-64"
    dim = 64

    def embed(self, texts):
        raise AssertionError("Index.open must not call the model")


def test_open_does_not_load_the_model_and_checks_its_name(vault, embedder):
    sync(vault, embedder)
    Index.open(vault, _NoModel())
    with pytest.raises(IndexStateError, match="built with embedder hash-64"):
        Index.open(vault, HashEmbedder(dim=32))


def test_vector_search_finds_the_note_and_measures_exact_cosine(vault, embedder):
    sync(vault, embedder)
    index = Index.open(vault, embedder)
    query = embedder.embed(["Where do we store vectors? LanceDB on local disk"])[0]
    hits = index.vector_search(query, 3, with_vectors=True)
    assert hits[0].note_id == "n-0001" and hits[0].lane == "vector"
    for hit in hits:
        assert hit.similarity == pytest.approx(float(np.dot(hit.vector.astype(np.float64), query)), abs=1e-9)
    assert [h.similarity for h in hits] == sorted((h.similarity for h in hits), reverse=True)
    assert hits[0].source_messages == '["m-1", "m-2"]' and hits[0].messages == ("m-1", "m-2")
    assert hits[0].created == "2024-03-01T10:00:00" and hits[0].category == "fact"


def test_text_search_finds_the_note_and_fills_similarity_on_request(vault, embedder):
    sync(vault, embedder)
    index = Index.open(vault, embedder)
    hits = index.text_search("raked gravel", 5)
    assert [h.path for h in hits] == ["resources/garden notes.md"] and hits[0].lane == "text"
    assert np.isnan(hits[0].similarity) and hits[0].score > 0
    qvec = embedder.embed(["raked gravel"])[0]
    hit = index.text_search("raked gravel", 5, vector=qvec)[0]
    assert 0 < hit.similarity <= 1
    assert index.text_search("   ", 5) == [] and index.text_search("zzzqqq", 5) == []


def test_archived_superseded_and_duplicates_only_on_request(vault, embedder):
    sync(vault, embedder)
    index = Index.open(vault, embedder)
    query = embedder.embed(["store vectors in parquet files pelicans migrate"])[0]
    default = {h.note_id for h in index.vector_search(query, 20)}
    everything = {h.note_id for h in index.vector_search(query, 20, include_archived=True)}
    assert {"n-0004", "n-0005"}.isdisjoint(default) and {"n-0004", "n-0005"} <= everything
    assert not index.text_search("parquet", 5)
    assert [h.note_id for h in index.text_search("parquet", 5, include_archived=True)] == ["n-0004"]
    assert not index.text_search("pelicans", 5)
    assert [h.note_id for h in index.text_search("pelicans", 5, include_archived=True)] == ["n-0005"]


def test_read_conversations_gives_the_rows_and_the_superseded_messages_at_once(vault, embedder):
    sync(vault, embedder)
    index = Index.open(vault, embedder)
    links = {("conv-1", "m-1"): "[[lancedb]]", ("conv-1", "m-2"): "[[lancedb]]"}  # n-0004, archived
    assert index.superseded_messages(["conv-1", "conv-9"]) == links
    for archived, hidden in ((False, {"n-0004", "n-0005"}), (True, set())):
        rows, found = index.read_conversations(["conv-1", "conv-9"], include_archived=archived)
        assert found == links  # the superseded note is read whether or not its row is returned
        expected = {"n-0001", "n-0002", "n-0003", "n-0004", "n-0005", "s-0001"} - hidden
        assert {r.note_id for r in rows} == expected
        assert [r.chunk_id for r in rows] == sorted(r.chunk_id for r in rows)
        assert all(r.vector is not None for r in rows)
        assert [r.chunk_id for r in index.conversation_rows(["conv-1"], include_archived=archived)] == [
            r.chunk_id for r in rows
        ]
    assert index.read_conversations([]) == ([], {})


def test_rows_read_column_by_column_match_the_table(vault, embedder):
    """``Row``'s leading fields are the table's columns in order (rows are built positionally)."""
    sync(vault, embedder)
    stored = {r["chunk_id"]: r for r in _table(vault).search().limit(None).to_arrow().to_pylist()}
    rows = Index.open(vault, embedder).rows(sorted({r["note_id"] for r in stored.values()}))
    assert [f.name for f in fields(Row)][: len(ROW_COLUMNS)] == list(ROW_COLUMNS)
    assert len(rows) == len(stored)
    for row in rows:
        assert {name: getattr(row, name) for name in ROW_COLUMNS} == {n: stored[row.chunk_id][n] for n in ROW_COLUMNS}


def test_vector_search_many_equals_one_search_per_vector(vault, embedder):
    sync(vault, embedder)
    index = Index.open(vault, embedder)
    queries = embedder.embed(
        ["Where do we store vectors?", "raked gravel garden", "pelicans migrate", "store vectors in parquet files"]
    )
    for archived in (False, True):
        many = index.vector_search_many(queries, 3, include_archived=archived)
        single = [index.vector_search(q, 3, include_archived=archived) for q in queries]
        assert [[(h.chunk_id, h.similarity) for h in hits] for hits in many] == [
            [(h.chunk_id, h.similarity) for h in hits] for hits in single
        ]
    assert len(many) == 4 and all(len(hits) == 3 for hits in many)


def _as_tuples(hits) -> list[tuple]:
    """Every field of each hit, NaN as None and the vector as bytes (Row equality skips the vector)."""
    out = []
    for h in hits:
        fields = {k: (None if isinstance(v, float) and np.isnan(v) else v) for k, v in vars(h).items() if k != "vector"}
        out.append((tuple(sorted(fields.items())), None if h.vector is None else h.vector.tobytes()))
    return out


HYBRID_QUERIES = ["Where do we store vectors?", "raked gravel garden", "   ", "store vectors in parquet files"]


def test_two_phase_lanes_return_what_one_phase_reads(vault, embedder):
    # The lanes search slim rows, then take the top k's columns; the one-phase reads are the reference.
    sync(vault, embedder)
    index = Index.open(vault, embedder)
    qvecs = embedder.embed(HYBRID_QUERIES)
    for archived in (False, True):
        for with_vectors in (True, False):
            many = index.vector_search_many(qvecs, 4, include_archived=archived, with_vectors=with_vectors)
            alone = [index._vector_full(index._query_vector(q), 4, archived, with_vectors) for q in qvecs]
            assert [_as_tuples(h) for h in many] == [_as_tuples(h) for h in alone]
            for text, qvec in zip(HYBRID_QUERIES, (None, qvecs[1], None, None)):
                got = index.text_search(text, 4, include_archived=archived, vector=qvec, with_vectors=with_vectors)
                q = None if qvec is None else index._query_vector(qvec)
                want = index._text_full(text, 4, archived, q, with_vectors) if text.strip() else []
                assert _as_tuples(got) == _as_tuples(want)
    assert any(len(h) == 4 for h in many) and all(h.vector is None for hits in many for h in hits)


def test_hybrid_search_equals_each_lane_alone(vault, embedder):
    sync(vault, embedder)
    index = Index.open(vault, embedder)
    vectors = embedder.embed(HYBRID_QUERIES)
    for archived in (False, True):
        nearest, found = index.hybrid_search(HYBRID_QUERIES, vectors, 3, include_archived=archived)
        assert [_as_tuples(h) for h in nearest] == [
            _as_tuples(h) for h in index.vector_search_many(vectors, 3, include_archived=archived)
        ]
        assert [_as_tuples(h) for h in found] == [
            _as_tuples(index.text_search(t, 3, include_archived=archived)) for t in HYBRID_QUERIES
        ]
    assert found[2] == [] and all(nearest) and any(found)
    assert index.hybrid_search(HYBRID_QUERIES[:2], vectors[:2], 0) == ([[], []], [[], []])
    assert index.hybrid_search([], np.zeros((0, embedder.dim)), 3) == ([], [])
    with pytest.raises(IndexStateError, match="1 vectors for 2 texts"):
        index.hybrid_search(HYBRID_QUERIES[:2], vectors[:1], 3)


def test_started_lanes_search_full_text_while_the_caller_embeds(vault, embedder):
    """``start_search`` starts the full-text lane; ``finish`` takes the vectors (the funnel embeds
    in between); a search given up on cancels what is still queued."""
    sync(vault, embedder)
    index = Index.open(vault, embedder)
    pending = index.start_search(HYBRID_QUERIES, 3)
    assert [p is None for p in pending.pending] == [False, False, True, False]  # no search for blank text
    vectors = embedder.embed(HYBRID_QUERIES)
    both = [[_as_tuples(h) for h in lane] for lane in pending.finish(vectors)]
    assert both == [[_as_tuples(h) for h in lane] for lane in index.hybrid_search(HYBRID_QUERIES, vectors, 3)]
    given_up = index.start_search(HYBRID_QUERIES, 3)
    given_up.cancel()
    # None is left queued: each search was cancelled, or had begun (it may still be running on a
    # loaded machine, so "done" alone would make the test depend on the machine's speed).
    assert all(p is None or p.cancelled() or p.running() or p.done() for p in given_up.pending)
    with pytest.raises(IndexStateError):  # a vector short: the queued searches are cancelled, the error raised
        index.start_search(HYBRID_QUERIES, 3).finish(vectors[:1])


def test_an_index_opened_with_columns_reads_only_those(vault, embedder):
    """Each read of rows carries the reader's columns and those the read itself needs (chunk ids
    always; a session read its links and activity; a lookup by note its order); every other field
    holds its type's empty value."""
    sync(vault, embedder)
    qvecs = embedder.embed(HYBRID_QUERIES)

    def reads(index: Index) -> dict[tuple[str, ...], list[Row]]:
        query = index._query_vector(qvecs[0])
        lanes = [h for lists in index.hybrid_search(HYBRID_QUERIES, qvecs, 3) for hits in lists for h in hits]
        lanes += index.text_search("vectors", 3, vector=qvecs[0]) + index.rows_by_stem(["lancedb", "budget"])
        lanes += index._vector_full(query, 3, False, True) + index._text_full("vectors", 3, False, None, True)
        return {
            (): lanes,
            ("source_conversation", "source_messages", "superseded_by", "active"): index.read_conversations(
                ["conv-1"], include_archived=True
            )[0],
            ("note_id", "ordinal"): index.rows(["n-0002", "s-0001"]),
        }

    slim = reads(Index.open(vault, embedder, columns=("text", "created")))
    for (needed, want), got in zip(reads(Index.open(vault, embedder)).items(), slim.values()):
        empty = {n: EMPTY_VALUES[n] for n in ROW_COLUMNS if n not in {"chunk_id", "text", "created", *needed}}
        assert want and _as_tuples(got) == _as_tuples([replace(r, **empty) for r in want])
    with pytest.raises(ValueError, match="no such index columns: colour"):
        Index.open(vault, embedder, columns=("text", "colour"))


class _LosingTable:
    """The real table, except that a take by row id loses the first row (as after a compaction)."""

    def __init__(self, table):
        self._table = table
        self.takes = 0

    def __getattr__(self, name):
        return getattr(self._table, name)

    def take_row_ids(self, ids):
        self.takes += 1
        return self._table.take_row_ids(list(ids)[1:])


def test_two_phase_reads_again_in_one_phase_when_the_take_misses_rows(vault, embedder):
    sync(vault, embedder)
    index = Index.open(vault, embedder)
    qvecs = embedder.embed(HYBRID_QUERIES)
    want_vector = [_as_tuples(h) for h in index.vector_search_many(qvecs, 3)]
    want_text = _as_tuples(index.text_search("vectors", 3))
    want_hybrid = index.hybrid_search(HYBRID_QUERIES, qvecs, 3)
    index.table = losing = _LosingTable(index.table)
    assert [_as_tuples(h) for h in index.vector_search_many(qvecs, 3)] == want_vector
    assert _as_tuples(index.text_search("vectors", 3)) == want_text
    nearest, found = index.hybrid_search(HYBRID_QUERIES, qvecs, 3)
    assert [_as_tuples(h) for h in nearest + found] == [_as_tuples(h) for h in want_hybrid[0] + want_hybrid[1]]
    assert losing.takes == 3 and want_text


def test_open_takes_the_vault_or_its_root_path(vault, embedder):
    sync(vault, embedder)
    for root in (vault, vault.root, str(vault.root)):
        assert Index.open(root, embedder).root == Path(vault.root)


def test_ties_are_ordered_by_chunk_id_and_repeatable(make_vault, embedder):
    vault = make_vault(
        notes={
            f"inbox/same-{i:02d}.md": _atomic(f"n-{29 - i:04d}", "Identical sentence about tides.") for i in range(30)
        }
    )
    sync(vault, embedder)
    index = Index.open(vault, embedder)
    query = embedder.embed(["Identical sentence about tides."])[0]
    first = [h.chunk_id for h in index.vector_search(query, 5)]
    assert first == [f"n-{i:04d}:0" for i in range(5)]
    assert all([h.chunk_id for h in index.vector_search(query, 5)] == first for _ in range(3))
    assert [h.chunk_id for h in index.text_search("tides", 5)] == first
    # Ties across the page edge of a shared query fall back to the careful single search.
    many = index.vector_search_many(np.stack([query, query]), 5)
    assert [[h.chunk_id for h in hits] for hits in many] == [first, first]


def test_long_session_note_yields_heading_chunks(vault, embedder):
    sync(vault, embedder)
    rows = Index.open(vault).rows(["s-0001"])
    assert [r.chunk_id for r in rows] == [f"s-0001:{i}" for i in range(len(rows))] and len(rows) == 4
    assert [r.heading for r in rows] == [
        "Storage talk",
        "Storage talk > Summary",
        "Storage talk > Risks",
        "Storage talk > Risks > Mitigation",
    ]
    assert rows[3].text.startswith("Storage talk > Risks > Mitigation") and rows[3].level == 3
    assert all(r.type == "session" and r.lane == "lookup" for r in rows)


def test_rows_all_vectors_and_stats(vault, embedder):
    sync(vault, embedder)
    index = Index.open(vault)
    assert [r.note_id for r in index.rows(["n-0003", "n-0001", "n-0003"])] == ["n-0003", "n-0001"]
    ids, paths, vectors = index.all_vectors()
    assert ids == ["n-0001", "n-0002", "n-0003"] and vectors.shape == (3, 64)
    assert paths == ["inbox/lancedb.md", "inbox/budget.md", "engrams/obsidian.md"]
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert index.all_vectors(include_archived=True)[0] == ["n-0001", "n-0002", "n-0003", "n-0004", "n-0005"]
    stats = index.stats()
    assert stats["notes"] == len(NOTES) and stats["files"] == len(NOTES) and stats["rows"] == len(NOTES) + 3
    assert stats["tiers"]["resource"] == 1 and sum(stats["tiers"].values()) == len(NOTES)
    assert stats["statuses"]["archived"] == 1 and stats["inactive_notes"] == 2
    assert stats["embedder"] == "hash-64" and stats["fts_index"] and not stats["ann_index"] and stats["last_sync"]
    # Both lanes prefilter on ``active``: a bitmap index answers it without reading every row.
    assert ("Bitmap", ["active"]) in [(i.index_type, i.columns) for i in index.table.list_indices()]


def test_reader_sees_the_next_sync(vault, embedder):
    sync(vault, embedder)
    index = Index.open(vault, embedder)
    write_file(vault, "inbox/new.md", _atomic("n-0100", "Freshly written notes are retrievable at once."))
    sync(vault, embedder)
    assert [h.note_id for h in index.text_search("freshly retrievable", 3)] == ["n-0100"]


def test_concurrent_readers_during_a_sync(vault, embedder):
    from concurrent.futures import ThreadPoolExecutor

    sync(vault, embedder)
    index = Index.open(vault, embedder)
    query = embedder.embed(["store vectors"])[0]
    before = len(index.text_search("vectors", 5))  # fewer than 5 notes say "vectors" before the sync
    for i in range(20):
        write_file(vault, f"inbox/more-{i}.md", _atomic(f"n-{200 + i}", f"More vectors to store, batch {i}."))
    with ThreadPoolExecutor(max_workers=4) as pool:
        reads = [pool.submit(index.vector_search, query, 5) for _ in range(20)]
        texts = [pool.submit(index.text_search, "vectors", 5) for _ in range(20)]
        report = sync(vault, embedder)
        # Each read sees one committed version, the one before the sync or the one after it (which
        # one depends on the threads' timing), never a half-written table or an error.
        assert all(len(f.result()) == 5 for f in reads)
        assert {len(f.result()) for f in texts} <= {before, 5}
    assert report.added == 20 and len(index.text_search("vectors", 5)) == 5


def test_note_columns_read_flat_and_nested_source():
    cols = note_columns(
        {
            "id": "x",
            "status": "kept",
            "source_kind": "claude",
            "source": {"conversation": "c9", "messages": ["a"]},
            "superseded_by": ["[[y]]"],
        },
        "engrams/x.md",
    )
    assert (cols["source_kind"], cols["source_conversation"], cols["source_messages"]) == ("claude", "c9", '["a"]')
    assert cols["superseded_by"] == "[[y]]" and cols["active"] is False
    assert note_columns({}, "archive/x.md")["status"] == "archived"
    assert note_columns({"status": "kept"}, "archive/x.md")["active"] is False
    assert note_columns({"created": 0}, "inbox/x.md")["created"] == "1970-01-01T00:00:00+00:00"


@pytest.mark.slow
def test_minilm_end_to_end(make_vault):
    from vault_pipeline.models.embed import build_embedder

    sentences = [
        "We will store vectors in LanceDB on local disk.",
        "The budget for a query is fifty milliseconds.",
        "Pelicans migrate along the coast every spring.",
        "Obsidian is where notes are reviewed.",
        "Japanese gardens use raked gravel to suggest water.",
        "The fit gate fails open on model errors.",
        "Duplicates are archived, never deleted.",
        "Tea is best brewed at eighty degrees.",
        "The nightly sweep links related notes.",
        "Context packages cite every block.",
    ]
    vault = make_vault(
        notes={f"inbox/n{i}.md": _atomic(f"n-{i:04d}", sentence) for i, sentence in enumerate(sentences)}
    )
    model = build_embedder("minilm")
    report = sync(vault, model)
    assert report.embedded_notes == 10 and report.embedder == "minilm-l6-v2-int8-128"
    index = Index.open(vault, model)
    query = model.embed(["which birds fly along the shore?"])[0]
    assert index.vector_search(query, 1)[0].note_id == "n-0002"
    assert index.text_search("gravel garden", 1, vector=query)[0].note_id == "n-0004"


# --------------------------------------------------------------------------- upkeep


def test_small_syncs_defer_optimize_and_verify_forces_it(vault, embedder):
    assert sync(vault, embedder).optimized  # the first build compacts and indexes
    _edit(vault.root / "inbox/budget.md", _atomic("n-0002", "The budget moved.", category="constraint"))
    edit = sync(vault, embedder)
    assert edit.changed == 1 and not edit.optimized  # new rows are searched flat meanwhile
    assert [h.note_id for h in Index.open(vault).text_search("budget moved", 1)] == ["n-0002"]
    assert sync(vault, embedder, verify=True).optimized


def test_large_table_gets_an_ann_index_and_stays_exact_enough(make_vault, embedder, monkeypatch):
    monkeypatch.setattr(index_table, "ANN_MIN_ROWS", 100)
    words = ["tide", "gravel", "budget", "vector", "archive", "pelican", "garden", "query", "lance", "note"]
    sentences = [" ".join(words[(i * k) % 10] for k in (1, 3, 7)) + f" number {i}." for i in range(400)]
    vault = make_vault(
        notes={f"inbox/{i:03d}.md": _atomic(f"n-{i:04d}", sentence) for i, sentence in enumerate(sentences)}
    )
    report = sync(vault, embedder)
    index = Index.open(vault, embedder)
    assert report.ann_index_built and index.stats()["ann_index"]
    ids, _, vectors = index.all_vectors()
    for probe in ("pelican garden budget number 123.", "tide vector", "archive lance note 7"):
        query = embedder.embed([probe])[0]
        exact = sorted(zip(-(vectors.astype(np.float64) @ query), ids))[:5]
        hits = index.vector_search(query, 5)
        assert [h.note_id for h in hits] == [nid for _, nid in exact]
        assert [h.similarity for h in hits] == pytest.approx([-s for s, _ in exact], abs=1e-9)
    assert not sync(vault, embedder).ann_index_built  # built once, retrained only when the table doubles
    # ... or after an optimize (LanceDB's leaves the index with 8 partitions); --verify forces one.
    write_file(vault, "inbox/000.md", _atomic("n-0000", "A changed sentence about tides."))
    report = sync(vault, embedder, verify=True)
    assert report.optimized and report.ann_index_built


def test_related_stems_reads_the_links_the_clean_wrote(make_vault, embedder):
    vault = make_vault()
    write_note(
        vault,
        "engrams/paper.md",
        "e-paper",
        "Our paper goes to review.",
        related=["[[refs]]", "[[inbox/plan|the plan]]"],
    )
    write_note(vault, "engrams/refs.md", "e-refs", "Zotero holds our citations.")
    write_note(vault, "engrams/broken.md", "e-broken", "Body.")
    (vault.root / "engrams/broken.md").write_text("---\nrelated: [unclosed\n", encoding="utf-8")
    sync(vault, embedder)
    index = Index.open(vault, embedder)
    paths = ["engrams/paper.md", "engrams/refs.md", "engrams/broken.md", "engrams/gone.md", "../outside.md"]
    # Links as stems; a note without links, a broken one, a missing one or a path out of the vault: none.
    assert index.related_stems(paths) == {"engrams/paper.md": ["refs", "plan"]}


def test_a_notes_place_in_its_message_is_indexed(tmp_path, embedder):
    vault = Vault.init(tmp_path / "v")
    write_note(vault, "inbox/step.md", "a-step", "Export the photo as PNG.\n", source_position=3)
    write_note(vault, "inbox/plain.md", "a-plain", "Blur hides a face.\n")
    write_note(vault, "inbox/odd.md", "a-odd", "A user typed a word here.\n", source_position="third")
    sync(vault, embedder)
    rows = {r.note_id: r for r in Index.open(vault).rows_by_stem(["step", "plain", "odd"])}
    assert {n: r.source_position for n, r in rows.items()} == {"a-step": 3, "a-plain": 0, "a-odd": 0}


def test_an_index_built_before_a_column_existed_still_answers(tmp_path, embedder):
    vault = Vault.init(tmp_path / "v")
    write_note(vault, "inbox/step.md", "a-step", "Export the photo as PNG.\n", source_position=3)
    sync(vault, embedder)
    _table(vault).drop_columns(["source_position"])  # the table as schema version 1 wrote it
    (row,) = Index.open(vault).rows_by_stem(["step"])
    assert row.note_id == "a-step" and row.source_position == 0
    (hit,) = Index.open(vault).vector_search(embedder.embed(["Export the photo as PNG."])[0], 1)
    assert hit.note_id == "a-step" and hit.source_position == 0


def _size(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())


@pytest.mark.parametrize("grace_days", [0, 7])
def test_old_versions_are_compacted_so_the_index_stays_near_its_fresh_size(
    make_vault, embedder, monkeypatch, grace_days
):
    """Edits and re-syncs leave old table versions behind; optimize removes those past the grace,
    so a much-edited index stays within 1.5x a fresh index of the same notes. LanceDB's own
    seven days (``grace_days=7``) let it grow past that: the bound is the cleanup's doing."""
    from datetime import timedelta

    monkeypatch.setattr(index_table, "VERSION_GRACE", timedelta(days=grace_days))
    notes = {
        f"inbox/n{i:03d}.md": _atomic(f"n-{i:04d}", f"Fact number {i} about the storage layer.") for i in range(60)
    }
    edited = make_vault(notes=notes)
    for round_ in range(6):
        for i in range(60):
            _edit(edited.root / f"inbox/n{i:03d}.md", _atomic(f"n-{i:04d}", f"Fact {i} revised in round {round_}."))
        assert sync(edited, embedder, verify=True).optimized  # a verify always folds its writes in
    fresh = make_vault("fresh", notes={p: (edited.root / p).read_text(encoding="utf-8") for p in notes})
    sync(fresh, embedder)
    ratio = _size(edited.root / STATE_DIR / INDEX_DIR) / _size(fresh.root / STATE_DIR / INDEX_DIR)
    assert (ratio <= 1.5) == (grace_days == 0), ratio
