"""The connected MCP client's own model as a ``StructuredLLM``, asked through MCP sampling.

``send`` (the MCP server's, ``serve/mcp.py``) asks the client for one completion and returns the
reply's text and the name of the model the client used. The rest is the seam's usual work: the
prompt file rendered, the answer's JSON schema added to the system prompt (a client's model
enforces none), the reply parsed (a code fence around it allowed), validated with the same
validators and context, re-asked with the validation error as instructor's JSON mode does, and
logged. A client that refuses or fails is a ``ModelError``, so the gate fails open on it. The
request's timeout is what the current deadline leaves. docs/decisions/0082-mcp-sampling.md.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from vault_pipeline.errors import NEVER_VALIDATED, ModelError
from vault_pipeline.models.calllog import CallLog, log_entry, redact
from vault_pipeline.models.prompts import Prompt
from vault_pipeline.models.protocol import MCP_SAMPLING, T, time_left

MAX_TOKENS = 4000  # an answer's cap: a batch of ten gate verdicts with reasons fits with room to spare
_SCHEMA_NOTE = (
    "\n\nAnswer with one JSON object only, no prose around it, following this JSON schema:\n{schema}\n"
    "Return an instance of the schema, not the schema itself."
)


@dataclass(frozen=True)
class SamplingRequest:
    """One completion asked of the client: system prompt, messages, settings and what time is left."""

    system: str
    messages: tuple[dict[str, str], ...]  # {"role": "user" | "assistant", "content": text}
    temperature: float
    max_tokens: int
    timeout: float | None  # seconds; None: no deadline


Send = Callable[[SamplingRequest], tuple[str, str]]  # -> (reply text, the model the client used)


class SamplingLLM:
    """Structured answers from the MCP client's model (``[models] gate = "mcp-sampling"``)."""

    remote = True  # the client's model may well be remote: the privacy notes treat it so

    def __init__(self, send: Send, *, log: CallLog | None = None, max_reasks: int = 2, max_tokens: int = MAX_TOKENS):
        self.model = MCP_SAMPLING
        self.log = log or CallLog(None)
        self.max_reasks = max_reasks
        self.max_tokens = max_tokens
        self._send = send

    def call(
        self,
        prompt: Prompt,
        variables: Mapping[str, Any],
        response_model: type[T],
        *,
        context: Mapping[str, Any] | None = None,
    ) -> T:
        """Ask the client's model; re-ask on a reply that does not validate; ModelError when it never does."""
        started = time.perf_counter()
        system, *messages = prompt.render(variables)
        schema = json.dumps(response_model.model_json_schema(), ensure_ascii=False)
        conversation = [dict(m) for m in messages]
        reply = ""
        for attempt in range(1, self.max_reasks + 2):
            reply, served_by = self._ask(prompt, variables, started, system["content"], schema, conversation, attempt)
            try:
                result = response_model.model_validate_json(json_text(reply), context=dict(context or {}))
            except ValidationError as exc:
                conversation += [{"role": "assistant", "content": reply}, {"role": "user", "content": _reask(exc)}]
                continue
            self.log.record(
                log_entry(
                    prompt,
                    self.model,
                    variables,
                    started,
                    outcome="ok",
                    attempts=attempt,
                    served_by=served_by,
                    output=result.model_dump(mode="json"),
                )
            )
            return result
        attempts = self.max_reasks + 1
        self.log.record(log_entry(prompt, self.model, variables, started, outcome="invalid", attempts=attempts))
        raise ModelError(prompt.name, self.model, NEVER_VALIDATED, attempts, redact(reply)[:2000])

    def _ask(
        self,
        prompt: Prompt,
        variables: Mapping[str, Any],
        started: float,
        system: str,
        schema: str,
        conversation: list[dict[str, str]],
        attempt: int,
    ) -> tuple[str, str]:
        """One request to the client; a failure is logged and raised as a ModelError naming it."""
        left = time_left()
        request = SamplingRequest(
            system + _SCHEMA_NOTE.format(schema=schema),
            tuple(conversation),
            prompt.temperature,
            self.max_tokens,
            None if left is None else max(0.0, left),
        )
        try:
            return self._send(request)
        except Exception as exc:  # the client refused, failed, or the deadline passed
            cause = redact(" ".join(f"the client's model failed: {type(exc).__name__}: {exc}".split()))[:300]
            self.log.record(log_entry(prompt, self.model, variables, started, outcome="error", error=cause))
            raise ModelError(prompt.name, self.model, cause, attempt) from exc


def json_text(reply: str) -> str:
    """The JSON object in a reply: the text between its first ``{`` and last ``}`` (a fence dropped)."""
    start, end = reply.find("{"), reply.rfind("}")
    return reply[start : end + 1] if 0 <= start < end else reply


def _reask(exc: ValidationError) -> str:
    problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'answer'}: {e['msg']}" for e in exc.errors()[:10])
    return f"That answer does not validate ({problems}). Answer again, with one JSON object following the schema."
