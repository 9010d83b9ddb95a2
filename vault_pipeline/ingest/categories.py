"""A note's category, fitted: one logistic model per category over the selector's signs and the
extractor's cue category, the highest probability wins.

The offline extractor files each candidate by its cues (``models/offline/extraction.classify``);
readers who did not write those cues said which category each labelled note should have had (a
requirement is a constraint, a choice the user made is a decision, advice and how-to steps are
action items, not facts). ``benchmarks/bench_selection.py --fit`` fits these models on those
labels; ``select.py`` files every written candidate by them. Only the user decides: a decision
from the assistant's turn takes its next best category.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from vault_pipeline.models.logistic import newton

# The categories a candidate can be filed as (a topic is the extractor's own line, never refiled).
FILED = ("decision", "open-question", "constraint", "fact", "idea", "action-item", "provisional")
# Categories their cue alone files (never refiled, never a refiling's result).
KEPT = ("decision", "open-question")
# How readers name categories in their labels, where it differs from ours.
READERS: dict[str, str] = {"action": "action-item", "question": "open-question", "preference": "decision"}


def reader_category(name: str | None) -> str | None:
    """A reader's category label in our names (None when it is none of ours)."""
    found = READERS.get(name or "", name)
    return found if found in FILED else None


@dataclass(frozen=True)
class Categories:
    """Per category: (bias, weights over signs and ``cue:<category>``)."""

    models: Mapping[str, tuple[float, Mapping[str, float]]]

    def scores(self, on: Mapping[str, float], cue: str) -> dict[str, float]:
        """Each category's linear score for a candidate's signs and its cue category."""
        row = {**on, f"cue:{cue}": 1.0}
        return {c: b + math.fsum(w.get(k, 0.0) * v for k, v in row.items()) for c, (b, w) in self.models.items()}

    def category(self, on: Mapping[str, float], cue: str, speaker: str) -> str:
        """The fitted category among the statement categories; a question and the user's decision keep
        their cue (their form says what they are, and too few are labelled to fit them)."""
        if not self.models or cue not in FILED or cue in KEPT:
            return cue
        ranked = sorted(self.scores(on, cue).items(), key=lambda p: -p[1])
        return next(c for c, _ in ranked if c not in KEPT)


def fit_categories(
    rows: Sequence[Mapping[str, float]], cues: Sequence[str], wanted: Sequence[str], names: Sequence[str], l2: float
) -> Categories:
    """One-vs-rest logistic models: ``rows`` the signs, ``cues`` the extractor's categories, ``wanted`` the readers'."""
    design = [{**r, f"cue:{c}": 1.0} for r, c in zip(rows, cues)]
    inputs = [*names, *(f"cue:{c}" for c in FILED)]
    models: dict[str, tuple[float, Mapping[str, float]]] = {}
    for category in FILED:
        labels = [w == category for w in wanted]
        if not any(labels):
            continue
        weights, bias = newton(design, labels, inputs, l2=l2, steps=100, tolerance=1e-6)
        models[category] = (round(bias, 4), {k: round(v, 4) for k, v in weights.items() if round(v, 4)})
    return Categories(models)
