"""Offline algorithms for the retrieval prompts: ``decompose`` and the fit-``gate``.

No model, no canned answers, no word lists.

* ``decompose`` strips question words, pronouns, politeness ("can we talk about")
  and stopwords, keeps the content words as phrases (maximal runs of adjacent
  content words: "negative space", "Japanese gardens"), and builds the four
  variants from them. The intent is those phrases unless the user gave one.
* ``gate`` is the fitted relevance model (``relevance.py``): each candidate arrives
  with its retrieval signals (cosines to prompt, intent and variants, IDF-weighted
  overlap, phrase matches, closeness to the pool's strongest candidates), computed by
  ``retrieve.signals.gate_signals``; the logistic model keeps it when its probability
  reaches the fitted threshold. The weights are the ones the backend was built with (a
  vault's own ``gate.json``, written by ``vault gate-calibrate --fit``) or the shipped
  default. A candidate without signals is kept unjudged, and says so.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from vault_pipeline.models.offline.relevance import DEFAULT, FEATURES, RelevanceModel
from vault_pipeline.text import QUERY_STOPWORDS, prompt_stopwords, tokens

_WORD = re.compile(r"\w+", re.UNICODE)


def _words(text: str) -> list[str]:
    """Word tokens, dropping lone ASCII letters (the "s" of "Hubble's")."""
    return [w for w in _WORD.findall(text) if not (len(w) == 1 and w.isascii())]


def _folded(word: str) -> str:
    """A word as ``tokens`` spells it (accents folded, lower case), to look it up in a stop list."""
    return "".join(tokens(word))


def content_runs(text: str) -> list[list[str]]:
    """Maximal runs of adjacent content words (surface forms): the prompt's noun phrases.

    Function words of the prompt's own language break runs too ("Hoe ruim ik mijn huis op?": "ruim", "huis")."""
    own = prompt_stopwords(text)
    runs: list[list[str]] = [[]]
    for word in _words(text):
        if word.lower() in QUERY_STOPWORDS or word.isdigit() or (own and _folded(word) in own):
            if runs[-1]:
                runs.append([])
            continue
        runs[-1].append(word)
    return [r for r in runs if r]


# --------------------------------------------------------------------------- decompose


def decompose(variables: Mapping[str, Any]) -> dict[str, Any]:
    """Subject-domain intent and four variants built from the prompt's content phrases."""
    query = " ".join(str(variables.get("query", "")).split())
    given = " ".join(str(variables.get("intent") or "").split())
    phrases = [" ".join(run) for run in content_runs(query)]
    terms = " ".join(phrases) or query
    intent = given or ", ".join(phrases) or query
    return {
        "intent": intent,
        "variants": [
            {"kind": "concept", "text": terms},
            {"kind": "methodology", "text": f"methods, process and approach for {terms}"},
            {"kind": "continuity", "text": f"earlier decisions and sessions about {terms}"},
            {"kind": "authority", "text": f"facts and sources about {terms}"},
        ],
    }


# --------------------------------------------------------------------------- gate


def _signals(candidate: Mapping[str, Any]) -> dict[str, float] | None:
    raw = candidate.get("signals")
    if not isinstance(raw, Mapping) or not raw:
        return None
    return {n: float(raw[n]) for n in FEATURES if n in raw}


def _judge(candidate: Mapping[str, Any], model: RelevanceModel) -> dict[str, str]:
    signals = _signals(candidate)
    if signals is None:  # nothing to judge by: do not pretend to judge
        return {
            "key": candidate["key"],
            "reasoning": "",
            "verdict": "keep",
            "reason": "no retrieval signals; kept unjudged",
        }
    p = model.probability(signals)
    cosines = f"cosine to intent {signals.get('cos_intent', 0.0):.2f}, to prompt {signals.get('cos_query', 0.0):.2f}"
    keep = p >= model.threshold
    return {
        "key": candidate["key"],
        "reasoning": "",  # a fitted model's number and threshold are its reason; it writes no prose
        "verdict": "keep" if keep else "drop",
        "reason": f"relevance {p:.2f} {'>=' if keep else '<'} {model.threshold:.2f} ({cosines})",
    }


def gate(variables: Mapping[str, Any], model: RelevanceModel = DEFAULT) -> dict[str, Any]:
    """Keep/drop each candidate by the fitted relevance ``model`` over its retrieval signals."""
    return {"verdicts": [_judge(c, model) for c in variables.get("candidates", [])]}
