"""The index embeds each row's text without its machine ids (``vault.format.embedding_text``): what
it sends to the embedder, what it keeps, how an index embedded the older way is embedded again,
and that every side comparing a row's vector (the judge, the gate's signals) agrees with the lane."""

from __future__ import annotations

import math
import sqlite3
from dataclasses import replace

import numpy as np
import pytest

from tests.index.test_index import NOTES, SESSION
from tests.support.fakes import HashEmbedder, write_file
from vault_pipeline import pipeline
from vault_pipeline.errors import IndexOutdatedError, IndexStateError
from vault_pipeline.index.chunk import Chunk
from vault_pipeline.index.damage import DAMAGED_PREFIX
from vault_pipeline.index.manifest import MANIFEST_FILE
from vault_pipeline.index.search import Index
from vault_pipeline.index.sync import sync
from vault_pipeline.index.table import EMBEDDING_TEXT_KEY, INDEX_DIR, TABLE, connect
from vault_pipeline.retrieve.judge import with_original_similarity
from vault_pipeline.retrieve.signals import gate_signals
from vault_pipeline.retrieve.types import Candidate
from vault_pipeline.vault.files import STATE_DIR, Vault
from vault_pipeline.vault.format import EMBEDDING_TEXT_VERSION, embedding_text

TRANSCRIPT = (
    "\n## Transcript\n\n**Ann:** We chose LanceDB for its full-text index. ^m-a-1\n\nNotes: [[lancedb]]\n\n"
    "**Bob:** The integrity check runs on every synchronisation. ^m-b-2\n"
)


@pytest.fixture()
def vault(make_vault) -> Vault:
    made = make_vault(notes=NOTES)
    write_file(made, "sessions/talk.md", SESSION.replace("id: s-0001", "id: s-0002") + TRANSCRIPT)
    return made


@pytest.fixture()
def embedder() -> HashEmbedder:
    return HashEmbedder(dim=64)


def _rows(vault: Vault) -> list[dict]:
    table = connect(vault.root / STATE_DIR / INDEX_DIR).open_table(TABLE)
    return table.search().select(["chunk_id", "text", "vector"]).limit(None).to_arrow().to_pylist()


def _old_build_index(vault: Vault, embedder: HashEmbedder, monkeypatch) -> None:
    """The index as a build before the embedding text left it: every row's whole text embedded, and
    no embedding-text version in the manifest."""
    with monkeypatch.context() as old:
        old.setattr(Chunk, "embedded_text", property(lambda chunk: chunk.text))
        sync(vault, embedder)
    with sqlite3.connect(vault.root / STATE_DIR / MANIFEST_FILE) as db:
        db.execute("DELETE FROM meta WHERE key = ?", (EMBEDDING_TEXT_KEY,))


def _vectors_are_of_the_embedding_text(vault: Vault, embedder: HashEmbedder) -> bool:
    rows = _rows(vault)
    fresh = embedder.embed([embedding_text(r["text"]) for r in rows])
    return bool(np.allclose(np.asarray([r["vector"] for r in rows], np.float32), fresh, atol=1e-6))


def test_the_index_sends_no_id_to_the_embedder_and_keeps_each_rows_text(vault, embedder):
    sync(vault, embedder)
    sent = [text for call in embedder.calls for text in call]
    assert sent and not any("^m-" in t or "Source:" in t or "Notes:" in t for t in sent)
    texts = [r["text"] for r in _rows(vault)]
    # What a package prints is the row's text as the note holds it, ids and all.
    assert any(t.endswith("Source: [[2024-03-01 storage talk#^m-1]]") for t in texts)
    assert any(t.endswith("full-text index. ^m-a-1") for t in texts)
    assert _vectors_are_of_the_embedding_text(vault, embedder)


def test_an_index_embedded_by_an_older_build_is_embedded_again_once(vault, embedder, monkeypatch):
    _old_build_index(vault, embedder, monkeypatch)
    assert not _vectors_are_of_the_embedding_text(vault, embedder)  # the old vectors are of other texts
    embedder.calls.clear()
    report = sync(vault, embedder)
    assert report.rebuilt and f"embedding text 1 -> {EMBEDDING_TEXT_VERSION}" in report.rebuild_reason
    # Only texts that held ids are embedded again; a text without any is its own embedding text,
    # so the store's vector of it is still the right one.
    again = {t for call in embedder.calls for t in call}
    texts = [r["text"] for r in _rows(vault)]
    assert again and again <= {embedding_text(t) for t in texts if embedding_text(t) != t}
    assert report.embedded_chunks == len(again) and report.cached_chunks > 0
    assert _vectors_are_of_the_embedding_text(vault, embedder)
    following = sync(vault, embedder)
    assert not following.rebuilt and following.embedded_chunks == 0


def test_a_reader_refuses_old_vectors_and_its_repair_embeds_again_in_place(vault, embedder, monkeypatch):
    _old_build_index(vault, embedder, monkeypatch)
    with pytest.raises(IndexOutdatedError, match=f"embedding text 1 -> {EMBEDDING_TEXT_VERSION}"):
        Index.open(vault, embedder)
    Index.open(vault).stats()  # a reader that compares no vector (status) still reads it
    told = []
    found = pipeline.search(vault, "LanceDB full-text index", embedder=embedder, floor=0.0, on_repair=told.append)
    assert found and len(told) == 1 and told[0].rebuilt
    assert "without them" in told[0].rebuild_reason and told[0].damaged_copy == ""
    assert not [p for p in (vault.root / STATE_DIR).iterdir() if p.name.startswith(DAMAGED_PREFIX)]
    assert _vectors_are_of_the_embedding_text(vault, embedder)
    Index.open(vault, embedder)


def test_the_judges_cosine_is_the_one_the_vector_lane_reports(vault, embedder):
    sync(vault, embedder)
    query = "We chose LanceDB for its full-text index"
    qvec = embedder.embed([query])[0]
    hits = Index.open(vault, embedder).vector_search(qvec, 50)
    assert any(embedding_text(h.text) != h.text for h in hits)  # rows with ids are among them
    # A candidate found by full text only carries no vector: the judge embeds its row's text.
    bare = [Candidate(replace(h, vector=None), 0.0, ("text",), (), math.nan) for h in hits]
    judged = with_original_similarity(bare, qvec, embedder)
    assert [c.similarity for c in judged] == pytest.approx([h.similarity for h in hits], abs=1e-5)


def test_the_gates_signals_are_the_same_with_or_without_the_stored_vectors(vault, embedder):
    sync(vault, embedder)
    query = "Why did we choose LanceDB?"
    hits = Index.open(vault, embedder).vector_search(embedder.embed([query])[0], 20)
    rows = [(h.chunk_id, h.path, h.heading or "", h.text) for h in hits]

    def signals(vectors):
        return gate_signals(rows, query=query, intent="storage", embedder=embedder, variants=[], vectors=vectors)

    stored = signals({h.chunk_id: h.vector for h in hits})
    embedded = signals({})
    for chunk_id, values in stored.items():
        assert values == pytest.approx(embedded[chunk_id], abs=1e-5), chunk_id


def _named(name: str) -> HashEmbedder:
    made = HashEmbedder(dim=64)
    made.name = name
    return made


def test_an_index_of_minilm_reading_256_tokens_is_embedded_again_in_place(vault):
    sync(vault, _named("minilm-l6-v2-int8"))  # the name every index before the 128-token cut holds
    now = _named("minilm-l6-v2-int8-128")
    with pytest.raises(IndexOutdatedError, match="read up to 256 tokens of a row; this build's MiniLM reads 128"):
        Index.open(vault, now)
    told = []
    found = pipeline.search(vault, "LanceDB full-text index", embedder=now, floor=0.0, on_repair=told.append)
    assert found and len(told) == 1 and told[0].rebuilt and "reads 128" in told[0].rebuild_reason
    assert told[0].damaged_copy == "" and told[0].embedded_chunks > 0  # no vector of the other cut is kept
    Index.open(vault, now)
    assert not sync(vault, now).rebuilt


def test_an_index_of_another_embedder_is_still_refused_not_rebuilt_by_a_reader(vault):
    sync(vault, _named("minilm-l6-v2-int8"))
    with pytest.raises(IndexStateError, match="run `vault index` to rebuild it"):
        Index.open(vault, _named("text-embedding-3-small"))
