"""Offline algorithms for the retrieval prompts: ``decompose`` and the fit-``gate``.

No model, no canned answers: both work on the words of the prompt.

* ``decompose`` strips question words, pronouns, politeness ("can we talk about")
  and stopwords, keeps the content words as phrases (maximal runs of adjacent
  content words: "negative space", "Japanese gardens"), and builds the four
  variants from them. The intent is those phrases unless the user gave one.
* ``gate`` keeps a candidate when it shares DOMAIN terms with the intent or prompt.
  Shared words from a small list of generic, polysemous "bridge" vocabulary (space,
  empty, balance, structure, law, expansion, negative, ...) do not count: they are
  exactly how a cosmology note on the emptiness of space matches an analysis of
  negative space in Japanese gardens (seed 004's contamination case). A tiny table
  of related terms lets an on-topic note that shares few words still pass, and the
  note's title and heading count as part of it.

This is a deterministic baseline with modest quality; a small model behind the
same prompt is the intended gate.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable, Mapping
from typing import Any

from vault_pipeline.text import QUERY_STOPWORDS

_WORD = re.compile(r"\w+", re.UNICODE)

# Generic, polysemous words that bridge unrelated domains: sharing only these is not fit.
# Keep this list short: every word here is ignored as evidence of topical fit.
BRIDGE = frozenset(
    """
space empty void negative positive balance structure form flow energy system model theory law
expansion expand pattern harmony order nature natural shape field principle concept idea process
method approach design element relation relationship time light dark silence scale level
""".split()
)

# A tiny related-terms table (symmetric): close synonyms and the core vocabulary of a few
# domains, so an on-topic note that shares no literal word can still pass.
_RELATED_GROUPS = (
    ("japanese", "japan", "zen", "wabi", "sabi", "ma", "\u9593", "kyoto", "karesansui", "ryoan", "shinto"),
    (
        "garden",
        "gardening",
        "karesansui",
        "moss",
        "gravel",
        "bonsai",
        "landscape",
        "courtyard",
        "ryoan",
        "teahouse",
        "pond",
    ),
    ("cosmology", "universe", "galaxy", "hubble", "redshift", "astronomy", "cosmic"),
    ("paper", "manuscript", "article", "preprint", "draft", "publication"),
    ("review", "referee", "reviewer", "critique"),
    ("code", "software", "program", "programming", "repository", "codebase"),
    ("bug", "defect", "regression", "crash"),
)


def _related_table() -> dict[str, frozenset[str]]:
    table: dict[str, set[str]] = {}
    for group in _RELATED_GROUPS:
        for word in group:
            table.setdefault(stem(word), set()).update(stem(w) for w in group if w != word)
    return {k: frozenset(v) for k, v in table.items()}


KEEP_SCORE = 1.0  # one shared domain term (or a related one) is enough evidence of fit


def stem(word: str) -> str:
    """Light, deterministic English stemming: plurals, -ness/-iness, -ing/-ed on longer words.

    Not ``vault_pipeline.text.stem`` (the sweep's stemmer) on purpose: the gate needs -iness -> y
    ("emptiness" meets the bridge word "empty", seed 004's contamination case), whole words for
    BRIDGE and the related-terms table ("space", not "spac"), and non-ASCII words left alone.
    """
    w = word.lower()
    if not w.isascii() or len(w) <= 3:
        return w
    for suffix, repl, keep in (
        ("iness", "y", 3),
        ("ness", "", 4),
        ("ies", "y", 3),
        ("sses", "ss", 2),
        ("ing", "", 5),
        ("ed", "", 5),
    ):
        if w.endswith(suffix) and len(w) - len(suffix) >= keep:
            return w[: len(w) - len(suffix)] + repl
    if w.endswith("s") and not w.endswith(("ss", "us", "is")):
        return w[:-1]
    return w


def _words(text: str) -> list[str]:
    """Word tokens, dropping lone ASCII letters (the "s" of "Hubble's")."""
    return [w for w in _WORD.findall(text) if not (len(w) == 1 and w.isascii())]


def content_runs(text: str) -> list[list[str]]:
    """Maximal runs of adjacent content words (surface forms): the prompt's noun phrases."""
    runs: list[list[str]] = [[]]
    for word in _words(text):
        if word.lower() in QUERY_STOPWORDS or word.isdigit():
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


class _Domain:
    """What the gate judges against: the intent's and prompt's domain stems, phrases and bridges."""

    def __init__(self, intent: str, query: str):
        runs = [[stem(w) for w in run] for run in content_runs(intent) + content_runs(query)]
        self.bridge = sorted({s for run in runs for s in run if s in BRIDGE})
        self.stems = _unique(s for run in runs for s in run if s not in BRIDGE)
        self.bigrams = {
            (a, b) for run in runs for a, b in itertools.pairwise(run) if a not in BRIDGE or b not in BRIDGE
        }
        phrases = [" ".join(s for s in run if s not in BRIDGE) for run in runs]
        self.phrases = _unique(p for p in phrases if p)
        # The intent's own terms: a candidate must touch the intent, not only the prompt's words.
        self.intent_stems = _unique(stem(w) for run in content_runs(intent) for w in run if stem(w) not in BRIDGE)


def _unique(items: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(items))


def _candidate_stems(candidate: Mapping[str, Any]) -> tuple[set[str], set[tuple[str, str]]]:
    text = " ".join(str(candidate.get(k) or "") for k in ("title", "heading", "text"))
    stems: set[str] = set()
    bigrams: set[tuple[str, str]] = set()
    for run in content_runs(text):
        run_stems = [stem(w) for w in run]
        stems.update(run_stems)
        bigrams.update(itertools.pairwise(run_stems))
    return stems, bigrams


def _quote(items: Iterable[str]) -> str:
    return ", ".join(f"'{i}'" for i in items)


def _judge(candidate: Mapping[str, Any], domain: _Domain, related: Mapping[str, frozenset[str]]) -> dict[str, str]:
    stems, bigrams = _candidate_stems(candidate)
    shared = [s for s in domain.stems if s in stems]
    via = {d: sorted(related.get(d, frozenset()) & stems) for d in domain.stems if d not in stems}
    via = {d: words for d, words in via.items() if words}
    phrases = sorted(" ".join(b) for b in domain.bigrams & bigrams)
    bridges = [s for s in domain.bridge if s in stems]
    # Multi-word overlaps count extra: a shared phrase is stronger evidence than a shared word.
    score = len(shared) + len(via) + len(phrases)
    reasoning = (
        f"Domain terms of the intent: {_quote(domain.stems) or 'none'}. "
        f"Shared domain terms: {_quote(shared) or 'none'}; shared phrases: {_quote(phrases) or 'none'}; "
        f"related terms: {_quote(f'{w} ~ {d}' for d, ws in via.items() for w in ws) or 'none'}; "
        f"shared generic bridge words: {_quote(bridges) or 'none'}. Score {score} vs {KEEP_SCORE:g} needed."
    )
    if not domain.stems:  # nothing but generic words to judge by: do not pretend to judge
        return {
            "key": candidate["key"],
            "reasoning": reasoning,
            "verdict": "keep",
            "reason": "the intent has no domain terms beyond generic vocabulary; kept unjudged",
        }
    touches_intent = not domain.intent_stems or any(d in stems or d in via for d in domain.intent_stems)
    if score >= KEEP_SCORE and not touches_intent:
        return {
            "key": candidate["key"],
            "reasoning": reasoning,
            "verdict": "drop",
            "reason": f"shares only prompt words {_quote(shared)}; nothing of the intent {_quote(domain.intent_stems)}",
        }
    if score >= KEEP_SCORE:
        found = shared + [f"{w} (~{d})" for d, ws in via.items() for w in ws]
        return {
            "key": candidate["key"],
            "reasoning": reasoning,
            "verdict": "keep",
            "reason": f"on topic: shares {_quote(found)} with the intent",
        }
    lacks = _quote(domain.phrases or domain.stems)
    has = f"shares only {_quote(bridges)}" if bridges else "shares no terms"
    return {
        "key": candidate["key"],
        "reasoning": reasoning,
        "verdict": "drop",
        "reason": f"{has}; no overlap with {lacks}",
    }


def gate(variables: Mapping[str, Any]) -> dict[str, Any]:
    """Keep/drop each candidate by its domain-term overlap with the intent, reasoning first."""
    domain = _Domain(str(variables.get("intent") or ""), str(variables.get("query") or ""))
    related = _related_table()
    return {"verdicts": [_judge(c, domain, related) for c in variables.get("candidates", [])]}
