"""Fitting the offline gate on labels, and measuring it only on labels it was not fitted on.

``vault gate-calibrate --fit LABELS`` runs ``fit_gate``: every labelled candidate gets the
retrieval signals the funnel gives the gate (``signals.gate_signals``, its query's candidates as
the pool, the offline decomposition's variants), then

* the weights are a logistic regression on all the labels (``relevance.fit_weights``) and the
  threshold is the highest probability that keeps at least 97.5 % (``aim``: halfway from the
  95 % target to 1) of the relevant candidates, read off leave-one-query-out probabilities
  (never off the fit's own predictions);
* the figures are cross-validated: each query in turn is held out, the whole procedure
  (weights, then the inner threshold) runs on the other queries, and the held-out query's
  candidates are judged. Recall, precision and the share of kept candidates that are labelled
  contaminants (what would reach the package) are pooled over the held-out folds.

Latency is measured per candidate: signals plus the model, wall clock, on this machine.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from vault_pipeline.errors import ConfigError
from vault_pipeline.models.embed import Embedder, embed_rows, l2_normalise
from vault_pipeline.models.offline.relevance import RelevanceModel, fit_weights
from vault_pipeline.models.offline.retrieval import decompose
from vault_pipeline.retrieve.calibrate import TARGET_RECALL, CalibrationReport, LabelledCandidate
from vault_pipeline.retrieve.signals import gate_signals

MIN_QUERIES = 3  # leave-one-query-out needs at least two queries to fit on


def aim(target: float) -> float:
    """The recall the threshold aims for on the training folds: halfway from ``target`` to 1.

    Held-out recall scatters around the recall a threshold was chosen for (a fold's relevant
    candidates fall a little lower or higher), so aiming exactly at 95 % lands below it about
    half the time; halving the allowed misses keeps the held-out figure at or above the target.
    """
    return target + (1.0 - target) / 2


@dataclass(frozen=True)
class Labelled:
    """One labelled candidate with the signals the gate would see."""

    item: LabelledCandidate
    signals: dict[str, float]


@dataclass(frozen=True)
class HeldOut:
    """One candidate judged by a model that never saw its query's labels."""

    candidate_id: str
    query: str
    relevant: bool
    contaminant: bool
    probability: float
    threshold: float
    cos_query: float

    @property
    def kept(self) -> bool:
        """The held-out verdict."""
        return self.probability >= self.threshold


@dataclass(frozen=True)
class FitReport:
    """The fitted gate and its cross-validated quality and cost."""

    model: RelevanceModel
    held_out: tuple[HeldOut, ...]
    target_recall: float
    signal_seconds: float  # signals for every labelled candidate, embedding candidates, prompts and intents
    stored_seconds: float  # the same with every vector known (stored candidate vectors, prompts embedded once)
    model_seconds: float  # applying the model to every labelled candidate

    @property
    def candidates(self) -> int:
        """Labelled candidates used."""
        return len(self.held_out)

    def metrics(self, floor: float | None = None) -> dict[str, Any]:
        """Pooled held-out figures; with ``floor``, candidates under it count as dropped (the funnel's step 3)."""
        kept = [h for h in self.held_out if h.kept and (floor is None or h.cos_query >= floor)]
        relevant = [h for h in self.held_out if h.relevant]
        return {
            "candidates": len(self.held_out),
            "queries": len({h.query for h in self.held_out}),
            "kept": len(kept),
            "relevant": len(relevant),
            "relevant_kept": sum(h.relevant for h in kept),
            "recall": _share(sum(h.relevant for h in kept), len(relevant)),
            "precision": _share(sum(h.relevant for h in kept), len(kept)),
            "contaminants": sum(h.contaminant for h in self.held_out),
            "contaminants_kept": sum(h.contaminant for h in kept),
            "contamination": _share(sum(h.contaminant for h in kept), len(kept)),
            "off_topic_kept": sum(not h.relevant for h in kept),
        }

    def curve(self) -> list[dict[str, float]]:
        """Held-out recall and contamination at every threshold on the pooled held-out probabilities."""
        points = []
        for t in sorted({h.probability for h in self.held_out}):
            kept = [h for h in self.held_out if h.probability >= t]
            relevant = sum(h.relevant for h in self.held_out)
            points.append(
                {
                    "threshold": t,
                    "recall": _share(sum(h.relevant for h in kept), relevant) or 0.0,
                    "contamination": _share(sum(h.contaminant for h in kept), len(kept)) or 0.0,
                    "keep_rate": len(kept) / len(self.held_out),
                }
            )
        return points

    @property
    def ms_per_candidate(self) -> float:
        """Wall-clock milliseconds per candidate for signals (embedding the candidates) plus model."""
        return 1000 * (self.signal_seconds + self.model_seconds) / max(1, self.candidates)

    @property
    def ms_per_candidate_stored(self) -> float:
        """The same with every vector known: the signals and the model alone."""
        return 1000 * (self.stored_seconds + self.model_seconds) / max(1, self.candidates)

    def summary(self) -> dict[str, Any]:
        """JSON-ready headline: the model and the held-out figures."""
        return {
            "model": self.model.to_dict(),
            "target_recall": self.target_recall,
            "held_out": {k: _round(v) for k, v in self.metrics().items()},
            "ms_per_candidate": _round(self.ms_per_candidate),
            "ms_per_candidate_vectors_known": _round(self.ms_per_candidate_stored),
            "validation": "leave-one-query-out; threshold chosen inside each training fold",
        }


def _share(part: int, whole: int) -> float | None:
    return part / whole if whole else None


def _round(value: Any) -> Any:
    return round(value, 4) if isinstance(value, float) else value


# --------------------------------------------------------------------------- signals for labels


def label_signals(
    labels: Sequence[LabelledCandidate],
    embedder: Embedder,
    vectors: Mapping[str, np.ndarray] | None = None,
    query_vectors: Mapping[str, np.ndarray] | None = None,
) -> list[Labelled]:
    """Each label's signals, its query's labelled candidates as the pool (domain intent);
    ``vectors`` (candidate id -> vector) and ``query_vectors`` (text -> vector) spare embedding them."""
    out: dict[str, Labelled] = {}
    for (query, intent), items in _groups(labels).items():
        rows = [(item.candidate_id, item.title, "", item.candidate) for item in items]
        conversations = {item.candidate_id: item.conversation for item in items}
        found = gate_signals(
            rows,
            query=query,
            intent=intent,
            embedder=embedder,
            variants=_variants(query, intent),
            vectors=vectors,
            query_vectors=query_vectors,
            conversations=conversations,
        )
        out.update({item.candidate_id: Labelled(item, found[item.candidate_id]) for item in items})
    return [out[item.candidate_id] for item in labels]


def _groups(labels: Sequence[LabelledCandidate]) -> dict[tuple[str, str], list[LabelledCandidate]]:
    """Labels by (query, domain intent): one pool each."""
    groups: dict[tuple[str, str], list[LabelledCandidate]] = {}
    for item in labels:
        groups.setdefault((item.query, item.intent_domain), []).append(item)
    return groups


def _variants(query: str, intent: str) -> list[str]:
    """The offline decomposition's variants, as the funnel would run them."""
    return [v["text"] for v in decompose({"query": query, "intent": intent})["variants"]]


# --------------------------------------------------------------------------- fit


def threshold_for(probabilities: Sequence[float], relevant: Sequence[bool], target: float = TARGET_RECALL) -> float:
    """The highest threshold keeping at least ``target`` of the relevant candidates."""
    scores = sorted((p for p, r in zip(probabilities, relevant) if r), reverse=True)
    if not scores:
        raise ConfigError("no relevant candidates to choose a threshold on")
    needed = max(1, math.ceil(target * len(scores) - 1e-9))
    return scores[min(needed, len(scores)) - 1]


def fit_model(
    rows: Sequence[Labelled], *, target: float = TARGET_RECALL, source: str = "", embedder: str = ""
) -> RelevanceModel:
    """Weights on all ``rows``; threshold from their leave-one-query-out probabilities."""
    weights, bias = fit_weights([r.signals for r in rows], [r.item.relevant for r in rows])
    probabilities = _out_of_fold(rows)
    threshold = threshold_for(probabilities, [r.item.relevant for r in rows], aim(target))
    return RelevanceModel(
        {n: round(v, 4) for n, v in weights.items()}, round(bias, 4), _floor6(threshold), embedder, source
    )


def _floor6(value: float) -> float:
    return math.floor(value * 1e6) / 1e6  # rounding down never drops the candidate that set the threshold


def _queries(rows: Sequence[Labelled]) -> list[str]:
    return sorted({r.item.query for r in rows})


def _out_of_fold(rows: Sequence[Labelled]) -> list[float]:
    """Each row's probability under weights fitted without its query."""
    probabilities = [0.0] * len(rows)
    for query in _queries(rows):
        train = [r for r in rows if r.item.query != query]
        weights, bias = fit_weights([r.signals for r in train], [r.item.relevant for r in train])
        model = RelevanceModel(weights, bias, 0.5)
        for i, r in enumerate(rows):
            if r.item.query == query:
                probabilities[i] = model.probability(r.signals)
    return probabilities


def fit_gate(
    labels: Sequence[LabelledCandidate], embedder: Embedder, *, target: float = TARGET_RECALL, source: str = ""
) -> FitReport:
    """Fit the offline gate on ``labels`` and cross-validate it (leave one query out)."""
    embedder.embed(["warm-up"])  # a lazy embedder loads its model on the first call: not per-candidate cost
    started = time.perf_counter()  # the first pass pays every embedding; the second has them all (as the funnel)
    rows = label_signals(labels, embedder)
    signal_seconds = time.perf_counter() - started
    vectors = dict(zip((item.candidate_id for item in labels), embed_rows(embedder, [i.candidate for i in labels])))
    texts = list(dict.fromkeys(t for q, i in _groups(labels) for t in (q, i, *_variants(q, i))))
    query_vectors = dict(zip(texts, l2_normalise(embedder.embed(texts))))
    started = time.perf_counter()
    label_signals(labels, embedder, vectors, query_vectors)
    stored_seconds = time.perf_counter() - started
    held = cross_validate(rows, target=target)
    model = fit_model(rows, target=target, source=source, embedder=embedder.name)
    started = time.perf_counter()
    for r in rows:
        model.keeps(r.signals)
    model_seconds = time.perf_counter() - started
    return FitReport(model, held, target, signal_seconds, stored_seconds, model_seconds)


def cross_validate(rows: Sequence[Labelled], *, target: float = TARGET_RECALL) -> tuple[HeldOut, ...]:
    """Each query held out in turn; weights and threshold fitted on the other queries only."""
    if len(_queries(rows)) < MIN_QUERIES:
        raise ConfigError(f"fitting the gate needs labels for at least {MIN_QUERIES} queries")
    held: dict[str, HeldOut] = {}
    for query in _queries(rows):
        model = fit_model([r for r in rows if r.item.query != query], target=target)
        held.update({r.item.candidate_id: _held_out(r, model) for r in rows if r.item.query == query})
    return tuple(held[r.item.candidate_id] for r in rows)


def side_by_side(fitted: FitReport, report: CalibrationReport) -> list[dict[str, Any]]:
    """One row per gate on the same labels: the fitted offline gate held out, and the configured gate."""
    held = fitted.metrics()
    rows = [
        {
            "gate": "fitted offline, held out",
            "recall": held["recall"],
            "precision": held["precision"],
            "contaminants_kept": held["contaminants_kept"],
            "kept": held["kept"],
            "contamination": held["contamination"],
            "ms_per_candidate": fitted.ms_per_candidate,
            "tokens_per_candidate": 0,
        }
    ]
    domain = report.altitude("domain")
    if domain is not None:
        rows.append(
            {
                "gate": "offline, current weights" if report.offline else report.model,
                "recall": domain.recall,
                "precision": domain.precision,
                "contaminants_kept": domain.contaminants_kept,
                "kept": domain.kept,
                "contamination": _share(domain.contaminants_kept, domain.kept),
                "ms_per_candidate": 1000 * domain.seconds / max(1, domain.candidates),
                "tokens_per_candidate": None if domain.tokens is None else domain.tokens / max(1, domain.candidates),
            }
        )
    return rows


def _held_out(row: Labelled, model: RelevanceModel) -> HeldOut:
    return HeldOut(
        row.item.candidate_id,
        row.item.query,
        row.item.relevant,
        row.item.contaminant,
        model.probability(row.signals),
        model.threshold,
        row.signals["cos_query"],
    )
