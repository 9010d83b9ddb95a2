"""What a model would cost before anything is spent: the calls, their tokens, and the price.

``DryRunLLM`` stands in for the model: it renders each prompt exactly as the real call would,
records it and answers with an empty value, so the stage code walks its usual path and every call
it would make is counted. ``price_calls`` counts their prompt tokens with the model's own
tokenizer where LiteLLM knows it, adds the schema each call carries, guesses the answers' tokens
(``ANSWER_TOKENS``: the estimate's one assumption), and prices both with LiteLLM's price table
(0 for a local or unlisted model). Calls whose answers are in the answer cache cost nothing.
"""

from __future__ import annotations

import json
import typing
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from pydantic import BaseModel

from vault_pipeline.models.answers import AnswerCache, answer_key
from vault_pipeline.models.prompts import Prompt
from vault_pipeline.models.protocol import T

# The answer's tokens per call, guessed: (share of the prompt's own tokens, fixed tokens).
# Extraction restates a window in short units (about half its length with the JSON keys); a
# summary is 200-400 words; a thread map a step per session.
ANSWER_TOKENS: dict[str, tuple[float, int]] = {
    "extract": (0.5, 0),
    "summarize": (0.0, 550),
    "thread_map": (0.1, 80),
}
DEFAULT_ANSWER = (0.3, 0)


@dataclass(frozen=True)
class PlannedCall:
    """One call a stage would make: its prompt, the messages as sent, the schema's size, whether cached."""

    prompt: str
    messages: tuple[dict[str, str], ...]
    schema_chars: int
    cached: bool


class DryRunLLM:
    """A ``StructuredLLM`` that calls nothing: it records each call and answers with an empty value."""

    remote = False  # it calls nothing

    def __init__(
        self,
        model: str,
        *,
        api_base: str | None = None,
        answers: AnswerCache | None = None,
        remote_model: bool = True,
    ):
        self.model = model
        self.api_base = api_base
        self.answers = answers  # answers already given: those calls cost nothing
        self.remote_model = remote_model  # whether the model it stands in for is paid for (a local one is not)
        self.calls: list[PlannedCall] = []

    def call(
        self,
        prompt: Prompt,
        variables: Mapping[str, Any],
        response_model: type[T],
        *,
        context: Mapping[str, Any] | None = None,
    ) -> T:
        """Record the call as it would be sent; an empty ``response_model`` (not validated)."""
        cached = self.answers is not None and self.answers.has(
            answer_key(self.model, self.api_base, prompt, variables, response_model, context)
        )
        schema = _schema_chars(response_model)
        self.calls.append(PlannedCall(prompt.name, tuple(prompt.render(variables)), schema, cached))
        return empty(response_model)


@cache
def _schema_chars(response_model: type[BaseModel]) -> int:
    """Characters of an answer's JSON schema, as a request carries it (the same for every call)."""
    return len(json.dumps(response_model.model_json_schema()))


def empty(response_model: type[T]) -> T:
    """An instance with every required field empty ([] / "" / 0), built without validation."""
    hints = typing.get_type_hints(response_model)
    values = {
        name: _empty_of(hints.get(name)) for name, info in response_model.model_fields.items() if info.is_required()
    }
    return response_model.model_construct(**values)


def _empty_of(annotation: Any) -> Any:
    origin = typing.get_origin(annotation) or annotation
    if origin in (list, tuple, set, frozenset):
        return origin()
    if origin in (dict, Mapping):
        return {}
    if isinstance(origin, type) and issubclass(origin, BaseModel):
        return empty(origin)
    return {str: "", int: 0, float: 0.0, bool: False}.get(origin)


@dataclass
class Estimate:
    """What an ingest would ask a model, and what it would cost."""

    model: str
    calls: Counter = field(default_factory=Counter)  # prompt name -> calls to make
    cached: int = 0  # calls the answer cache answers (no cost)
    prompt_tokens: int = 0
    completion_tokens: int = 0  # guessed (ANSWER_TOKENS)
    cost: float = 0.0  # US dollars
    priced: bool = True  # False: the model is not in LiteLLM's price table (local, or unlisted): cost 0
    conversations: int = 0

    def to_dict(self) -> dict[str, Any]:
        """The estimate as ``vault ingest --estimate --json`` prints it."""
        return {
            "model": self.model,
            "conversations": self.conversations,
            "calls": sum(self.calls.values()),
            "calls_by_prompt": dict(sorted(self.calls.items())),
            "cached": self.cached,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "cost_usd": round(self.cost, 6),
            "priced": self.priced,
        }


def price_calls(calls: list[PlannedCall], model: str, *, remote: bool = True) -> Estimate:
    """Count and price ``calls`` for ``model`` (cached calls counted apart, at no cost)."""
    from vault_pipeline.models.litellm_backend import count_tokens, price

    estimate = Estimate(model)
    for planned in calls:
        if planned.cached:
            estimate.cached += 1
            continue
        estimate.calls[planned.prompt] += 1
        tokens = count_tokens(model, list(planned.messages)) + planned.schema_chars // 4
        share, fixed = ANSWER_TOKENS.get(planned.prompt, DEFAULT_ANSWER)
        estimate.prompt_tokens += tokens
        estimate.completion_tokens += int(tokens * share) + fixed
    cost = price(model, estimate.prompt_tokens, estimate.completion_tokens) if remote else 0.0
    estimate.priced = cost is not None
    estimate.cost = cost or 0.0
    return estimate
