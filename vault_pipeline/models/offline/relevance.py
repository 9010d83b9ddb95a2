"""The offline fit-gate's relevance model: logistic regression over a handful of retrieval signals.

The signals (``FEATURES``) are what any embedder and index give for a candidate, computed by
``retrieve.signals.gate_signals`` and handed to the gate with each candidate:

* ``cos_query``: cosine of the candidate to the prompt as typed;
* ``cos_intent``: cosine to the intent (the subject domain the gate judges against);
* ``agreement``: mean cosine to every query the funnel ran (the prompt and its variants);
* ``overlap``: IDF-weighted share of the prompt's and intent's content stems the candidate
  carries (IDF over the candidate pool, the shared stemmer of ``vault_pipeline.text``);
* ``phrase``: share of the prompt's adjacent content-word pairs found adjacent in the candidate;
* ``anchor``: mean cosine to the pool's three strongest other candidates (by cosine to prompt
  plus intent): notes of the prompt's domain sit together, a stray contaminant sits apart.
* ``session_share``: share of the pool's other candidates that come from the same chat. A chat
  about the subject sends several of its notes and turns; a stray note from an unrelated chat
  comes alone.
* ``same_session``: 1 when one of the pool's three strongest other candidates comes from the
  candidate's chat.
* ``session_known``: 1 when the candidate's chat is known (the notes, turns and transcript chunks
  of a ChatGPT or Claude conversation, ``signals.CHAT_KINDS``) and at least five other candidates
  are there to count; 0 otherwise (a transcript's or LoCoMo's session, a user's own note, a
  resource, a label without one): the missing-value indicator that lets ``session_share`` weigh
  only where it exists.

No word list: the weights are fitted on labels (``vault gate-calibrate --fit``) and the
threshold is chosen out of fold so that at least 95 % of relevant candidates are kept.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from vault_pipeline.models.logistic import newton, sigmoid

FEATURES = (
    "cos_query",
    "cos_intent",
    "agreement",
    "overlap",
    "phrase",
    "anchor",
    "session_share",
    "same_session",
    "session_known",
)
L2 = 0.1  # ridge on the weights (not the bias): eight weights from a few hundred labels need a little shrinkage
# Shared words are evidence for a candidate, never against it. Unconstrained, a fit on labels
# built around vocabulary traps learns a negative weight for overlap, which would then drop the
# note that repeats a question's name and date (LoCoMo); the traps are the cosines' job.
NONNEGATIVE = ("overlap", "phrase")


@dataclass(frozen=True)
class RelevanceModel:
    """Weights, bias and thresholds of the fitted gate: ``probability`` >= ``threshold`` keeps a
    candidate; a package carries only blocks whose probability reaches ``stop`` (its depth follows
    the evidence), and one with none says the vault holds nothing on the prompt."""

    weights: Mapping[str, float]
    bias: float
    threshold: float
    embedder: str = ""  # the embedder whose cosines the weights were fitted on
    source: str = ""  # where the numbers came from (labels files, or "shipped default")
    stop: float | None = None  # None: the shipped ``STOP``
    found: FoundModel | None = None  # None: the shipped ``FOUND``

    def logit(self, signals: Mapping[str, float]) -> float:
        """Bias plus the weighted signals (missing signals count as 0)."""
        return self.bias + sum(w * float(signals.get(n, 0.0)) for n, w in self.weights.items())

    def probability(self, signals: Mapping[str, float]) -> float:
        """The model's probability that the candidate is relevant."""
        return sigmoid(self.logit(signals))

    def keeps(self, signals: Mapping[str, float]) -> bool:
        """True when the probability reaches the threshold."""
        return self.probability(signals) >= self.threshold

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (what ``gate.json`` stores)."""
        return {
            "weights": {n: self.weights[n] for n in FEATURES if n in self.weights},
            "bias": self.bias,
            "threshold": self.threshold,
            "embedder": self.embedder,
            "source": self.source,
            **({"stop": self.stop} if self.stop is not None else {}),
            **({"found": self.found.to_dict()} if self.found is not None else {}),
        }

    @property
    def evidence(self) -> float:
        """The stop threshold in force: this model's own, else the shipped one."""
        return STOP if self.stop is None else self.stop

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RelevanceModel:
        """Read ``to_dict``'s form; raises ValueError naming what is wrong."""
        weights = data.get("weights")
        if not isinstance(weights, Mapping) or not weights:
            raise ValueError("'weights' must be a non-empty mapping of signal -> number")
        unknown = sorted(set(weights) - set(FEATURES))
        if unknown:
            raise ValueError(f"unknown signals {unknown}; known: {list(FEATURES)}")
        try:
            parsed = {str(n): float(v) for n, v in weights.items()}
            bias, threshold = float(data["bias"]), float(data["threshold"])
            stop = None if data.get("stop") is None else float(data["stop"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"'bias', 'threshold', 'stop' and every weight must be numbers ({exc})") from None
        limits = [threshold] + ([stop] if stop is not None else [])
        if not all(math.isfinite(v) for v in [*parsed.values(), bias, *limits]) or not all(0 <= v <= 1 for v in limits):
            raise ValueError("weights must be finite and the thresholds within 0-1")
        return cls(
            parsed,
            bias,
            threshold,
            str(data.get("embedder") or ""),
            str(data.get("source") or ""),
            stop,
            FoundModel.from_dict(data["found"]) if data.get("found") is not None else None,
        )


def fit_weights(
    rows: Sequence[Mapping[str, float]], labels: Sequence[bool], *, l2: float = L2
) -> tuple[dict[str, float], float]:
    """Logistic weights and bias; a ``NONNEGATIVE`` signal fitted below zero is fixed at 0 and the rest refitted."""
    fixed: set[str] = set()
    while True:
        weights, bias = newton(rows, labels, [n for n in FEATURES if n not in fixed], l2=l2)
        negative = sorted(n for n in NONNEGATIVE if weights.get(n, 0.0) < 0)
        if not negative:
            return {n: weights.get(n, 0.0) for n in FEATURES}, bias
        fixed.update(negative)


# The evidence threshold: a survivor below it is no block. Fitted by ``benchmarks/fit_evidence.py``
# (best F1 of relevant rows over the labelled pools and package blocks; held out by query: recall
# 0.913, precision 0.842; docs/decisions/0070-depth-follows-the-evidence.md).
STOP = 0.493271

# Fitted by `vault gate-calibrate --fit vault_example/calibration/labels.jsonl
# vault_example/calibration/traps.jsonl vault_example/calibration/export.jsonl --json` (MiniLM
# embedder; the "model" of its "fitted_gate"): weights on all the labels, threshold from their
# leave-one-query-out probabilities (``gatefit.aim``); tests/test_gate_fit.py refits and compares.
# The session signals weigh only on export.jsonl, the one set whose candidates come from chats.
# Refitted when the index stopped embedding rows' ids (a candidate's cosine is its embedding
# text's, ``vault.format.embedding_text``; docs/decisions/0158-embedding-text-without-ids.md) and
# again when MiniLM came to read 128 tokens of a text (docs/decisions/0159-minilm-reads-128-tokens.md).
# How the fit came to this: docs/decisions/0032-offline-gate-weights.md.
DEFAULT = RelevanceModel(
    weights={
        "cos_query": -6.16,
        "cos_intent": 7.5051,
        "agreement": 4.8781,
        "overlap": 0.0031,
        "phrase": 0.3432,
        "anchor": 5.4743,
        "session_share": -0.1228,
        "same_session": 2.4264,
        "session_known": -3.5656,
    },
    bias=-2.0674,
    threshold=0.339081,
    embedder="minilm-l6-v2-int8-128",
    source="shipped default: labels.jsonl traps.jsonl export.jsonl",
)


# --------------------------------------------------------------------------- is anything found?

# What a package knows about itself before it is assembled (``retrieve/evidence.py`` computes them):
FOUND_FEATURES = (
    "best",  # the highest calibrated relevance among the gate's survivors (0 when none survived)
    "best_cosine",  # the highest cosine to the prompt among them
    "absent_share",  # the share of the prompt's content words that no note in the vault holds
    "name_absent",  # 1 when a name the prompt gives (a capitalised word inside it) is in no note
)


@dataclass(frozen=True)
class FoundModel:
    """Whether the vault holds anything on a prompt: a logistic model over ``FOUND_FEATURES``,
    fitted on prompts labelled answerable or not (``benchmarks/fit_evidence.py``). Below
    ``threshold`` the package says nothing was found and carries no block; from ``threshold`` to
    ``sure`` it says nothing is clearly about the prompt and carries only the closest few blocks."""

    weights: Mapping[str, float]
    bias: float
    threshold: float
    sure: float = 0.0  # below it (and at or above ``threshold``): the closest few blocks, marked

    def probability(self, features: Mapping[str, float]) -> float:
        """The model's probability that the vault answers the prompt."""
        return sigmoid(self.bias + sum(w * float(features.get(n, 0.0)) for n, w in self.weights.items()))

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (``gate.json``'s ``found``)."""
        return {"weights": dict(self.weights), "bias": self.bias, "threshold": self.threshold, "sure": self.sure}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> FoundModel:
        """Read ``to_dict``'s form; raises ValueError naming what is wrong."""
        try:
            weights = {str(n): float(v) for n, v in dict(data["weights"]).items()}
            model = cls(weights, float(data["bias"]), float(data["threshold"]), float(data.get("sure", 0.0)))
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"'found' needs numeric weights, bias and threshold ({exc})") from None
        if set(weights) - set(FOUND_FEATURES) or not 0 <= model.threshold <= 1 or not 0 <= model.sure <= 1:
            raise ValueError(f"'found' weighs only {list(FOUND_FEATURES)}, with thresholds within 0-1")
        return model


def fit_found(
    rows: Sequence[Mapping[str, float]], answerable: Sequence[bool], *, l2: float = L2
) -> tuple[dict[str, float], float]:
    """Logistic weights and bias of the found model over ``FOUND_FEATURES``."""
    return newton(rows, answerable, FOUND_FEATURES, l2=l2)


# Fitted by ``benchmarks/fit_evidence.py`` on 343 questions labelled answerable or not (the export's,
# LoCoMo's tuning conversations', the written sets'); the threshold keeps 97.5 % of the answerable found,
# ``sure`` 96.5 % whole (between the two: the closest few blocks, marked).
FOUND = FoundModel(
    weights={"best": 5.1471, "best_cosine": 7.1019, "absent_share": -4.8151, "name_absent": -2.8218},
    bias=-5.4804,
    threshold=0.511635,
    sure=0.765823,
)
