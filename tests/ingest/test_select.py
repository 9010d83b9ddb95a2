"""The selector: which candidate statements become notes, and which notes keep promotes."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from tests.support.fakes import EVERY_CANDIDATE
from tests.support.paths import REPO, shared_data
from vault_pipeline import pipeline
from vault_pipeline.ingest import select
from vault_pipeline.ingest.keep import SourceTexts, keep_scores
from vault_pipeline.ingest.parse import Conversation, Message
from vault_pipeline.ingest.select import (
    SELECTOR_FILE,
    Candidate,
    Selector,
    dump_selector,
    load_selector,
    score,
    select_units,
    shipped,
    signs,
)
from vault_pipeline.models.offline import OfflineBackend
from vault_pipeline.vault.files import Vault

SOURCE = "Enkele populaire extensies zijn:\n\n1. Pydantic: Dit is een bibliotheek voor het valideren van data.\n"


def candidate(sentence: str, **kw) -> Candidate:
    return Candidate(
        sentence, kw.get("context"), kw.get("category", "fact"), kw.get("speaker", "assistant"), kw.get("source")
    )


def test_the_probability_is_the_logistic_of_signs_bias_and_meaning():
    model = Selector({"user": -1.0, "item": 0.5}, 0.25, write=0.5, keep=0.7, meaning=(2.0, -1.0))
    z = 0.25 - 1.0 + 0.5 + 2.0 * 0.1 - 1.0 * 0.3
    assert model.probability({"user": 1.0, "item": 1.0}, [0.1, 0.3]) == pytest.approx(1 / (1 + math.exp(-z)))
    assert model.probability({"unknown sign": 1.0}) == pytest.approx(1 / (1 + math.exp(-0.25)))


def test_signs_read_the_structure_the_statement_stands_in():
    on = signs(candidate("Pydantic: Dit is een bibliotheek voor het valideren van data.", source=SOURCE))
    assert {"item", "labelled", "dutch"} <= set(on) and "rewritten" not in on
    assert "rewritten" in signs(candidate("Pydantic validates data in FastAPI.", source=SOURCE))
    asked = signs(candidate("Can you explain the code to me?", speaker="user", category="open-question"))
    assert {"user", "question", "user_question", "user_you"} <= set(asked)
    people = signs(Candidate("I ran a charity race last weekend.", None, "fact", "user", None, people=True))
    assert {"people", "people_first_person"} <= set(people) and "user" not in people


def test_meaning_is_embedded_only_for_a_model_that_reads_it(monkeypatch):
    embedded: list[list[str]] = []

    def vectors(sentences):
        embedded.append(list(sentences))
        return [[1.0] for _ in sentences]

    monkeypatch.setattr(select, "meaning_vectors", vectors)
    one = candidate("A longer sentence that says what the tool does.")
    assert score([one], Selector({}, 0.0, write=0.6, keep=0.8))[0].probability == 0.5 and embedded == []
    reads = Selector({}, 0.0, write=0.6, keep=0.8, meaning=(3.0,))
    assert score([one], reads)[0].probability == pytest.approx(1 / (1 + math.exp(-3.0))) and embedded == [
        [one.sentence]
    ]


def test_reasons_name_the_heaviest_signs_against_a_note():
    model = Selector({"user": -2.0, "few_words": -0.5, "item": 1.0}, 0.0, write=0.9, keep=0.9)
    assert model.reasons({"user": 1.0, "few_words": 1.0, "item": 1.0}) == [
        "from the user's own turn",
        "too few words to say much",
    ]
    assert Selector({}, 0.0, write=0.9, keep=0.9).reasons({}) == ["low score"]


def test_the_selector_file_round_trips_byte_for_byte(tmp_path: Path):
    model = load_selector(SELECTOR_FILE)
    dump_selector(model, tmp_path / "s.json")
    assert (tmp_path / "s.json").read_bytes() == SELECTOR_FILE.read_bytes()
    assert load_selector(tmp_path / "s.json") == model
    assert 0 < model.write < model.keep < 1 and model.meaning == ()  # the signs only: nothing to embed at ingest


def test_the_users_thresholds_replace_the_shipped_ones():
    assert shipped() is shipped()
    lenient = shipped(0.1, 0.2)
    assert (lenient.write, lenient.keep, lenient.weights) == (0.1, 0.2, shipped().weights)


def test_only_the_sources_own_words_are_judged():
    from vault_pipeline.ingest.extract import AtomicUnit

    message = Message("m1", "assistant", "assistant", "Postgres keeps the notes of the vault in one table.", None)
    conv = Conversation("chatgpt", "c1", "Stores", None, None, (message,), "x.json")
    units = [
        AtomicUnit(
            text="Postgres keeps the notes of the vault in one table.",
            category="fact",
            source_ids=["m1"],
            speaker="assistant",
        ),
        AtomicUnit(
            text="The vault's notes live in a Postgres table.", category="fact", source_ids=["m1"], speaker="assistant"
        ),
        AtomicUnit(text="The conversation is about Stores.", category="topic", source_ids=["m1"], speaker="assistant"),
    ]
    refuse_all = Selector({}, -10.0, write=0.5, keep=0.5)
    chosen = select_units(conv, units, refuse_all)
    assert [(u.text, p) for u, p in chosen.written] == [(units[1].text, None), (units[2].text, None)]
    assert chosen.not_written == ("low score",)
    every = select_units(conv, units, EVERY_CANDIDATE)
    assert [p for _, p in every.written] == [0.5, None, None]


def test_keep_reads_a_note_as_ingest_scored_it(tmp_path: Path):
    """The probability keep computes from a note and its session is the one ingest wrote into it."""
    vault = Vault.init(tmp_path / "v")
    pipeline.ingest(vault, sorted((REPO / "vault_example" / "exports").iterdir()), OfflineBackend())
    paths = vault.iter_note_paths()
    sources = SourceTexts(vault, paths)
    rows = [(p, *vault.read(p)[:2]) for p in paths if p.startswith("inbox/")]
    assert rows, "the shipped selector wrote no note of the example exports"
    asked = {p: sources.question(fm) for p, fm, _ in rows}
    scores = keep_scores([(p, fm, body, sources.text(fm)) for p, fm, body in rows], None, asked)
    for p, fm, _ in rows:
        assert scores[p].probability == pytest.approx(fm["quality_score"], abs=0.001), p


@pytest.mark.slow
def test_the_shipped_selector_holds_its_precision_on_held_out_labels():
    if not (shared_data() / "exports").exists():
        pytest.skip("../shared/data not found")
    import sys

    sys.path.insert(0, str(REPO))
    from benchmarks.bench_selection import LABELS, featurise, held_out, load_rows, sources

    rows, _ = load_rows(LABELS, sources())
    test = [r for r in rows if held_out(r["conversation"]) and r.get("sample") == "random" and r["source"] == "export"]
    on, _ = featurise(test, meaning=False)
    model = shipped()
    passed = [(r, o) for r, o in zip(test, on) if model.probability(o) >= model.write_for(r["speaker"])]
    written = [r["good"] for r, _ in passed]
    assistant = [r["good"] for r, _ in passed if r["speaker"] == "assistant"]
    base = sum(r["good"] for r in test) / len(test)
    # Held out at fit time (benchmarks/bench_selection.py): the assistant's candidates at 0.73 precision
    # at its write threshold. Under the current reading protocol (generic advice is meaningless) the
    # candidates' base rate is about 0.30; a selector no better than it fails both guards.
    assert len(written) >= 20 and sum(written) / len(written) >= 1.5 * base
    assert len(assistant) >= 10 and sum(assistant) / len(assistant) >= 0.6
