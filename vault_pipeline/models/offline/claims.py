"""A one-sentence claim split at its main verb: subject, verb, values and change cues (no POS tagger).

The offline judge decides on these parts; the sweep's contradiction guard (``clean.judge``) checks a
model's verdict against the same subject test, and the sweep's candidates use the claim's stems.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from itertools import pairwise

from vault_pipeline.text import STOPWORDS, stem, tokens

_AUX = frozenset(
    "is are was were be been being am will would shall should can could must might do does did "
    "has have had isnt arent wasnt werent wont wouldnt dont doesnt didnt hasnt havent cant "
    "cannot shouldnt".split()
)
_VERBS = frozenset(
    stem(v)
    for v in (
        "use run move change switch start end meet need want prefer choose pick select decide plan cost take "
        "live work stay support require include contain store host deploy ship launch release open close "
        "cancel postpone delay replace become remain belong expire happen begin finish hold sit go come make "
        "keep set rely depend call mean show reach weigh last land arrive leave return build write own lead "
        "manage handle target aim agree approve reject drop add remove limit allow block like love hate "
        "schedule reschedule push extend shift update revise migrate rename fix confirm decide"
    ).split()
) | frozenset(
    stem(v)
    for v in "ran running chose chosen picked went gone came made kept got held met took built wrote led "
    "began begun left stopped dropped shipped cancelled canceled planned set cost hit put".split()
)
_IRREGULAR = frozenset(
    "ran chose chosen went gone came made kept got held met took built wrote led began begun "
    "left set cost hit put".split()
)
NEGATIONS = frozenset(
    "not no never isnt arent wasnt werent wont wouldnt dont doesnt didnt hasnt havent "
    "cant cannot shouldnt nobody none neither nor".split()
)
# Words that announce a new value for an old slot ("moved to", "no longer", "instead of").
CHANGE_CUES = frozenset(
    stem(w)
    for w in "moved changed switched replaced postponed rescheduled pushed "
    "shifted updated revised migrated cancelled canceled longer instead now".split()
)
_PRONOUNS = frozenset("we i you they he she it us our my your their".split())
_DETERMINERS = frozenset("a an the our my your their his her its this that these those every each".split())
_ADVERBS = frozenset("still already also now longer currently actually finally officially".split())
_MONTHS = frozenset(
    "january february march april may june july august september october november "
    "december jan feb mar apr jun jul aug sep sept oct nov dec".split()
)
_WEEKDAYS = frozenset("monday tuesday wednesday thursday friday saturday sunday".split())
_VALUE_WORDS = _MONTHS | _WEEKDAYS | frozenset("am pm noon midnight today tomorrow yesterday".split())
_LABEL = re.compile(r"^\s*(decision|fact|idea|constraint|question|action item|todo|note)\s*:\s*", re.I)
# "We agreed that X", "It was decided: X": the claim is X, the reporting clause is packaging.
_REPORTING = re.compile(
    r"^\s*(?:(?:we|i|they|everyone|the team)\s+(?:all\s+)?(?:agreed|decided|confirmed|noted|"
    r"said|think|believe|know|learned|found|realised|realized)\s*(?:that\b|on\b|:)?|"
    r"it\s+(?:was|has\s+been|is)\s+(?:decided|agreed|confirmed|noted)\s*(?:that\b|:)?)\s*",
    re.I,
)
_COPULAS = frozenset("is are was were will be".split())
_NOT_CONTENT = STOPWORDS | NEGATIONS
_NOT_SUBJECT = STOPWORDS | NEGATIONS | _PRONOUNS | _ADVERBS


@dataclass(frozen=True)
class Claim:
    """A one-sentence claim split at its main verb."""

    subject: frozenset[str]  # stemmed head terms before the main verb (or the topic, for "we ...")
    verb: str  # stem of the main verb ("" when none was found)
    rest: frozenset[str]  # stemmed non-value content words after the verb, cues removed
    values: frozenset[str]  # numbers, dates, times, named (capitalised) values after the verb
    units: frozenset[str]  # stemmed words right after a number ("5 engineers"): part of the slot
    negated: bool  # an odd number of negation cues
    changed: bool  # a change cue such as "moved to", "no longer", "instead of"
    stems: frozenset[str]  # all content stems (the lexical signal)
    subject_words: tuple[str, ...] = ()  # the subject in the note's own (lower-cased) words


@lru_cache(maxsize=200_000)
def parse_claim(text: str) -> Claim:
    """Split a claim into subject, main verb, values and cues (first line only; no POS tagger)."""
    first = text.strip().splitlines()[0] if text.strip() else ""
    label, sep, after = first.partition(": ")
    if sep and len(label.split()) <= 5 and len(after.split()) >= 4:
        first = after  # "Update on the paper: the deadline moved ..." -> the claim after the label
    sentence = _REPORTING.sub("", _LABEL.sub("", first))
    words = tokens(sentence, keep_case=True)
    lower = [w.lower() for w in words]
    stems = [stem(w) for w in lower]
    start, end = _verb_group(lower)
    head, tail = list(range(start)), list(range(end, len(words)))
    if head and set(lower[start:end]) <= _COPULAS and all(_value_flags(words[:start])):
        head, tail = tail, head  # "6416 is the port" says "the port is 6416"
    flags = _value_flags([words[i] for i in tail])
    values = frozenset(lower[i] for i, flag in zip(tail, flags) if flag)
    units = frozenset(stems[j] for i, j in pairwise(tail) if words[i][:1].isdigit() and lower[j] not in _NOT_CONTENT)
    rest = [i for i in tail if lower[i] not in _NOT_CONTENT and lower[i] not in values and stems[i] not in CHANGE_CUES]
    subject = [i for i in head if lower[i] not in _NOT_SUBJECT]
    if not subject:  # "We moved the launch to May 10": the topic words stand in for the subject
        subject, rest = rest, []
    verbs = [w for w in lower[start:end] if w not in NEGATIONS]
    return Claim(
        subject=frozenset(stems[i] for i in subject),
        verb=stem(verbs[-1]) if verbs else "",
        rest=frozenset(stems[i] for i in rest),
        values=values,
        units=units,
        negated=sum(w in NEGATIONS for w in lower) % 2 == 1,
        changed=bool(CHANGE_CUES.intersection(stems)) or "cancel" in stems,
        stems=frozenset(s for s, w in zip(stems, lower) if w not in STOPWORDS),
        subject_words=tuple(dict.fromkeys(lower[i] for i in subject)),
    )


def _verb_group(lower: list[str]) -> tuple[int, int]:
    """[start, end) of the main verb group ("will be held"); (n, n) when no verb is found."""
    for i, word in enumerate(lower):
        if i == 0 and word not in _PRONOUNS:
            continue  # the subject needs at least one word; imperatives keep the whole line
        if lower[i - 1] in _DETERMINERS:
            continue  # "the meeting", "our launch": a noun, whatever verb it looks like
        if _is_verb(word, lower[i - 1] if i else ""):
            end = i + 1
            while end < len(lower) and (_is_verb(lower[end], "will") or lower[end] in NEGATIONS | _ADVERBS):
                end += 1
            return i, end
    for i in range(2, len(lower)):  # no known verb: guess an inflected word after "the noun"
        word = lower[i]
        if (
            len(word) > 3
            and word.endswith(("s", "ed"))
            and not word.endswith("ss")
            and word not in STOPWORDS
            and lower[i - 1] not in _DETERMINERS
            and not word[0].isdigit()
        ):
            return i, i + 1
    return len(lower), len(lower)


def _is_verb(word: str, before: str) -> bool:
    """An auxiliary, or a known verb that is inflected or follows a pronoun/auxiliary.

    A bare base form after a noun ("the launch plan changed") is read as part of the noun.
    """
    if word in _AUX:
        return True
    if stem(word) not in _VERBS or word in _VALUE_WORDS:
        return False
    inflected = (word.endswith(("ed", "s")) and not word.endswith("ss")) or word in _IRREGULAR
    return inflected or before in _PRONOUNS | _AUX | NEGATIONS | _ADVERBS


def _is_value(word: str) -> bool:
    """Numbers, times, dates and capitalised names: the slot values a contradiction changes."""
    low = word.lower()
    if word[:1].isdigit() or low in _VALUE_WORDS:
        return True
    return word[:1].isupper() and low not in STOPWORDS | NEGATIONS


def _value_flags(words: Sequence[str]) -> list[bool]:
    """Which words are values; the word right after a number is its unit ("12 people")."""
    flags = [_is_value(w) for w in words]
    for i in range(1, len(words)):
        if words[i - 1][:1].isdigit() and words[i].lower() not in STOPWORDS | NEGATIONS:
            flags[i] = True
    return flags


def same_subject(a: Claim, b: Claim) -> bool:
    """Equal subject head terms, or one a refinement of the other ("deadline" / "paper deadline")."""
    if not a.subject or not b.subject:
        return False
    return a.subject <= b.subject or b.subject <= a.subject
