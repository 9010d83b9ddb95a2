"""Judging candidate pairs: duplicate, contradiction, related or unrelated.

The model answers through the ``judge`` prompt in batches (reasoning before the
verdict, exactly one judgement per pair key, enforced by a validator so a missing or
extra key is re-asked by the seam). Its answer becomes a closed union,
``Duplicate | Contradiction | Related | Unrelated``.

A contradiction leads to supersession, which archives a note, so a model's word is
not enough: the code checks that both notes share the subject (the part before the
main verb, compared as stemmed head terms) and that the model's stated subject occurs
in both. A "contradiction" failing that is downgraded to ``Related`` and the reason is
carried into the plan (guard against collateral supersession). The claim parser is
the offline judge's (``models/offline/claims.py``), so both apply the same subject test.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Literal, assert_never

from pydantic import BaseModel, ValidationInfo, field_validator, model_validator

from vault_pipeline.errors import ModelError
from vault_pipeline.models.offline.claims import parse_claim, same_subject
from vault_pipeline.models.prompts import load_prompt
from vault_pipeline.models.protocol import StructuredLLM, check_one_per_key
from vault_pipeline.text import content_stems

BATCH_SIZE = 20
MAX_WORKERS = 4

# --------------------------------------------------------------------------- schema


class PairJudgement(BaseModel):
    """One pair's judgement; reasoning comes first so the model reasons before deciding."""

    key: str
    reasoning: str
    subject: str
    relation: Literal["duplicate", "contradiction", "related", "unrelated"]

    @field_validator("key")
    @classmethod
    def _bare_key(cls, value: str) -> str:
        return value.strip().strip("[]").strip()  # models sometimes echo the "[p1]" brackets

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
    downgraded: str = ""  # why a model's "contradiction" was not trusted, if it was one


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


def contradiction_guard(text_a: str, text_b: str, stated_subject: str) -> str:
    """Empty when a contradiction is plausible by subject; else the reason to downgrade it."""
    a, b = parse_claim(text_a), parse_claim(text_b)
    if not same_subject(a, b):
        return (
            f"subjects differ ({' '.join(sorted(a.subject)) or '?'} / "
            f"{' '.join(sorted(b.subject)) or '?'}); a contradiction needs the same subject"
        )
    stated = content_stems(stated_subject)
    if stated and not (stated & a.stems and stated & b.stems):
        return f"the stated subject {stated_subject!r} does not occur in both notes"
    return ""


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
            return Duplicate(reasoning, subject)
        case "contradiction":
            why = contradiction_guard(pair.a, pair.b, subject)
            return Related(reasoning, subject, downgraded=why) if why else Contradiction(reasoning, subject)
        case "related":
            return Related(reasoning, subject)
        case "unrelated":
            return Unrelated(reasoning, subject)
        case _ as unreachable:
            assert_never(unreachable)
