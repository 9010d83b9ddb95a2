"""Offline algorithm for the ``judge`` prompt: a deterministic pair judgement, no model.

Each note's first line is normalised (case, punctuation, articles, number words,
a small stemmer) and split at its main verb into subject, predicate words, slot
values (numbers, dates, times, capitalised names) and cues (negation, "moved to",
"no longer", "instead of"). Then, per pair, in this order:

1. duplicate      - every meaning-carrying detail agrees (``claims.meaning_gap``): the same
                    polarity, numbers (normalised: "nine" = "9 am"), names, identifiers, question
                    or statement, and every content word of each note in the other but light
                    verbs ("meets" / "happens", "is set to" / "has been fixed at");
2. contradiction  - the same real subject (equal head terms; not a pronoun, a pointer such as
                    "above" or a bare generic noun: ``claims.subject_weakness``), the same
                    attribute (equal predicate words, or one swapped with a change cue), and
                    conflicting values, flipped polarity, or a change cue with a new value;
                    never for a question;
3. related        - the same subject otherwise (head terms equal or one refines the other);
4. unrelated      - anything else, however many words the notes share.

The caution is asymmetric: a wrong merge or supersession hides a note, a missed one costs a
little redundancy, so anything short of these tests is at most related. It misses paraphrases
with synonyms (a model does better) and never calls a contradiction across different subjects.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from vault_pipeline.models.offline.claims import (
    Claim,
    meaning_gap,
    parse_claim,
    same_subject,
    subject_weakness,
)
from vault_pipeline.text import FUNCTION_WORDS, STOPWORDS, stem


def judge(variables: Mapping[str, Any]) -> dict[str, Any]:
    """Judge every pair in ``variables["pairs"]``; the answer has the prompt's JSON shape."""
    return {"judgements": [_judge_pair(pair) for pair in variables["pairs"]]}


def _judge_pair(pair: Mapping[str, Any]) -> dict[str, str]:
    a, b = parse_claim(str(pair["a"])), parse_claim(str(pair["b"]))
    relation, reasoning = decide(a, b, str(pair["a"]), str(pair["b"]))
    shared = a.subject & b.subject
    subject = " ".join(w for w in a.subject_words if stem(w) in shared)
    attribute = _attribute(a, b) if relation == "contradiction" else ""
    return {
        "key": str(pair["key"]),
        "reasoning": reasoning,
        "subject": subject,
        "attribute": attribute,
        "relation": relation,
    }


def _attribute(a: Claim, b: Claim) -> str:
    """The changed attribute in the notes' words: the predicate words they share, else the subject's head."""
    shared = sorted(a.rest & b.rest)
    if shared:
        return " ".join(shared)
    return a.subject_words[-1] if a.subject_words else ""


def decide(a: Claim, b: Claim, text_a: str = "", text_b: str = "") -> tuple[str, str]:
    """(relation, reasoning) for two parsed claims; ``a`` is the older (texts give the details)."""
    if _duplicate(a, b, text_a, text_b):
        return "duplicate", "Every meaning-carrying detail agrees (words, numbers, names, polarity, form)."
    if not same_subject(a, b):
        return "unrelated", (
            f"Different subjects ({_words(a)} / {_words(b)}); shared words alone do not make the same claim."
        )
    if _trivial(a) or _trivial(b):
        return "unrelated", (
            f"The subjects ({_words(a)} / {_words(b)}) hold no word that names a thing, so the notes share no subject."
        )
    exact = a.subject == b.subject
    change = _slot_change(a, b, exact=exact)
    if change:
        return _changed(a, b, change)
    why = "one subject refines the other" if not exact else "different predicates or compatible values"
    gap = _gap(a, b, text_a, text_b)
    return (
        "related",
        f"Same subject ({_words(a)} / {_words(b)}); {why}, so both claims stay true; not one claim: {gap}.",
    )


def _duplicate(a: Claim, b: Claim, text_a: str, text_b: str) -> bool:
    """Whether the two claims are one: every meaning-carrying detail of the texts agrees (without
    texts: the same stems and polarity)."""
    # ``core`` (content stems, light verbs out) is equal for every duplicate: one set comparison
    # settles almost every pair of a sweep before the detailed test reads the texts again.
    if text_a or text_b:
        return a.core == b.core and not meaning_gap(text_a, text_b)
    return not _stem_gap(a, b)


def _slot_change(a: Claim, b: Claim, *, exact: bool) -> str:
    """Why the newer claim's value for the same attribute of the same subject cannot hold beside the
    older one's, or "" when the claims fill different slots or agree."""
    # A newer note that announces a change ("the deadline moved to May 10") may name the subject
    # more briefly than the older claim ("the submission deadline is May 3"). Only that direction
    # counts: a newer, MORE specific subject is a different slot, not a correction.
    refines = b.subject < a.subject and b.changed
    return _change(a, b) if _predicate_compatible(a, b) and (exact or refines) else ""


def _changed(a: Claim, b: Claim, change: str) -> tuple[str, str]:
    """The verdict on a change: a contradiction, or only related when a subject is too weak to be
    sure of or one note asks a question."""
    weak = subject_weakness(a) or subject_weakness(b)
    if not weak and not (a.question or b.question):
        return "contradiction", f"Same subject ({_words(a)}) and predicate, but {change}."
    why = weak or "one note asks a question"
    return "related", f"Same subject words ({_words(a)}) and {change}, but {why}: not superseded."


def _gap(a: Claim, b: Claim, text_a: str, text_b: str) -> str:
    """Why two claims are not one, for the reasoning: their content words where those differ
    (no second reading of the texts: most related pairs of a sweep end here), else the details."""
    if not (text_a or text_b):
        return _stem_gap(a, b)
    if a.core != b.core:
        only_a, only_b = _show(a.core - b.core, a, b) or "-", _show(b.core - a.core, b, a) or "-"
        return f"words of one note are missing from the other ({only_a} / {only_b})"
    return meaning_gap(text_a, text_b)


def _stem_gap(a: Claim, b: Claim) -> str:
    """Without texts: the same stems and polarity, or why not."""
    return "" if a.stems == b.stems and a.negated == b.negated else "the words differ"


def _predicate_compatible(a: Claim, b: Claim) -> bool:
    """The same attribute: equal predicate words, or a change announced with one word swapped.

    Value-only predicates ("is May 3", "moved to May 10") match each other. A value-only
    predicate never matches a worded one: "The port is 8080" and "The port needs sign-off from
    Alice" share a subject, not a predicate. Overlap is not enough: "push images to the registry"
    and "has permissions to push images" share words, not an attribute.
    """
    if a.units and b.units and a.units != b.units:
        return False  # "5 engineers" and "3 designers" fill different slots
    if a.rest == b.rest:
        return True
    if not a.rest or not b.rest:
        return False
    return bool(a.changed or b.changed) and len(a.rest - b.rest) <= 1 and len(b.rest - a.rest) <= 1


def _change(a: Claim, b: Claim) -> str:
    """Why the two values cannot both hold, or "" when they can."""
    if a.negated != b.negated:
        return "one note negates what the other asserts"
    if a.values and b.values and not (a.values <= b.values or b.values <= a.values):
        return f"the value differs ({_show(a.values - b.values, a)} vs {_show(b.values - a.values, b)})"
    return _announced(a, b) if a.changed or b.changed else ""


def _announced(a: Claim, b: Claim) -> str:
    """Under a change cue ("moved to", "no longer"): the new value, or the new predicate words, or ""
    when neither differs."""
    if a.values != b.values:
        return f"a change is announced ({_show(a.values, a) or '-'} -> {_show(b.values, b) or '-'})"
    if a.rest and b.rest and a.rest != b.rest:
        return f"a change is announced ({_show(a.rest, a)} -> {_show(b.rest, b)})"
    return ""


def _show(stems: frozenset[str], *claims: Claim) -> str:
    """Stems as the notes write them ("available", not "availabl"), for a reason a person reads."""
    spelled: dict[str, str] = {}
    for claim in claims:
        for key, word in claim.forms:
            spelled.setdefault(key, word)
    return ", ".join(sorted(spelled.get(s, s) for s in stems))


def _words(claim: Claim) -> str:
    """The subject as the note words it ("staging server"), for a reason a person reads."""
    return " ".join(claim.subject_words) or _show(claim.subject, claim) or "?"


def _trivial(claim: Claim) -> bool:
    """A subject of closed-class words only ("may", "it", "this one"): no subject two notes can share."""
    words = claim.subject_words or tuple(w for _, w in claim.forms if stem(w) in claim.subject)
    return all(w in FUNCTION_WORDS or w in STOPWORDS or len(w) <= 2 for w in words)
