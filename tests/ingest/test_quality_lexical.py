"""The Note Quality Gate's lexical signs, its serialised weights and the fit's operating points."""

from __future__ import annotations

import sys

import numpy as np

from tests.support.paths import REPO
from vault_pipeline.ingest.quality import (
    FEATURES,
    GATE,
    GATE_FILE,
    GateModel,
    dump_gate,
    fit,
    lexical,
    load_gate,
    sentence_problems,
)

CLEAN = dict.fromkeys(FEATURES, False)


def test_lexical_signs_are_the_lower_cased_words():
    assert lexical("Django's ORM uses `select_related` here.") == {
        "w:django",
        "w:s",
        "w:orm",
        "w:uses",
        "w:select_related",
        "w:here",
    }
    assert lexical("") == set()


def test_lexicon_moves_the_probability_and_unknown_words_weigh_nothing():
    model = GateModel(weights={}, bias=0.0, threshold=0.5, lexicon={"w:hello": -2.0, "w:index": 1.0})
    assert model.probability(CLEAN) == 0.5
    assert model.probability(CLEAN, {"w:never-seen"}) == 0.5
    assert model.probability(CLEAN, {"w:index"}) > 0.7
    assert model.probability(CLEAN, ["w:hello", "w:hello"]) == model.probability(CLEAN, {"w:hello"})


def test_reasons_name_the_words_only_when_they_weigh_most():
    model = GateModel(
        weights={"no_verb": -3.0}, bias=0.5, threshold=0.5, lexicon={"w:hello": -1.0, "w:there": -0.5, "w:fine": 0.2}
    )
    assert model.reasons(CLEAN, {"w:fine"}) == []
    words = model.reasons(CLEAN, {"w:hello", "w:there", "w:fine"})
    assert words == ['low quality score (words against it: "hello", "there")']
    # A heavier boolean sign is the reason; the lighter words are not named.
    assert model.reasons({**CLEAN, "no_verb": True}, {"w:there"}) == ["fragment, no verb"]
    # Below the threshold with no sign against it at all: the generic reason.
    assert GateModel({}, -1.0, 0.5).reasons(CLEAN) == ["low quality score"]


def test_fit_learns_a_word_that_separates_the_labels_and_drops_rare_words():
    rows = [CLEAN] * 40
    signs = [{"w:common", "w:good" if i % 2 else "w:bad"} | ({"w:once"} if i == 0 else set()) for i in range(40)]
    labels = [bool(i % 2) for i in range(40)]
    model = fit(rows, labels, signs=signs, l2=0.1, scale=0.5)
    assert model.lexicon["w:good"] > 0 > model.lexicon["w:bad"]
    assert "w:once" not in model.lexicon  # seen in one row only (min_count 2)
    assert model.probability(CLEAN, {"w:good"}) > 0.9 > 0.1 > model.probability(CLEAN, {"w:bad"})
    assert fit(rows, labels).lexicon == {}  # without signs: the boolean features only


def test_gate_file_round_trips_byte_for_byte(tmp_path):
    first, second = tmp_path / "a.json", tmp_path / "b.json"
    dump_gate(GATE, first, "test")
    dump_gate(load_gate(first), second, "test")
    assert first.read_bytes() == second.read_bytes()
    assert load_gate(first) == load_gate(GATE_FILE) == GATE
    assert set(GATE.weights) == set(FEATURES)


def test_the_shipped_gate_still_names_a_fragment_and_passes_a_good_note():
    assert "fragment, no verb" in sentence_problems("In the form of user stories.", "fact")
    assert sentence_problems("We keep the notes in Postgres, e.g. for search.", "fact") == []


def test_folds_are_stratified_disjoint_and_cover_their_rows():
    sys.path.insert(0, str(REPO))
    from benchmarks.bench_quality import folds

    labels = ["good"] * 10 + ["fragment"] * 20
    cut = folds(labels, range(5, 30), 5, seed=3)
    flat = sorted(i for fold in cut for i in fold)
    assert flat == list(range(5, 30))
    assert all(sum(labels[i] == "good" for i in fold) == 1 for fold in cut)
    assert cut == folds(labels, range(5, 30), 5, seed=3)


def test_operating_points_come_from_the_curve():
    sys.path.insert(0, str(REPO))
    from benchmarks.bench_quality import curve, operating_points

    scores = np.array([0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2, -1.0, 0.1])
    y = np.array([True, True, True, True, True, False, True, False, False, False])
    points = curve(scores, y)
    assert points[-1] == (0.9, 1.0, 1 / 6, 1)  # only the top note passes
    ops = operating_points(points)
    assert ops["precision 0.95"] == 0.5  # the five top notes are good
    assert ops["most precise (5+ notes)"] == 0.5
    assert ops["recall 0.90"] == 0.3  # every good note passes down to 0.3
    # A good note refused by a hard rule (-1) never passes: recall 0.90 is out of reach.
    capped = operating_points(curve(scores, y | (scores < 0)))
    assert capped["recall 0.90"] is None
    assert operating_points(curve(np.array([0.5, 0.4]), np.array([False, True])))["precision 0.95"] is None


def test_kappa_is_one_for_identical_readings_and_zero_for_chance_agreement():
    from benchmarks.bench_quality import kappa

    same = [("good", "good"), ("fragment", "fragment"), ("mangled", "mangled")]
    assert kappa(same, ("good", "fragment", "mangled")) == 1.0
    # Each reader says "good" half the time, independently: agreement 0.5 is all chance.
    chance = [("good", "good"), ("good", "fragment"), ("fragment", "good"), ("fragment", "fragment")]
    assert kappa(chance, ("good", "fragment")) == 0.0


def test_second_reading_scores_the_second_reader_as_a_gate_against_the_first():
    from benchmarks.bench_quality import second_reading

    rows = [
        {"id": "a", "text": "Django stores sessions in the database by default.", "label": "good"},
        {"id": "b", "text": "Postgres listens on port 5432 unless configured otherwise.", "label": "good"},
        {"id": "c", "text": "Expected Problems.", "label": "fragment"},
        {"id": "d", "text": "not read twice", "label": "good"},
    ]
    second = {"a": "good", "b": "mangled", "c": "fragment"}
    report = second_reading(rows, second)
    assert report["notes"] == 3
    assert report["confusion (first, second)"] == {"fragment/fragment": 1, "good/good": 1, "good/mangled": 1}
    assert report["second reader as a gate, against the first: precision"] == 1.0
    assert report["second reader as a gate, against the first: recall"] == 0.5
    assert report["four labels: agreement"] == round(2 / 3, 3)
