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
from vault_pipeline.vault.format import context_text

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
_DEFINITE = frozenset("the our my your their his her its".split())
_DEMONSTRATIVES = frozenset("this that these those such".split())
# Prepositions whose object is one of possibly many ("about X", "with Y", "like Z"): no single slot.
_MANY_VALUED = frozenset("about with like including among between alongside besides".split())
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
_VERB_TAIL = NEGATIONS | _ADVERBS  # words a verb group may run on through
_BEFORE_BARE_VERB = _PRONOUNS | _AUX | NEGATIONS | _ADVERBS


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
    topic: bool = False  # no subject before the verb (a pronoun, an imperative): topic words stand in
    determined: bool = False  # a definite article or possessive precedes the subject ("the deadline")
    anaphoric: bool = False  # a demonstrative points outside the note ("this approach", "that one")
    relational: bool = False  # the predicate opens with a many-valued preposition ("is about X")
    question: bool = False  # a question, not a claim ("Can I ...?", "What can you expect.")
    core: frozenset[str] = frozenset()  # content stems without light verbs: equal for any duplicate pair
    forms: tuple[tuple[str, str], ...] = ()  # (stem, word as written, lower-cased): a reason shows words


@lru_cache(maxsize=200_000)
def parse_claim(text: str) -> Claim:
    """Split a claim into subject, main verb, values and cues (first line only; no POS tagger)."""
    first, label = _claim_line(text)
    words = tokens(_REPORTING.sub("", _LABEL.sub("", first)), keep_case=True)
    lower = [w.lower() for w in words]
    stems = [stem(w) for w in lower]
    start, end = _verb_group(lower)
    head, tail = _head_and_tail(words, lower, start, end)
    values, units, rest = _predicate(words, lower, stems, tail)
    subject = [i for i in head if lower[i] not in _NOT_SUBJECT]
    topic = not subject
    if topic:  # "We moved the launch to May 10": the topic words stand in for the subject
        subject, rest = rest, []
    kept = [(s, w) for s, w in zip(stems, lower) if w not in STOPWORDS]  # (stem, word) of the non-stopwords
    return Claim(
        subject=frozenset(stems[i] for i in subject),
        verb=_main_verb(lower[start:end]),
        rest=frozenset(stems[i] for i in rest),
        values=values,
        units=units,
        negated=_negated(lower),
        changed=_changed(stems),
        stems=frozenset(s for s, _ in kept),
        subject_words=tuple(dict.fromkeys(lower[i] for i in subject)),
        topic=topic,
        determined=_any_in(lower, head, _DEFINITE),
        anaphoric=_any_in(lower, head, _DEMONSTRATIVES),
        relational=bool(tail) and lower[tail[0]] in _MANY_VALUED,
        question=_is_question(first, lower),
        core=_core(kept, label),
        forms=tuple(dict.fromkeys(zip(stems, lower))),
    )


def _claim_line(text: str) -> tuple[str, str]:
    """(the claim's first line, the label it had or ""): "Update on the paper: the deadline moved ..."
    gives the claim after the label when the label is short and the claim long enough."""
    first = text.strip().splitlines()[0] if text.strip() else ""
    label, sep, after = first.partition(": ")
    if sep and len(label.split()) <= 5 and len(after.split()) >= 4:
        return after, label
    return first, ""


def _head_and_tail(words: list[str], lower: list[str], start: int, end: int) -> tuple[list[int], list[int]]:
    """Word positions before the verb group ``[start, end)`` and after it."""
    head, tail = list(range(start)), list(range(end, len(words)))
    if head and set(lower[start:end]) <= _COPULAS and all(_value_flags(words[:start])):
        head, tail = tail, head  # "6416 is the port" says "the port is 6416"
    return head, tail


def _predicate(
    words: list[str], lower: list[str], stems: list[str], tail: list[int]
) -> tuple[frozenset[str], frozenset[str], list[int]]:
    """(values, units, positions of the other content words) of the words after the verb."""
    flags = _value_flags([words[i] for i in tail])
    values = frozenset(lower[i] for i, flag in zip(tail, flags) if flag)
    units = frozenset(stems[j] for i, j in pairwise(tail) if words[i][:1].isdigit() and lower[j] not in _NOT_CONTENT)
    rest = [i for i in tail if lower[i] not in _NOT_CONTENT and lower[i] not in values and stems[i] not in CHANGE_CUES]
    return values, units, rest


def _main_verb(group: list[str]) -> str:
    """The stem of the verb group's last word that is not a negation ("" for none)."""
    verbs = [w for w in group if w not in NEGATIONS]
    return stem(verbs[-1]) if verbs else ""


def _changed(stems: list[str]) -> bool:
    """A change cue such as "moved to", "no longer", "instead of", or a cancellation."""
    return bool(CHANGE_CUES.intersection(stems)) or "cancel" in stems


def _any_in(lower: list[str], positions: list[int], words: frozenset[str]) -> bool:
    return any(lower[i] in words for i in positions)


def _negated(lower: Sequence[str]) -> bool:
    """An odd number of negation cues."""
    return sum(w in NEGATIONS for w in lower) % 2 == 1


def _verb_group(lower: list[str]) -> tuple[int, int]:
    """[start, end) of the main verb group ("will be held"); (n, n) when no verb is found."""
    for i, word in enumerate(lower):
        if i == 0 and word not in _PRONOUNS:
            continue  # the subject needs at least one word; imperatives keep the whole line
        if lower[i - 1] in _DETERMINERS:
            continue  # "the meeting", "our launch": a noun, whatever verb it looks like
        if _is_verb(word, lower[i - 1] if i else ""):
            return i, _verb_group_end(lower, i + 1)
    for i in range(2, len(lower)):  # no known verb: guess an inflected word after "the noun"
        if _guessed_verb(lower[i], lower[i - 1]):
            return i, i + 1
    return len(lower), len(lower)


def _verb_group_end(lower: list[str], end: int) -> int:
    """Where a verb group starting before ``end`` stops: it runs on through verbs, negations and adverbs."""
    while end < len(lower) and (_is_verb(lower[end], "will") or lower[end] in _VERB_TAIL):
        end += 1
    return end


def _guessed_verb(word: str, before: str) -> bool:
    """An unknown word that looks inflected (``-s``, ``-ed``) and does not follow a determiner."""
    return (
        len(word) > 3
        and word.endswith(("s", "ed"))
        and not word.endswith("ss")
        and word not in STOPWORDS
        and before not in _DETERMINERS
        and not word[0].isdigit()
    )


def _is_verb(word: str, before: str) -> bool:
    """An auxiliary, or a known verb that is inflected or follows a pronoun/auxiliary.

    A bare base form after a noun ("the launch plan changed") is read as part of the noun.
    """
    if word in _AUX:
        return True
    if stem(word) not in _VERBS or word in _VALUE_WORDS:
        return False
    inflected = (word.endswith(("ed", "s")) and not word.endswith("ss")) or word in _IRREGULAR
    return inflected or before in _BEFORE_BARE_VERB


def _is_value(word: str) -> bool:
    """Numbers, times, dates and capitalised names: the slot values a contradiction changes."""
    low = word.lower()
    if word[:1].isdigit() or low in _VALUE_WORDS:
        return True
    return word[:1].isupper() and low not in _NOT_CONTENT


def _value_flags(words: Sequence[str]) -> list[bool]:
    """Which words are values; the word right after a number is its unit ("12 people")."""
    flags = [_is_value(w) for w in words]
    for i in range(1, len(words)):
        if words[i - 1][:1].isdigit() and words[i].lower() not in _NOT_CONTENT:
            flags[i] = True
    return flags


def same_subject(a: Claim, b: Claim) -> bool:
    """Equal subject head terms, or one a refinement of the other ("deadline" / "paper deadline")."""
    if not a.subject or not b.subject:
        return False
    return a.subject <= b.subject or b.subject <= a.subject


# --------------------------------------------------------------------------- asymmetric caution
# A wrong merge or supersession hides a note; a missed one costs a little redundancy. So the
# checks below are strict and closed-class: they look at what carries meaning (polarity, numbers,
# names, identifiers, question vs statement, every content word) rather than at word overlap.

# Words that point elsewhere instead of naming a subject: "None of the above", "the same".
DEICTIC = frozenset(
    stem(w)
    for w in "above below following previous preceding former latter same other others one ones "
    "thing things something everything anything nothing stuff way case example option answer".split()
)
# Verbs that carry no content of their own beyond "there is / it holds" (copulas, occurrence,
# value-setting, reporting), as inflected forms, so the noun "meeting" still counts while the
# verb "meets" does not. Two notes may differ in these and still say the same thing:
# "The team meets every Tuesday" / "... happens on Tuesdays"; "is set to" / "has been fixed at".
LIGHT = frozenset(
    "become becomes became remain remains remained stay stays stayed happen happens happened occur occurs "
    "occurred hold holds held meet meets met set fixed agreed decided confirmed noted pm oclock".split()
)
_LIGHT_STEMS = frozenset(stem(w) for w in LIGHT)
_QUESTION_END = re.compile(r"\?[\s\"'”’)\]*_]*$")
_IDENTIFIER = re.compile(
    r"\b[A-Za-z_][A-Za-z0-9_]*(?:[._/][A-Za-z0-9_]+)+\b|\b[a-z]+[A-Z][A-Za-z0-9]*\b|\b[A-Z][a-z]+[A-Z][A-Za-z0-9]*\b"
)
# A Context line that reports where a claim was made, not when it holds (reporting verbs, "from").
_PROVENANCE = re.compile(
    r"^(?:mentioned|confirmed|noted|said|stated|discussed|agreed|decided|raised|reported|from)\b", re.I
)
_WH = frozenset("what which who whom whose when where why how".split())
_TIME = re.compile(r"^(\d{1,2}):00$")


@dataclass(frozen=True)
class Details:
    """What carries meaning in a note's first line, for the duplicate test."""

    question: bool
    negated: bool
    numbers: frozenset[str]  # numbers and times, normalised ("nine" = "9 am" = "9:00" = "9")
    names: frozenset[str]  # capitalised words after the first, weekdays and months (stemmed)
    identifiers: frozenset[str]  # code-like names (minReplicas, ProductGroups, a.b, x_y), lower-cased
    content: frozenset[str]  # stemmed content words, numbers and negations left out
    words: frozenset[str]  # every stem of the line (where a name may occur in the other note)


@lru_cache(maxsize=200_000)
def details(text: str) -> Details:
    """The meaning-carrying details of a note's claim line and its ``Context:`` qualifier.

    A "Decision:" style label and a reporting clause ("We agreed that") are packaging and go;
    the Context line ("for small samples", "if the workflow was triggered by a push") narrows
    the claim, so its words count as much as the claim's; a Context that only says where the
    claim was made ("mentioned during the planning call", "from the retro notes") does not.
    """
    lines = text.strip().splitlines() if text.strip() else [""]
    first = _REPORTING.sub("", _LABEL.sub("", lines[0]))
    context = _qualifier(lines[1:])
    cased = tokens(first, keep_case=True) + tokens(context, keep_case=True)
    lower = [w.lower() for w in cased]
    return Details(
        question=_is_question(first, lower),
        negated=_negated(lower),
        numbers=frozenset(_numbers(lower)),
        names=frozenset(_names(cased)),
        identifiers=frozenset(m.lower() for m in _IDENTIFIER.findall(f"{first} {context}")),
        content=frozenset(stem(w) for w in lower if w not in _NOT_CONTENT and w not in LIGHT and not w[:1].isdigit()),
        words=frozenset(stem(w) for w in lower),
    )


def _qualifier(lines: Sequence[str]) -> str:
    """The ``Context:`` lines' text, but for a Context that only says where the claim was made."""
    return " ".join(
        qualifier
        for line in lines
        if (qualifier := context_text(line)) is not None and not _PROVENANCE.match(qualifier)
    )


def _numbers(lower: list[str]) -> list[str]:
    """The numbers and times of a line, normalised: "9:00", "9 am" and "9" are "9"; "2 pm" is "14"."""
    numbers = []
    for i, w in enumerate(lower):
        if not w[:1].isdigit():
            continue
        value = _TIME.sub(r"\1", w.removesuffix("am").removesuffix("pm"))
        after = lower[i + 1] if i + 1 < len(lower) else ""
        if (w.endswith("pm") or after == "pm") and value.isdigit() and int(value) < 12:
            value = str(int(value) + 12)
        numbers.append(value)
    return numbers


def _names(cased: list[str]) -> set[str]:
    """Stems of capitalised words after the first, and of weekdays and months."""
    return {
        stem(w.lower())
        for i, w in enumerate(cased)
        if (i > 0 and w[:1].isupper() and w.lower() not in _NOT_CONTENT) or w.lower().rstrip("s") in _VALUE_WORDS
    } - {"am", "pm"}


def _core(kept: Sequence[tuple[str, str]], label: str) -> frozenset[str]:
    """Content stems of the whole first line (a stripped label's too), light verbs and numbers out.

    ``kept``: the line's (stem, word) pairs without stopwords."""
    if label:
        more = [w.lower() for w in tokens(_LABEL.sub("", label))]
        kept = [*kept, *((stem(w), w) for w in more if w not in STOPWORDS)]
    return frozenset(s for s, w in kept if w not in NEGATIONS and not w[:1].isdigit()) - _LIGHT_STEMS


def _is_question(line: str, lower: Sequence[str]) -> bool:
    """A question mark at the end, or a wh-word before an auxiliary ("What can you expect.")."""
    return bool(_QUESTION_END.search(line)) or (len(lower) > 1 and lower[0] in _WH and lower[1] in _AUX)


def detail_conflict(text_a: str, text_b: str) -> str:
    """Why two notes cannot state one claim by their hard details, or "" (any judge's duplicate)."""
    a, b = details(text_a), details(text_b)
    if a.question != b.question:
        return "one note asks what the other states"
    if a.negated != b.negated:
        return "one note negates what the other asserts"
    if a.numbers != b.numbers:
        return f"the numbers differ ({_show(a.numbers - b.numbers)} / {_show(b.numbers - a.numbers)})"
    if a.identifiers != b.identifiers:
        return (
            f"the identifiers differ ({_show(a.identifiers - b.identifiers)} / {_show(b.identifiers - a.identifiers)})"
        )
    missing = (a.names - b.words) | (b.names - a.words)
    if missing:
        return f"a name occurs in only one note ({_show(missing)})"
    return ""


def meaning_gap(text_a: str, text_b: str) -> str:
    """Why two notes do not say the same thing in every meaning-carrying detail, or "" when they do.

    Every content word of each note must occur in the other, except light verbs (``LIGHT``), and
    the hard details must agree (``detail_conflict``); numbers are already normalised. The word
    test comes first: it settles almost every pair of a sweep at the cost of one set comparison.
    """
    a, b = details(text_a), details(text_b)
    if a.content != b.content:
        only_a, only_b = a.content - b.content, b.content - a.content
        return f"words of one note are missing from the other ({_show(only_a) or '-'} / {_show(only_b) or '-'})"
    if not a.content:
        return "no content word in common"
    return detail_conflict(text_a, text_b)


def subject_weakness(claim: Claim) -> str:
    """Why a claim's subject is too weak to supersede on, or "" for a real, specific subject.

    A supersession needs a subject the note itself names: not a pronoun or an imperative (the
    topic words stood in), not a pointer ("above", "this one"), not a bare generic noun
    ("Transformations never ...", "images"): a definite article or a possessive ("the deadline",
    "our budget") is how English marks one specific, identifiable thing. And the attribute must
    hold one value: "is about X" / "is about Y" (or with, like, including ...) can both be true.
    """
    if claim.topic or not claim.subject:
        return "no subject of its own (a pronoun or an instruction)"
    if claim.anaphoric:
        return "the subject points outside the note (this/that)"
    specific = claim.subject - DEICTIC
    if not specific:
        return f"the subject only points elsewhere ({' '.join(claim.subject_words)})"
    if not claim.determined:
        return f"no definite subject ({' '.join(claim.subject_words)}): a bare noun names a class, not one thing"
    if claim.relational:
        return "the predicate relates the subject to one of possibly many things (about, with, like ...)"
    return ""


def _show(items: frozenset[str]) -> str:
    return ", ".join(sorted(items))
