"""Offline algorithm for the ``judge`` prompt: a deterministic pair judgement, no model.

Each note's first line is normalised (case, punctuation, articles, number words,
a small stemmer) and split at its main verb into subject, predicate words, slot
values (numbers, dates, times, capitalised names) and cues (negation, "moved to",
"no longer", "instead of"). Then, per pair, in this order:

1. duplicate      - the same subject, compatible predicate, the same values, the same
                    polarity and content-stem Jaccard >= 0.5 (or identical stems);
2. contradiction  - the same subject (equal head terms), compatible predicate, and
                    conflicting values, flipped polarity, or a change cue with a new value;
3. related        - the same subject otherwise (head terms equal or one refines the other);
4. unrelated      - anything else, however many words the notes share.

It is a baseline: it misses paraphrases that share no words (a model does better),
and it never calls a contradiction across different subjects.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from vault_pipeline.models.offline.claims import Claim, parse_claim, same_subject
from vault_pipeline.text import jaccard, stem

DUPLICATE_JACCARD = 0.5  # with subject, values and polarity equal, half the stems shared is a rewording
PREDICATE_JACCARD = 0.5  # predicate words (after the verb, values removed) overlapping this much match


def judge(variables: Mapping[str, Any]) -> dict[str, Any]:
    """Judge every pair in ``variables["pairs"]``; the answer has the prompt's JSON shape."""
    return {"judgements": [_judge_pair(pair) for pair in variables["pairs"]]}


def _judge_pair(pair: Mapping[str, Any]) -> dict[str, str]:
    a, b = parse_claim(str(pair["a"])), parse_claim(str(pair["b"]))
    relation, reasoning = decide(a, b)
    shared = a.subject & b.subject
    subject = " ".join(w for w in a.subject_words if stem(w) in shared)
    return {"key": str(pair["key"]), "reasoning": reasoning, "subject": subject, "relation": relation}


def decide(a: Claim, b: Claim) -> tuple[str, str]:
    """(relation, reasoning) for two parsed claims; ``a`` is the older."""
    if a.stems == b.stems and a.negated == b.negated:
        return "duplicate", "After normalisation both notes say the same words."
    if not same_subject(a, b):
        return "unrelated", (
            f"Different subjects ({_words(a)} / {_words(b)}); shared words alone do not make the same claim."
        )
    exact = a.subject == b.subject
    predicate = _predicate_compatible(a, b)
    if (
        exact
        and predicate
        and a.negated == b.negated
        and a.values == b.values
        and jaccard(a.stems, b.stems) >= DUPLICATE_JACCARD
    ):
        return "duplicate", (
            f"Same subject ({_words(a)}), same values ({_show(a.values) or 'none'}) "
            "and the same polarity: a rewording of one claim."
        )
    # A newer note that announces a change ("the deadline moved to May 10") may name the subject
    # more briefly than the older claim ("the submission deadline is May 3"). Only that direction
    # counts: a newer, MORE specific subject is a different slot, not a correction.
    refines = b.subject < a.subject and b.changed
    change = _change(a, b) if predicate and (exact or refines) else ""
    if change:
        return "contradiction", f"Same subject ({_words(a)}) and predicate, but {change}."
    why = "one subject refines the other" if not exact else "different predicates or compatible values"
    return "related", f"Same subject ({_words(a)} / {_words(b)}); {why}, so both claims stay true."


def _predicate_compatible(a: Claim, b: Claim) -> bool:
    """Value-only predicates ("is May 3", "moved to May 10") match each other; words must overlap.

    A value-only predicate never matches a worded one: "The port is 8080" and "The port needs
    sign-off from Alice" share a subject, not a predicate.
    """
    if a.units and b.units and a.units != b.units:
        return False  # "5 engineers" and "3 designers" fill different slots
    if a.rest == b.rest:
        return True
    if not a.rest or not b.rest:
        return False
    return jaccard(a.rest, b.rest) >= PREDICATE_JACCARD or bool(a.changed or b.changed)


def _change(a: Claim, b: Claim) -> str:
    """Why the two values cannot both hold, or "" when they can."""
    if a.negated != b.negated:
        return "one note negates what the other asserts"
    if a.values and b.values and not (a.values <= b.values or b.values <= a.values):
        return f"the value differs ({_show(a.values - b.values)} vs {_show(b.values - a.values)})"
    if (a.changed or b.changed) and a.values != b.values:
        return f"a change is announced ({_show(a.values) or '-'} -> {_show(b.values) or '-'})"
    if (a.changed or b.changed) and a.rest and b.rest and a.rest != b.rest:
        return f"a change is announced ({_show(a.rest)} -> {_show(b.rest)})"
    return ""


def _show(stems: frozenset[str]) -> str:
    return ", ".join(sorted(stems))


def _words(claim: Claim) -> str:
    """The subject as the note words it ("staging server"), for a reason a person reads."""
    return " ".join(claim.subject_words) or _show(claim.subject) or "?"
