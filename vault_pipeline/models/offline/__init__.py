"""The offline backend: deterministic algorithms standing in for a model, one per prompt name.

``OfflineBackend`` answers the same protocol as the LiteLLM backend and returns the same
pydantic types through the same validators; it never imports litellm (whose import alone
costs seconds). Each handler takes the prompt's variables and returns JSON-shaped data that
the caller's response model validates exactly as it would a model's answer. The registry
imports a handler's module on first use, so a command only imports the algorithms it uses.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Mapping
from functools import partial
from typing import TYPE_CHECKING, Any, cast

from pydantic import ValidationError

from vault_pipeline.errors import ModelError, validation_line
from vault_pipeline.models.calllog import CallLog, log_entry
from vault_pipeline.models.prompts import Prompt
from vault_pipeline.models.protocol import OFFLINE_MODEL, T

if TYPE_CHECKING:
    from vault_pipeline.models.offline.relevance import RelevanceModel

Handler = Callable[[Mapping[str, Any]], Any]


# --------------------------------------------------------------------------- handlers


def _extract() -> Handler:
    from vault_pipeline.models.offline.extraction import extract_units

    return extract_units


def _summarize() -> Handler:
    from vault_pipeline.models.offline.extraction import summarize

    return summarize


def _thread_map() -> Handler:
    from vault_pipeline.models.offline.extraction import thread_map

    return thread_map


def _decompose() -> Handler:
    from vault_pipeline.models.offline.retrieval import decompose

    return decompose


def _gate() -> Handler:
    from vault_pipeline.models.offline.retrieval import gate

    return gate


def _judge() -> Handler:
    from vault_pipeline.models.offline.judging import judge

    return judge


_LOADERS: dict[str, Callable[[], Handler]] = {
    "extract": _extract,
    "summarize": _summarize,
    "thread_map": _thread_map,
    "decompose": _decompose,
    "gate": _gate,
    "judge": _judge,
}


class _Registry(Mapping[str, Handler]):
    """Prompt name -> handler, imported on first use."""

    def __getitem__(self, name: str) -> Handler:
        return _LOADERS[name]()

    def __iter__(self) -> Iterator[str]:
        return iter(_LOADERS)

    def __len__(self) -> int:
        return len(_LOADERS)


HANDLERS = _Registry()


# --------------------------------------------------------------------------- backend


class OfflineBackend:
    """Deterministic algorithmic stand-in for a model: same protocol, same validators.

    ``relevance``: the fitted gate's weights (a vault's ``gate.json``); None: the shipped default.
    They are the backend's own, as a model's weights are: the prompt never carries them.
    ``relevance_model``: gate with the trained relevance model (``crossencoder.py``) instead of the
    shipped signal weights (not the default: docs/decisions/0110-relevance-model.md says why)."""

    model = OFFLINE_MODEL
    remote = False

    def __init__(
        self,
        log: CallLog | None = None,
        handlers: Mapping[str, Handler] | None = None,
        *,
        relevance: RelevanceModel | None = None,
        relevance_model: bool = False,
    ):
        self.log = log or CallLog(None)
        self._handlers = HANDLERS if handlers is None else handlers
        self.relevance = relevance
        self.relevance_model = relevance_model

    def _handler(self, name: str) -> Handler:
        try:
            handler = self._handlers[name]
        except KeyError:
            raise ModelError(name, self.model, "the offline backend has no algorithm for this prompt") from None
        if name == "gate" and self.relevance is not None:  # the fitted gate judges with these weights
            return partial(cast(Callable[..., Any], handler), model=self.relevance)
        return handler

    def call(
        self,
        prompt: Prompt,
        variables: Mapping[str, Any],
        response_model: type[T],
        *,
        context: Mapping[str, Any] | None = None,
    ) -> T:
        """Run the prompt's offline algorithm and validate its answer like a model's."""
        started = time.perf_counter()
        data = self._handler(prompt.name)(variables)
        try:
            result = response_model.model_validate(data, context=dict(context or {}))
        except ValidationError as exc:
            self.log.record(log_entry(prompt, self.model, variables, started, outcome="invalid", error=str(exc)))
            raise ModelError(
                prompt.name,
                self.model,
                f"offline answer failed validation: {validation_line(exc)}",
                1,
                json.dumps(data, default=str)[:2000],
            ) from exc
        self.log.record(
            log_entry(
                prompt,
                self.model,
                variables,
                started,
                outcome="ok",
                attempts=1,
                tokens={"prompt": 0, "completion": 0},
                output=result.model_dump(mode="json"),
            )
        )
        return result


def offline_relevance(llm: object) -> tuple[bool, RelevanceModel | None, bool]:
    """Whether ``llm`` is the offline backend, the fitted signal weights it was given (None: the
    shipped ones) and whether it gates with the trained relevance model. The one place outside a
    backend that tells them apart; a wrapper that counts or times calls (``.inner``) is seen through."""
    inner = getattr(llm, "inner", None)
    if inner is not None and inner is not llm:
        return offline_relevance(inner)
    if isinstance(llm, OfflineBackend) and llm.model == OFFLINE_MODEL:  # a subclass naming a model is one
        return True, llm.relevance, llm.relevance_model
    return False, None, False
