"""The Note Quality Gate's meaning term: MiniLM vectors weighed by fitted weights, batched by keep."""

from __future__ import annotations

import math

import pytest

from vault_pipeline.ingest.keep import keep, quality_problems
from vault_pipeline.ingest.quality import (
    FEATURES,
    GATE,
    GateModel,
    dump_gate,
    fit,
    load_gate,
    meaning_vectors,
    sentence_problems,
)
from vault_pipeline.vault.files import Vault

CLEAN = dict.fromkeys(FEATURES, False)
GOOD = "We chose PostgreSQL over MySQL for the billing service."


def test_meaning_term_is_the_dot_product_and_needs_a_vector_of_its_size():
    model = GateModel({}, 0.0, 0.5, meaning=(1.0, -2.0, 0.5))
    assert model.meaning_term([0.2, 0.1, 0.4]) == pytest.approx(0.2)
    assert model.probability(CLEAN, vector=[0.2, 0.1, 0.4]) == pytest.approx(1 / (1 + math.exp(-0.2)))
    assert model.meaning_term(None) == 0.0  # no vector: the term weighs nothing
    assert GateModel({}, 0.0, 0.5).meaning_term([1.0, 1.0]) == 0.0  # no weights: likewise
    with pytest.raises(ValueError, match="2-dimensional vector for 3 meaning weights"):
        model.meaning_term([1.0, 1.0])


def test_a_note_refused_by_its_meaning_alone_says_so():
    against = GateModel(dict.fromkeys(FEATURES, -1.0), 0.0, 0.5, meaning=(-5.0, 0.0))
    assert against.reasons(CLEAN, vector=[1.0, 0.0]) == [
        "reads like the notes judged not worth keeping (filler, boilerplate, a quiz option)"
    ]
    assert against.reasons(CLEAN, vector=[-1.0, 0.0]) == []
    # A sign against the note is named first; the meaning adds no second, vaguer reason.
    assert against.reasons({**CLEAN, "no_verb": True}, vector=[1.0, 0.0]) == ["fragment, no verb"]


def test_the_fit_learns_meaning_weights_that_separate_the_labels(tmp_path):
    rows = [CLEAN] * 8
    vectors = [[1.0, 0.0]] * 4 + [[0.0, 1.0]] * 4
    labels = [True] * 4 + [False] * 4
    model = fit(rows, labels, vectors=vectors, l2=0.1)
    assert len(model.meaning) == 2 and model.meaning[0] > 0 > model.meaning[1]
    assert model.probability(CLEAN, vector=[1.0, 0.0]) > 0.5 > model.probability(CLEAN, vector=[0.0, 1.0])
    dump_gate(model, tmp_path / "gate.json", "test")
    assert load_gate(tmp_path / "gate.json") == model


def test_the_shipped_gate_reads_meaning_and_embeds_a_sentence_it_is_not_given():
    assert len(GATE.meaning) == 384  # MiniLM's dimension
    (vector,) = meaning_vectors([GOOD])
    assert sentence_problems(GOOD, "fact") == sentence_problems(GOOD, "fact", vector=vector)
    # The vector counts: held at 0, the same note scores differently.
    zero = [0.0] * len(GATE.meaning)
    assert GATE.probability(CLEAN, vector=zero) != GATE.probability(CLEAN, vector=vector)


def test_keep_batches_the_vectors_and_gives_each_note_its_own_verdict(tmp_path):
    from tests.ingest.test_keep import atomic  # an inbox note as ingest writes it

    vault = Vault.init(tmp_path / "vault")
    sentences = [GOOD, "Alpha is the first letter.", "Recurring terms here are django, docker and postgres."]
    notes = [atomic(s, category="fact") for s in sentences]
    for note in notes:
        assert vault.write(note).outcome == "created"
    report = keep(vault, all_passing=True, dry_run=True)
    refused = dict(report.refused)
    for note, sentence in zip(notes, sentences):
        frontmatter, body, _ = vault.read(note.relpath)
        one_by_one = quality_problems(frontmatter, body, set())
        assert refused.get(note.relpath, []) == one_by_one, sentence
    assert f"engrams/{notes[0].relpath.rsplit('/', 1)[-1]}" in report.kept
