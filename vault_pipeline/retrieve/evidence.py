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

from vault_pipeline.models.offline.relevance import FOUND, FoundModel
from vault_pipeline.retrieve.gate import gate_of
from vault_pipeline.retrieve.reports import FoundReport
from vault_pipeline.retrieve.state import FunnelState
from vault_pipeline.text import QUERY_STOPWORDS, STOPWORDS, prompt_stopwords, tokens

# A package the found model is unsure of carries at most this many blocks, within ``CLOSEST_TOKENS``.
CLOSEST, CLOSEST_TOKENS = 3, 200


def judge_found(state: FunnelState) -> FunnelState:
    """Decide whether anything was found; when not, no survivor becomes a block."""
    model = found_model(state)
    if model is None:  # no calibrated relevance (gate off, a model gate): a package is what survived
        state.found = bool(state.ranked)
        return state
    features = found_features(state)
    p = model.probability(features)
    state.found = bool(state.ranked) and p >= max(model.threshold, model.sure)
    keep = CLOSEST if state.ranked and not state.found and p >= model.threshold else 0
    if not state.found:  # nothing is clearly about the prompt: the closest few at most, marked as such
        state.closest = keep > 0
        state.unfound = [s.candidate for s in state.ranked[keep:]]
        state.ranked = state.ranked[:keep]
    state.trace.append(FoundReport(round(p, 6), model.threshold, features, model.sure, state.closest))
    return state


def found_model(state: FunnelState) -> FoundModel | None:
    """The found model in force: the offline gate's (``Gate.found``);
    None when there is no calibrated relevance to weigh."""
    if state.pool.stop is None:
        return None
    return gate_of(state.tools.llm_gate).found or FOUND


def found_features(state: FunnelState) -> dict[str, float]:
    """``relevance.FOUND_FEATURES`` of a finished walk."""
    pool = state.pool
    survivors = pool.survivors()
    probabilities = [p for c in survivors if (p := pool.probability(c)) is not None]
    cosines = [c.similarity for c in survivors if c.similarity == c.similarity]  # not NaN
    return {
        "best": max(probabilities, default=0.0),
        "best_cosine": max(cosines, default=0.0),
        **absence_features(state.query, set(state.absent_words)),
    }


def absence_features(query: str, absent: set[str]) -> dict[str, float]:
    """The found model's features of the prompt's words no note holds (``lanes.absent_words``)."""
    words = content_words(query)
    return {
        "absent_share": sum(w in absent for w in words) / len(words) if words else 0.0,
        "name_absent": float(any(name in absent for name in names(query))),
    }


def content_words(query: str) -> list[str]:
    """The prompt's content words, as ``lanes.absent_words`` looks them up."""
    own = prompt_stopwords(query)
    return [w for w in dict.fromkeys(tokens(query)) if w not in STOPWORDS and w not in QUERY_STOPWORDS and w not in own]


def names(query: str) -> set[str]:
    """The prompt's names: capitalised words after its first word (lower-cased, as absent words are)."""
    cased = tokens(query, keep_case=True)
    return {w.lower() for w in cased[1:] if w[:1].isupper()}
