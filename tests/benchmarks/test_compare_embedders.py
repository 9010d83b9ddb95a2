"""benchmarks/compare_embedders.py: the AUC it reports, and a run with the shipped embedder."""

from __future__ import annotations

import math
import sys

import pytest

from tests.support.paths import REPO

sys.path.insert(0, str(REPO / "benchmarks"))

import compare_embedders


def test_auc_counts_wins_and_half_ties():
    assert compare_embedders.auc([0.9, 0.8], [0.1, 0.2]) == 1.0
    assert compare_embedders.auc([0.1], [0.9]) == 0.0
    assert compare_embedders.auc([0.5, 0.9], [0.5]) == 0.75  # one tie (half), one win
    assert math.isnan(compare_embedders.auc([], [0.3]))


def test_pool_strength_is_the_mean_of_a_pools_three_strongest():
    scored = [("q", True, c) for c in (0.9, 0.1, 0.6, 0.3)] + [("r", False, 0.2)]
    assert compare_embedders.pool_strength(scored) == {"q": (0.9 + 0.6 + 0.3) / 3, "r": 0.2}


def test_the_absent_pools_are_off_topic_labels_of_questions_the_export_lacks():
    from vault_pipeline.retrieve.calibrate import load_labels

    items = load_labels(compare_embedders.SETS["absent"])
    assert len({item.query for item in items}) == 11 and not any(item.relevant for item in items)
    assert sum(compare_embedders.is_dutch(q) for q in {item.query for item in items}) == 4


@pytest.mark.slow
def test_a_run_with_minilm_reports_every_figure(capsys):
    assert compare_embedders.main(["minilm"]) == 0
    out = capsys.readouterr().out
    for name in ("labels", "traps", "export", "dutch"):
        assert f"  {name}: relevant vs off-topic" in out
    assert "absent pools, Dutch:" in out and "answerable vs absent pools, AUC of that mean:" in out


def test_the_language_axis_is_the_direction_between_the_languages_means():
    import numpy as np

    rng = np.random.default_rng(3)
    direction = np.zeros(8)
    direction[2] = 1.0
    english = rng.normal(size=(60, 8)) * 0.1
    dutch = rng.normal(size=(55, 8)) * 0.1 + direction
    axis = compare_embedders.language_axis(np.vstack([english, dutch]), ["english"] * 60 + ["dutch"] * 55)
    assert axis.shape == (1, 8)
    assert abs(axis[0] @ direction) > 0.95  # the recovered axis is the planted offset, up to sign
    # A language with too few rows defines no direction; one language alone gives no axis.
    assert compare_embedders.language_axis(english, ["english"] * 60).shape == (0, 8)
    few = compare_embedders.language_axis(np.vstack([english, dutch[:10]]), ["english"] * 60 + ["dutch"] * 10)
    assert few.shape == (0, 8)


def test_removing_the_axis_leaves_unit_vectors_orthogonal_to_it():
    import numpy as np

    axis = np.array([[0.0, 1.0, 0.0]])
    embed = compare_embedders.without(axis, 1.0, lambda texts: np.array([[0.6, 0.8, 0.0], [0.0, 0.6, 0.8]]))
    vectors = embed(["a", "b"])
    assert np.allclose(vectors @ axis.T, 0.0) and np.allclose(np.linalg.norm(vectors, axis=1), 1.0)
    half = compare_embedders.without(axis, 0.5, lambda texts: np.array([[0.6, 0.8, 0.0]]))(["a"])
    assert np.allclose(half, np.array([[0.6, 0.4, 0.0]]) / np.hypot(0.6, 0.4))


def test_the_language_axis_is_refused_for_another_embedder(capsys):
    import pytest

    with pytest.raises(SystemExit) as stop:
        compare_embedders.main(["e5", "--language-axis", "some-vault"])
    assert stop.value.code == 2 and "use it with minilm" in capsys.readouterr().err


def test_each_distinct_text_is_embedded_once():
    import numpy as np

    calls = []

    def embed(texts):
        calls.append(list(texts))
        return np.array([[float(len(t)), 1.0] for t in texts])

    once = compare_embedders.remembered(embed, 2)
    assert once(["ab", "c", "ab"]).tolist() == [[2.0, 1.0], [1.0, 1.0], [2.0, 1.0]]
    assert once(["c", "def"]).tolist() == [[1.0, 1.0], [3.0, 1.0]]
    assert calls == [["ab", "c"], ["def"]] and once([]).shape == (0, 2)
