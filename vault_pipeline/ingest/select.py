"""Which candidate statements become notes: a fitted probability that a reader finds the note good.

Every candidate (a verbatim statement from the offline extractor, or a model's unit) is read with
the message it came from: where it stands in the message's structure (a paragraph, a list item
with or without its lead-in, a quote; the turn's first, last or only sentence), who said it, its
form (a question, an instruction, "I" or "you", a pointing word with nothing to point at) and
what it says (its MiniLM vector). A logistic model fitted on notes read by people who did not
write these rules (``benchmarks/bench_selection.py``) turns those signs into the probability of
a good note. Ingest writes a candidate only above the model's ``write`` threshold; ``vault keep
--all-passing`` promotes only above its ``keep`` threshold. Both were chosen on held-out labels
for precision (docs/decisions).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

from vault_pipeline.ingest.categories import Categories
from vault_pipeline.ingest.context import merge_context, unit_context
from vault_pipeline.ingest.extract import MAX_VERBATIM_CONTEXT_WORDS, MAX_VERBATIM_WORDS
from vault_pipeline.ingest.quality import FEATURES, features, is_dutch, meaning_vectors
from vault_pipeline.ingest.specific import specificity
from vault_pipeline.models.logistic import newton, sigmoid
from vault_pipeline.models.offline.statements import Reading, Statement, is_verbatim, key, read_message
from vault_pipeline.text import content_stems, word_count

# Specificity signs (``specific.py``), read for the assistant's statements and the user's apart.
_SPECIFIC: dict[str, str] = {
    "typical": "worded as most conversations are",
    "common_share": "mostly common words",
    "rare_terms": "names rare terms",
    "value": "holds a value with its unit",
    "version": "holds a version",
    "bare_number": "holds a bare number",
    "mid_names": "names things",
    "asked": "what the user asked about",
    "asked_terms": "shares terms with the user's question",
}

# Sign -> what a user reads when it counts against a note. Order is the order of the model's inputs.
SIGNS: dict[str, str] = {
    "user": "from the user's own turn",
    "item": "a list item",
    "item_alone": "a list item without its lead-in",
    "quote": "quoted text",
    "heading": "stands under a heading",
    "labelled": "opens with a label",
    "clause_main": "a clause whose condition went to its context",
    "clause_part": "one clause of a longer sentence",
    "nested": "a nested list item",
    "first": "the turn's first sentence",
    "last": "the turn's last sentence",
    "only": "the turn's only sentence",
    "code_turn": "from a turn around code",
    "rewritten": "not the source's own words",
    "question": "a question",
    "imperative": "an instruction",
    "first_person": "says I or we",
    "second_person": "speaks to the reader",
    "dutch": "Dutch",
    "few_words": "too few words to say much",
    "many_words": "a long sentence",
    "digits": "holds a number",
    "code_span": "holds a code span",
    "names": "names something",
    "context": "has a context line",
    "title_word": "names its conversation's subject",
    "definite_open": "opens on a definite thing not named before",
    "connective_open": "opens on a connective (answers something before it)",
    "placeholder": "holds a placeholder",
    "user_you": "the user speaking to the assistant",
    "user_imperative": "an instruction to the assistant",
    "user_question": "the user's question",
    "assistant_you": "the assistant speaking to the user",
    "assistant_first_person": "the assistant speaking of itself",
    "people": "from a conversation between people",
    "people_first_person": "a person speaking of themselves",
    "people_question": "a person's question",
    **{f"sign:{k}": v for k, v in FEATURES.items()},
    "user_first_person": "the user speaking of themselves",
    "turn_size": "from a long turn",
    "user_turn_size": "from a long turn of the user's (pasted material)",
    **{
        f"{who}{k}": f"{v}{where}"
        for who, where in (("spec:", ""), ("user_spec:", " (the user's)"))
        for k, v in _SPECIFIC.items()
    },
}

_FIRST_PERSON = re.compile(r"\b(i|i'm|i've|i'll|i'd|my|we|we're|we've|our|ik|mijn|wij|we|ons|onze)\b", re.I)
_SECOND_PERSON = re.compile(r"\b(you|your|you're|you'll|you've|yours|je|jij|jouw|u|uw)\b", re.I)
_DEFINITE = re.compile(r"^(?:the|de|het|die|dat)\s+\w+", re.I)
_CONNECTIVE = re.compile(
    r"^(?:so|yes|no|similarly|then|also|additionally|however|finally|lastly|next|now|otherwise|instead|"
    r"dan|ja|nee|dus|ook|verder|daarnaast|vervolgens|tot slot|echter|bovendien)\b,?",
    re.I,
)
_PLACEHOLDER = re.compile(r"\[PII:|<[a-z_ -]+>|\byour[_-]\w+|\bYOUR_|\bxxx+\b|\[(?:name|naam|your [^\]]+)\]", re.I)
_NAME = re.compile(r"(?<=\w[\s(])[A-Z][\w-]*[A-Z0-9]?[\w-]*|`[^`]+`")


@dataclass(frozen=True)
class Candidate:
    """What the selector reads of one candidate note."""

    sentence: str
    context: str | None
    category: str
    speaker: str  # user | assistant
    source: str | None  # the source message's text, where it can be read
    title: str | None = None  # the conversation's title
    people: bool = False  # a conversation between people (named speakers, no assistant)
    question: str | None = None  # the user's message this one answers (an assistant's candidate only)


def locate(sentence: str, source: str | None) -> tuple[Statement | None, Reading | None]:
    """The source message's statement that is this sentence (verbatim), and the message as read. A
    sentence the message says more than once is the one that can be a note: a list item under its
    lead-in or heading before the same item alone (the extractor writes no lone item)."""
    if not source:
        return None, None
    reading = _reading(source)
    wanted = key(sentence)
    said = [s for s in reading.statements if key(s.text) == wanted]
    return next((s for s in said if not _alone(s)), said[0] if said else None), reading


def _alone(s: Statement) -> bool:
    """A list item with neither a lead-in nor a heading to stand under."""
    return s.kind == "item" and s.lead is None and s.heading is None


@lru_cache(maxsize=64)
def _reading(source: str) -> Reading:
    """A message read once for all its candidates (a lead-in among them: the user's may be one)."""
    return read_message(source, MAX_VERBATIM_WORDS, MAX_VERBATIM_CONTEXT_WORDS, lead_ins=True)


def signs(c: Candidate) -> dict[str, float]:
    """The selector's inputs for one candidate: structure, speaker, form (0/1 each) and specificity (0-1)."""
    found, reading = locate(c.sentence, c.source)
    text = c.sentence
    on = _form(c, rewritten=found is None)
    if found is not None and reading is not None:
        on.update(_structure(found, reading))
    quality = features(text, c.source)
    on["imperative"] = quality.pop("imperative", False)
    on.update(_who(c, on))
    on.update({f"sign:{k}": v for k, v in quality.items()})
    found_on = {k: 1.0 for k, v in on.items() if v and k in SIGNS}
    own = c.speaker == "user" and not c.people  # the user's own statement, said to the assistant
    if reading is not None:
        found_on["user_turn_size" if own else "turn_size"] = _turn_size(reading)
    prefix = "user_spec:" if own else "spec:"
    found_on.update((prefix + k, v) for k, v in specificity(text, c.context, c.question).items())
    return found_on


def _form(c: Candidate, rewritten: bool) -> dict[str, bool]:
    """The candidate's speaker and the form of its sentence."""
    text = c.sentence
    words = word_count(text)
    return {
        "user": c.speaker == "user",
        "rewritten": rewritten,
        "question": text.rstrip("\"'”’)]").endswith("?"),
        "first_person": bool(_FIRST_PERSON.search(text)),
        "second_person": bool(_SECOND_PERSON.search(text)),
        "dutch": is_dutch(text),
        "few_words": words < 6,
        "many_words": words > 15,
        "digits": any(ch.isdigit() for ch in text),
        "code_span": "`" in text,
        "names": bool(_NAME.search(text)),
        "context": bool(c.context),
        "title_word": bool(c.title) and bool(content_stems(text) & content_stems(c.title or "")),
        "definite_open": bool(_DEFINITE.match(text)),
        "connective_open": bool(_CONNECTIVE.match(text)),
        "placeholder": bool(_PLACEHOLDER.search(text)),
    }


def _who(c: Candidate, on: Mapping[str, bool]) -> dict[str, bool]:
    """Who speaks to whom: the user to the assistant, the assistant to the user, or people to each other."""
    if c.people:
        return {
            "user": False,
            "people": True,
            "people_first_person": on["first_person"],
            "people_question": on["question"],
        }
    user = c.speaker == "user"
    return {
        "user_you": user and on["second_person"],
        "user_imperative": user and on["imperative"],
        "user_question": user and on["question"],
        "user_first_person": user and on["first_person"],
        "assistant_you": not user and on["second_person"],
        "assistant_first_person": not user and on["first_person"],
    }


def _structure(s: Statement, reading: Reading) -> dict[str, bool]:
    count = reading.sentences
    return {
        "item": s.kind == "item",
        "item_alone": _alone(s),
        "quote": s.kind == "quote",
        "heading": s.heading is not None,
        "labelled": s.label is not None,
        "clause_main": s.clause == "main",
        "clause_part": s.clause == "part",
        "nested": s.depth > 1,
        "first": s.sentence == 0 and count > 1,
        "last": s.sentence == count - 1 and count > 1,
        "only": count == 1,
        "code_turn": reading.code_blocks > 0,
    }


def _turn_size(reading: Reading) -> float:
    """How long the turn is, 0 (one sentence) to 1 (40 sentences or more): a long user turn is mostly
    pasted material, not what they say of themselves."""
    return min(reading.sentences, 40) / 40


# --------------------------------------------------------------------------- the model


@dataclass(frozen=True)
class Selector:
    """Logistic weights over ``SIGNS`` and the sentence's MiniLM vector; two thresholds on P(good)."""

    weights: Mapping[str, float]
    bias: float
    write: float  # ingest writes a candidate at or above this probability
    keep: float  # `vault keep --all-passing` promotes a note at or above this probability
    meaning: tuple[float, ...] = ()
    note: str = ""
    categories: Categories = field(default_factory=lambda: Categories({}))  # none fitted: the cue category stands
    # The user's own statements are read at their own thresholds (fitted for recall of what is theirs).
    write_user: float | None = None
    keep_user: float | None = None

    def write_for(self, speaker: str, people: bool = False) -> float:
        """The write threshold for a candidate of this speaker (people talking to each other: the base one)."""
        return self.write_user if speaker == "user" and not people and self.write_user is not None else self.write

    def keep_for(self, speaker: str, people: bool = False) -> float:
        """The keep threshold for a note of this speaker."""
        return self.keep_user if speaker == "user" and not people and self.keep_user is not None else self.keep

    def probability(self, on: Mapping[str, float], vector: Sequence[float] | None = None) -> float:
        z = self.bias + math.fsum(self.weights.get(k, 0.0) * v for k, v in on.items())
        if self.meaning and vector is not None:
            z += math.fsum(w * float(x) for w, x in zip(self.meaning, vector))
        return sigmoid(z)

    def reasons(self, on: Mapping[str, float], vector: Sequence[float] | None = None) -> list[str]:
        """The signs that count most against a note, heaviest first (at most three)."""
        against = sorted((self.weights.get(k, 0.0), k) for k in on if self.weights.get(k, 0.0) < 0)
        found = [SIGNS[k] for _, k in against[:3]]
        meaning = math.fsum(w * float(x) for w, x in zip(self.meaning, vector or ()))
        if meaning < 0 and (not against or meaning < against[0][0]):
            found.insert(0, "reads like the notes people judged not worth keeping")
        return found[:3] or ["low score"]


@dataclass
class Scored:
    """A candidate with its probability and, below the write threshold, why."""

    candidate: Candidate
    probability: float
    reasons: list[str] = field(default_factory=list)
    category: str = ""  # the fitted category ("" : the candidate's own)


def score(candidates: Sequence[Candidate], model: Selector | None = None) -> list[Scored]:
    """P(good) for each candidate (one embedding batch for all of them, when the model reads meaning)."""
    model = model or _shipped()
    found = [signs(c) for c in candidates]
    vectors: list[Any] = [None] * len(candidates)
    if model.meaning and candidates:
        vectors = meaning_vectors([c.sentence for c in candidates])
    out = []
    for c, on, vector in zip(candidates, found, vectors):
        bar = max(model.write_for(c.speaker, c.people), model.keep_for(c.speaker, c.people))  # below either, say why
        p = model.probability(on, vector)
        filed = model.categories.category(on, c.category, c.speaker)
        out.append(Scored(c, p, [] if p >= bar else model.reasons(on, vector), filed))
    return out


def load_selector(path: Path) -> Selector:
    data = json.loads(path.read_text(encoding="utf-8"))
    categories = Categories({c: (m["bias"], m["weights"]) for c, m in data.get("categories", {}).items()})
    return Selector(
        data["weights"],
        data["bias"],
        data["write"],
        data["keep"],
        tuple(data.get("meaning", ())),
        data.get("note", ""),
        categories,
        data.get("write_user"),
        data.get("keep_user"),
    )


def dump_selector(model: Selector, path: Path) -> None:
    """Sorted, indented JSON: the same fit writes the same bytes."""
    data = {
        "note": model.note,
        "bias": model.bias,
        "write": model.write,
        "keep": model.keep,
        "write_user": model.write_user,
        "keep_user": model.keep_user,
        "weights": dict(sorted(model.weights.items())),
        "meaning": list(model.meaning),
        "categories": {
            c: {"bias": b, "weights": dict(sorted(w.items()))} for c, (b, w) in sorted(model.categories.models.items())
        },
    }
    path.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


def fit(
    rows: Sequence[Mapping[str, float]],
    labels: Sequence[bool],
    vectors: Sequence[Sequence[float]] | None = None,
    *,
    l2: float = 1.0,
    meaning_scale: float = 1.0,
) -> Selector:
    """Fit the weights (L2-regularised logistic regression); thresholds are set by the caller."""
    design = [dict(r) for r in rows]
    dims = [f"meaning:{i}" for i in range(len(vectors[0]) if vectors else 0)]
    for row, vector in zip(design, vectors or ()):
        row.update((d, float(v) * meaning_scale) for d, v in zip(dims, vector))
    weights, bias = newton(design, labels, [*SIGNS, *dims], l2=l2, steps=100, tolerance=1e-6)
    meaning = tuple(round(weights[d] * meaning_scale, 5) for d in dims)
    return Selector({k: round(weights[k], 4) for k in SIGNS if round(weights[k], 4)}, round(bias, 4), 0.5, 0.5, meaning)


SELECTOR_FILE = Path(__file__).with_name("selector.json")


@lru_cache(maxsize=1)
def _shipped() -> Selector:
    return load_selector(SELECTOR_FILE)


def shipped(write: float | None = None, keep: float | None = None) -> Selector:
    """The selector shipped with the package (``selector.json``, read once), with the user's thresholds
    (``[ingest] write_threshold`` and ``keep_threshold``) where given."""
    model = _shipped()
    if write is None and keep is None:
        return model
    return replace(
        model,
        write=model.write if write is None else write,
        keep=model.keep if keep is None else keep,
        write_user=model.write_user if write is None else None,  # the user's threshold is the one they set
        keep_user=model.keep_user if keep is None else None,
    )


# --------------------------------------------------------------------------- at ingest


@dataclass(frozen=True)
class Selection:
    """What selection made of one conversation's units: the ones to write (with their probability,
    None for a unit that is not its source's own words: a model's note, written as the model gave
    it) and why each of the rest was not written (its heaviest reason)."""

    written: tuple[tuple[Any, float | None], ...]
    not_written: tuple[str, ...]


def questions(messages: Sequence[Any]) -> dict[str, str]:
    """Each assistant message's id -> the text of the user's message before it (what it answers)."""
    out: dict[str, str] = {}
    last: str | None = None
    for m in messages:
        if m.role == "user":
            last = m.text
        elif last is not None:
            out[m.id] = last
    return out


def select_units(conversation: Any, units: Sequence[Any], model: Selector | None = None) -> Selection:
    """Score a conversation's verbatim units and keep those at or above the write threshold; topic
    units and a model's own (rewritten) units pass as they are."""

    model = model or _shipped()
    texts = {m.id: m.text for m in conversation.messages}
    asked = questions(conversation.messages)
    people = not any(m.role == "assistant" for m in conversation.messages)
    title = conversation.title if conversation.titled else None
    judged = [
        i
        for i, u in enumerate(units)
        if u.category != "topic" and (source := texts.get(u.source_ids[0])) is not None and is_verbatim(u.text, source)
    ]
    candidates = [
        Candidate(
            units[i].text,
            merge_context(units[i].context, unit_context(units[i], conversation)[1]),  # the Context line as written
            units[i].category,
            units[i].speaker,
            texts[units[i].source_ids[0]],
            title,
            people,
            asked.get(units[i].source_ids[0]),
        )
        for i in judged
    ]
    scored = dict(zip(judged, score(candidates, model)))
    written: list[tuple[Any, float | None]] = []
    refused: list[str] = []
    for i, unit in enumerate(units):
        s = scored.get(i)
        if s is None:
            written.append((unit, None))
        elif s.probability >= model.write_for(unit.speaker, people):
            filed = unit if s.category in ("", unit.category) else unit.model_copy(update={"category": s.category})
            written.append((filed, round(s.probability, 3)))
        else:
            refused.append(s.reasons[0] if s.reasons else "low score")
    return Selection(tuple(written), tuple(refused))
