"""benchmarks/compare_embedders.py: the AUC it reports, and a run with the shipped embedder."""

from __future__ import annotations

import math
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "benchmarks"))

import compare_embedders  # noqa: E402


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


def test_a_run_with_minilm_reports_every_figure(capsys):
    assert compare_embedders.main(["minilm"]) == 0
    out = capsys.readouterr().out
    for name in ("labels", "traps", "export"):
        assert f"  {name}: relevant vs off-topic" in out
    assert "absent pools, Dutch:" in out and "answerable vs absent pools, AUC of that mean:" in out
