"""Funnel stage 6b, evidence: does the vault hold anything on the prompt, and which survivors are evidence?

Depth follows the evidence (docs/decisions/0070-depth-follows-the-evidence.md): a survivor of the
gate becomes a block only when its calibrated relevance (the fitted gate's probability) reaches
the stop threshold (``Pool.evidence``, applied by ``rank_survivors``). Then the package as a whole
is judged: ``found`` is a small fitted model (``relevance.FoundModel``) over what the funnel knows
before assembly: the best relevance and cosine among the survivors, the share of the prompt's
words no note holds, and whether a name the prompt gives is in no note. A package that is not
found carries no block and says so in one line: a page of look-alikes is worse than none. Between
the model's threshold and its ``sure`` level, the package is not found either, but carries the
closest few blocks (``CLOSEST``, within ``CLOSEST_TOKENS``), marked as possibly not about it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from vault_pipeline.models.offline.relevance import FOUND, FoundModel
from vault_pipeline.retrieve.gate import gate_of
from vault_pipeline.retrieve.lanes import Absent, content_words, names
from vault_pipeline.retrieve.rank import Ranked
from vault_pipeline.retrieve.reports import FoundReport
from vault_pipeline.retrieve.state import Query
from vault_pipeline.retrieve.types import Candidate

# A package the found model is unsure of carries at most this many blocks, within ``CLOSEST_TOKENS``.
CLOSEST, CLOSEST_TOKENS = 3, 200


@dataclass(frozen=True)
class Verdict:
    """The found judgement: the ranked evidence that may become blocks (all of it, the closest few, or
    none), whether anything was found, and the evidence it left out."""

    ranked: Ranked  # its ``ranked`` cut to what may become blocks
    found: bool = True  # whether the vault holds anything on the prompt
    closest: bool = False  # not found, but the closest few blocks come, marked as such
    unfound: tuple[Candidate, ...] = ()  # evidence left out: nothing was found
    report: FoundReport | None = None  # None: no found model weighed it


def judge_found(q: Query, ranked: Ranked, absent: Absent) -> Verdict:
    """Decide whether anything was found; when not, no survivor becomes a block."""
    model = found_model(q, ranked)
    if model is None:  # no calibrated relevance (gate off, a model gate): a package is what survived
        return Verdict(ranked, found=bool(ranked.ranked))
    features = found_features(ranked, absent)
    p = model.probability(features)
    found = bool(ranked.ranked) and p >= max(model.threshold, model.sure)
    keep = CLOSEST if ranked.ranked and not found and p >= model.threshold else 0
    closest = keep > 0  # nothing is clearly about the prompt: the closest few at most, marked as such
    unfound = () if found else tuple(s.candidate for s in ranked.ranked[keep:])
    if not found:
        ranked = replace(ranked, ranked=ranked.ranked[:keep])
    report = FoundReport(round(p, 6), model.threshold, features, model.sure, closest)
    return Verdict(ranked, found, closest, unfound, report)


def found_model(q: Query, ranked: Ranked) -> FoundModel | None:
    """The found model in force: the offline gate's (``Gate.found``);
    None when there is no calibrated relevance to weigh."""
    if ranked.judged.pool.stop is None:
        return None
    return gate_of(q.tools.llm_gate).found or FOUND


def found_features(ranked: Ranked, absent: Absent) -> dict[str, float]:
    """``relevance.FOUND_FEATURES`` of a finished walk."""
    pool = ranked.judged.pool
    survivors = pool.survivors()
    probabilities = [p for c in survivors if (p := pool.probability(c)) is not None]
    cosines = [c.similarity for c in survivors if c.similarity == c.similarity]  # not NaN
    return {
        "best": max(probabilities, default=0.0),
        "best_cosine": max(cosines, default=0.0),
        **absence_features(pool.query, set(absent.words)),
    }


def absence_features(query: str, absent: set[str]) -> dict[str, float]:
    """The found model's features of the prompt's words no note holds (``lanes.absent_words``)."""
    words = content_words(query)
    return {
        "absent_share": sum(w in absent for w in words) / len(words) if words else 0.0,
        "name_absent": float(any(name in absent for name in names(query))),
    }
