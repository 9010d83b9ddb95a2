"""The Note Quality Gate judged by a model (``[models] quality``), behind the same verdicts.

With a model configured, ``vault keep`` asks it about each candidate note, with the note's
source message beside it (``prompts/quality.md``): good, mangled, fragment or meaningless, and
why. The hard rules (the word limit, one sentence, the sentence type, faithfulness to the
source's literal tokens) still apply on top; only the fitted gate's softer judgement is
replaced. A batch the model cannot answer (an error, or no valid answer after the re-asks)
falls back to the fitted offline gate for its notes, and the report says how many.
The offline default never calls this: the fitted gate is the offline judge.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ValidationInfo, model_validator

from vault_pipeline.errors import NEVER_VALIDATED, ModelError
from vault_pipeline.models.prompts import load_prompt
from vault_pipeline.models.protocol import BatchKey, StructuredLLM, check_one_per_key

BATCH = 20  # notes per call: short sentences with a source excerpt each
SOURCE_CHARS = 600  # of the source message a note is judged against


class QualityVerdict(BaseModel):
    """One note's judgement; reasoning comes before the label on purpose."""

    key: BatchKey
    reasoning: str
    label: Literal["good", "mangled", "fragment", "meaningless"]
    reason: str = ""


class QualityVerdicts(BaseModel):
    """A batch's answer: exactly one verdict per note key given in the validation context."""

    verdicts: list[QualityVerdict]

    @model_validator(mode="after")
    def _one_per_key(self, info: ValidationInfo) -> QualityVerdicts:
        check_one_per_key([v.key for v in self.verdicts], info.context, "verdict")
        return self


@dataclass(frozen=True)
class QualityItem:
    """What the model sees of one note."""

    key: str
    sentence: str
    category: str
    source: str | None  # the source message(s), where they can be read


def problems_of(verdict: QualityVerdict) -> list[str]:
    """The note's soft problems as the gate writes them: none for good, else ``label — reason``."""
    if verdict.label == "good":
        return []
    reason = " ".join(verdict.reason.split())
    return [f"{verdict.label} — {reason}" if reason else verdict.label]


@dataclass
class Judged:
    """What a model made of a run of notes: verdicts, error lines, and whether it is out of reach."""

    verdicts: dict[str, QualityVerdict]
    errors: list[str]
    unreachable: bool = False  # a call failed for want of the model (connection, auth), not its output


def judge_notes(items: Sequence[QualityItem], llm: StructuredLLM, *, batch_size: int = BATCH) -> Judged:
    """The model's verdicts on ``items``, with one error line per batch it could not answer.

    A key without a verdict is one the caller judges with the fitted gate instead. A batch whose
    answer never validated is skipped and the next one asked; a call that fails for want of the
    model (no connection, a refused key) ends the run's questions: the rest would wait on the same
    retries for the same answer."""
    prompt = load_prompt("quality")
    verdicts: dict[str, QualityVerdict] = {}
    errors: list[str] = []
    for start in range(0, len(items), max(1, batch_size)):
        batch = list(items[start : start + max(1, batch_size)])
        notes = [
            {
                "key": i.key,
                "sentence": i.sentence,
                "category": i.category or "-",
                "source": _excerpt(i.source, i.sentence) if i.source else "(not readable)",
            }
            for i in batch
        ]
        try:
            answer = llm.call(prompt, {"notes": notes}, QualityVerdicts, context={"keys": [i.key for i in batch]})
        except ModelError as exc:
            if exc.reason != NEVER_VALIDATED:
                left = len(items) - start
                errors.append(f"{left} note(s) from {batch[0].key} on: {exc.model}: {exc.reason}; not asked again")
                return Judged(verdicts, errors, unreachable=True)
            errors.append(f"{len(batch)} note(s) from {batch[0].key}: {exc.model}: {exc.reason}")
            continue
        verdicts.update((v.key, v) for v in answer.verdicts)
    return Judged(verdicts, errors)


def _excerpt(text: str, sentence: str) -> str:
    """The part of the source around where the note's first words stand (the whole of a short one)."""
    text = " ".join(text.split())
    if len(text) <= SOURCE_CHARS:
        return text
    head = " ".join(sentence.split()[:3])
    at = text.find(head) if head else -1
    start = max(0, at - SOURCE_CHARS // 3) if at > 0 else 0
    if start:
        start = text.find(" ", start) + 1 or start
    end = start + SOURCE_CHARS
    piece = text[start:end]
    if end < len(text):
        piece = piece[: piece.rfind(" ")] if " " in piece else piece
    return ("… " if start else "") + piece + (" …" if end < len(text) else "")
