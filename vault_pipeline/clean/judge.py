"""Judging candidate pairs: duplicate, contradiction, related or unrelated.

The model answers through the ``judge`` prompt in batches (reasoning before the
verdict, exactly one judgement per pair key, enforced by a validator so a missing or
extra key is re-asked by the seam). Its answer becomes a closed union,
``Duplicate | Contradiction | Related | Unrelated``.

A duplicate or a contradiction archives a note, so a model's word is not enough (the
caution is asymmetric: a wrong merge hides a note, a missed one costs a little
redundancy). The code checks:

* a contradiction: the model named the shared subject and the changed attribute; both
  notes share the subject (the part before the main verb, compared as stemmed head
  terms), it is a real subject (not a pronoun, "above", a bare generic noun), the stated
  subject and attribute occur in both notes, and neither note is a question;
* a duplicate: the hard details agree (polarity, numbers, names, identifiers, question or
  statement), whatever the model's reasoning.

A verdict failing its check is downgraded to ``Related`` and the reason is carried into
the plan. The claim parser is the offline judge's (``models/offline/claims.py``), so both
paths apply the same tests.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Literal, assert_never

from pydantic import BaseModel, ValidationInfo, field_validator, model_validator

from vault_pipeline.errors import ModelError
from vault_pipeline.models.offline.claims import detail_conflict, parse_claim, same_subject, subject_weakness
from vault_pipeline.models.prompts import load_prompt
from vault_pipeline.models.protocol import BatchKey, StructuredLLM, check_one_per_key
from vault_pipeline.text import content_stems

BATCH_SIZE = 20
MAX_WORKERS = 4

# --------------------------------------------------------------------------- schema


class PairJudgement(BaseModel):
    """One pair's judgement; reasoning comes first so the model reasons before deciding.

    ``subject`` names what both notes are about and ``attribute`` what of it the newer note
    changes (empty unless a contradiction); the guard checks both against the notes' words.
    """

    key: BatchKey
    reasoning: str
    subject: str
    attribute: str = ""
    relation: Literal["duplicate", "contradiction", "related", "unrelated"]

    @field_validator("relation", mode="before")
    @classmethod
    def _lower(cls, value: object) -> object:
        return value.strip().lower() if isinstance(value, str) else value


class PairJudgements(BaseModel):
    """A batch's answer: exactly one judgement per pair key given in the validation context."""

    judgements: list[PairJudgement]

    @model_validator(mode="after")
    def _one_per_key(self, info: ValidationInfo) -> PairJudgements:
        check_one_per_key([item.key for item in self.judgements], info.context, "judgement")
        return self


# --------------------------------------------------------------------------- the closed union


@dataclass(frozen=True)
class Duplicate:
    """Both notes state the same claim."""

    reasoning: str
    subject: str = ""


@dataclass(frozen=True)
class Contradiction:
    """Same subject and predicate, different value or polarity: the newer supersedes the older."""

    reasoning: str
    subject: str = ""


@dataclass(frozen=True)
class Related:
    """Same subject, both claims stay true (or a contradiction the guard downgraded)."""

    reasoning: str
    subject: str = ""
    downgraded: str = ""  # why a model's "contradiction" or "duplicate" was not trusted, if it was one
    was: str = "contradiction"  # what the model said, when downgraded


@dataclass(frozen=True)
class Unrelated:
    """Different subjects, whatever words they share."""

    reasoning: str
    subject: str = ""


Relation = Duplicate | Contradiction | Related | Unrelated


def relation_name(relation: Relation) -> str:
    """The plan word for a relation."""
    match relation:
        case Duplicate():
            return "duplicate"
        case Contradiction():
            return "contradiction"
        case Related():
            return "related"
        case Unrelated():
            return "unrelated"
        case _:
            assert_never(relation)


def contradiction_guard(text_a: str, text_b: str, stated_subject: str, stated_attribute: str = "") -> str:
    """Empty when a contradiction is plausible by subject and attribute; else the reason to downgrade it."""
    a, b = parse_claim(text_a), parse_claim(text_b)
    if not same_subject(a, b):
        return (
            f"subjects differ ({' '.join(sorted(a.subject)) or '?'} / "
            f"{' '.join(sorted(b.subject)) or '?'}); a contradiction needs the same subject"
        )
    weak = subject_weakness(a) or subject_weakness(b)
    if weak:
        return f"{weak}; a supersession needs a real, specific subject"
    if a.question or b.question:
        return "one note is a question; a question is not a claim to supersede"
    stated = content_stems(stated_subject)
    if not stated:
        return "the judge named no shared subject"
    if not (stated & a.stems and stated & b.stems):
        return f"the stated subject {stated_subject!r} does not occur in both notes"
    attribute = content_stems(stated_attribute)
    if not attribute:
        return "the judge named no changed attribute"
    if not (attribute & (a.stems | a.subject) and attribute & (b.stems | b.subject)):
        return f"the stated attribute {stated_attribute!r} does not occur in both notes"
    return ""


def duplicate_guard(text_a: str, text_b: str) -> str:
    """Empty when two notes may state one claim by their hard details; else the reason to downgrade."""
    return detail_conflict(text_a, text_b)


# --------------------------------------------------------------------------- batching


@dataclass(frozen=True)
class PairText:
    """What the judge sees of one pair; ``a`` is the older note."""

    key: str
    a: str
    b: str
    a_created: str
    b_created: str


@dataclass
class Verdicts:
    """Every judged key's relation, and the keys whose batch failed (left alone, with a reason)."""

    relations: dict[str, Relation]
    failed: dict[str, str]


def judge_pairs(
    llm: StructuredLLM,
    pairs: Sequence[PairText],
    *,
    batch_size: int = BATCH_SIZE,
    progress: Callable[[int, int], None] | None = None,
) -> Verdicts:
    """Judge ``pairs`` in batches through the model seam; a failed batch is skipped, never guessed."""
    prompt = load_prompt("judge")
    batches = [list(pairs[i : i + batch_size]) for i in range(0, len(pairs), max(1, batch_size))]
    verdicts = Verdicts({}, {})

    def run(batch: list[PairText]) -> PairJudgements:
        variables = {"pairs": [vars(p) for p in batch]}
        return llm.call(prompt, variables, PairJudgements, context={"keys": [p.key for p in batch]})

    # Remote models are I/O bound: overlap a few calls (results still taken in batch order).
    # The offline judge is CPU bound: serial.
    workers = MAX_WORKERS if llm.remote and len(batches) > 1 else 1
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="vault-judge") as pool:
        answers = pool.map(_settled(run), batches) if workers > 1 else map(_settled(run), batches)
        done = 0
        for batch, answer in zip(batches, answers):
            if isinstance(answer, ModelError):
                verdicts.failed.update({p.key: f"judge failed: {answer.reason}" for p in batch})
            else:
                _collect(batch, answer, verdicts)
            done += len(batch)
            if progress:
                progress(done, len(pairs))
    return verdicts


def _settled(
    run: Callable[[list[PairText]], PairJudgements],
) -> Callable[[list[PairText]], PairJudgements | ModelError]:
    """Turn a batch's ModelError into a value, so one bad batch does not stop the others."""

    def call(batch: list[PairText]) -> PairJudgements | ModelError:
        try:
            return run(batch)
        except ModelError as exc:
            return exc

    return call


def _collect(batch: list[PairText], answer: PairJudgements, verdicts: Verdicts) -> None:
    by_key = {j.key: j for j in answer.judgements}
    for pair in batch:
        judgement = by_key.get(pair.key)
        if judgement is None:  # a backend that ignores the validation context
            verdicts.failed[pair.key] = "judge returned no judgement for this pair"
            continue
        verdicts.relations[pair.key] = to_relation(judgement, pair)


def to_relation(judgement: PairJudgement, pair: PairText) -> Relation:
    """The union member for a validated judgement, after the code-side contradiction guard."""
    reasoning, subject = judgement.reasoning, judgement.subject
    match judgement.relation:
        case "duplicate":
            why = duplicate_guard(pair.a, pair.b)
            return (
                Related(reasoning, subject, downgraded=why, was="duplicate") if why else Duplicate(reasoning, subject)
            )
        case "contradiction":
            why = contradiction_guard(pair.a, pair.b, subject, judgement.attribute)
            return Related(reasoning, subject, downgraded=why) if why else Contradiction(reasoning, subject)
        case "related":
            return Related(reasoning, subject)
        case "unrelated":
            return Unrelated(reasoning, subject)
        case _ as unreachable:
            assert_never(unreachable)
