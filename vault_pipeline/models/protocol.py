"""The model seam's contract: what every backend offers, and the batch-key check its answers share."""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Annotated, Any, Protocol, TypeVar, runtime_checkable

from pydantic import AfterValidator, BaseModel

from vault_pipeline.models.prompts import Prompt

T = TypeVar("T", bound=BaseModel)

OFFLINE_MODEL = "offline"
# The connected MCP client's own model, asked through MCP sampling (``vault mcp`` only; elsewhere the
# offline backend stands in, and says so).
MCP_SAMPLING = "mcp-sampling"


def is_offline(model: str) -> bool:
    """True for the built-in offline backend's model string: it calls nothing, costs nothing, caches nothing."""
    return model == OFFLINE_MODEL


def reads_vault_weights(model: str) -> bool:
    """True where the gate may be the offline one and so judges with the weights a vault fitted for itself
    (``offline``, and ``mcp-sampling``, whose fallback outside a sampling client is the offline gate)."""
    return model in (OFFLINE_MODEL, MCP_SAMPLING)


def _bare(key: str) -> str:
    return key.strip().strip("[]").strip()  # models sometimes echo the "[c01]" brackets


# A batched answer's item key, as the prompt showed it (``check_one_per_key`` checks the set).
BatchKey = Annotated[str, AfterValidator(_bare)]


@runtime_checkable
class StructuredLLM(Protocol):
    """A model that answers a prompt with a validated pydantic object."""

    model: str
    remote: bool  # True when calls leave the machine

    def call(
        self,
        prompt: Prompt,
        variables: Mapping[str, Any],
        response_model: type[T],
        *,
        context: Mapping[str, Any] | None = None,
    ) -> T:
        """Render ``prompt`` with ``variables`` and return a validated ``response_model``."""
        ...


@runtime_checkable
class CallRecorder(Protocol):
    """Where a backend records its calls (``CallLog``, or a tap standing in for one)."""

    def record(self, entry: dict[str, Any]) -> None:
        """Take one call record."""
        ...


@runtime_checkable
class LoggedLLM(Protocol):
    """A backend that records each call to its ``log`` (both built-in backends do)."""

    log: CallRecorder


def check_one_per_key(seen: list[str], context: Mapping[str, Any] | None, what: str) -> None:
    """Raise (for a re-ask) unless a batched answer has exactly one item per key in ``context["keys"]``."""
    keys = (context or {}).get("keys")
    if keys is None:
        return
    missing = sorted(set(keys) - set(seen))
    unknown = sorted(set(seen) - set(keys))
    repeated = sorted({k for k in seen if seen.count(k) > 1})
    if missing or unknown or repeated:
        raise ValueError(
            f"give exactly one {what} per key {sorted(keys)}: missing {missing}, unknown {unknown}, repeated {repeated}"
        )


# --------------------------------------------------------------------------- deadlines

_DEADLINE: ContextVar[float | None] = ContextVar("vault_model_deadline", default=None)


@contextmanager
def deadline(at: float | None) -> Iterator[None]:
    """Calls made inside end by ``at`` (``time.monotonic()``): a backend cuts each request's timeout
    to what is left and stops retrying when nothing is (the gate's deadline ends its calls)."""
    token = _DEADLINE.set(at)
    try:
        yield
    finally:
        _DEADLINE.reset(token)


def time_left() -> float | None:
    """Seconds until the current deadline (negative once past it); None when there is none."""
    at = _DEADLINE.get()
    return None if at is None else at - time.monotonic()
