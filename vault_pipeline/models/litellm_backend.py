"""The LiteLLM backend: any LiteLLM model string through instructor in JSON mode.

litellm 1.106.2 fails any ``tools=`` call without the ``mcp`` package, so instructor's
default TOOLS mode is not used. Validation failures are re-asked by instructor; transient
transport errors are retried by tenacity.

Only this module imports litellm, instructor and tenacity, and only inside the functions
that need them: importing litellm alone costs seconds, and the offline default never pays it.
"""

from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import Callable, Mapping
from ipaddress import ip_address
from typing import Any
from urllib.parse import urlparse

from vault_pipeline.errors import NEVER_VALIDATED, ConfigError, ModelError
from vault_pipeline.models.calllog import CallLog, log_entry, redact, redact_library_logs
from vault_pipeline.models.prompts import Prompt
from vault_pipeline.models.protocol import OFFLINE_MODEL, T

# Loggers of the libraries this module drives. Their messages repeat, in colour and over several
# lines, what the one-line ModelError already says ("Give Feedback / Get Help", "Provider List",
# instructor's "API call failed on attempt 1"); the call log keeps the full error.
_LIBRARY_LOGGERS = ("LiteLLM", "LiteLLM Router", "LiteLLM Proxy", "litellm", "instructor", "httpx")


def _import_litellm():
    # Without the local cost map, importing litellm fetches it over the network (3 retries, ~11 s).
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import litellm

    litellm.telemetry = False
    litellm.suppress_debug_info = True  # the banners are print()s, not log records
    quiet_library_logs()
    return litellm


_BRACE = re.compile(r"[{}]")
_AS_JINJA = {"{": '{{ "{" }}', "}": '{{ "}" }}'}


def _literal(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Messages whose text survives instructor's templating unchanged.

    Given a ``context`` (our validation context), instructor renders every message as a Jinja
    template. Our prompts are rendered already and carry the user's text, which may hold
    ``{{ ... }}`` or ``{% translate %}`` (a Django template in a chat): each brace becomes a Jinja
    expression that prints that brace, so the model reads the text exactly as written.
    """
    return [
        {**m, "content": _BRACE.sub(lambda b: _AS_JINJA[b[0]], m["content"])}
        if isinstance(m.get("content"), str)
        else m
        for m in messages
    ]


def quiet_library_logs() -> None:
    """Keep LiteLLM's and instructor's log records off the terminal (errors surface as ModelError).

    Their own stream handlers go; a null handler stands in so that Python's last-resort handler
    does not print either. Records still propagate: a handler the application installs on the
    root logger (``vault -v``, a test's ``caplog``) sees them, redacted.
    """
    for name in _LIBRARY_LOGGERS:
        logger = logging.getLogger(name)
        for handler in list(logger.handlers):
            if not isinstance(handler, logging.NullHandler):
                logger.removeHandler(handler)
        if not logger.handlers:
            logger.addHandler(logging.NullHandler())
        logger.propagate = True


def _transient_errors() -> tuple[type[BaseException], ...]:
    litellm = _import_litellm()
    names = (
        "RateLimitError",
        "APIConnectionError",
        "Timeout",
        "ServiceUnavailableError",
        "InternalServerError",
        "BadGatewayError",
    )
    return tuple(getattr(litellm, n) for n in names if hasattr(litellm, n))


class LiteLLMBackend:
    """Any LiteLLM model string through instructor (JSON mode) with retries and a call log."""

    remote = True

    def __init__(
        self,
        model: str,
        *,
        api_base: str | None = None,
        api_key: str | None = None,
        completion: Callable[..., Any] | None = None,
        log: CallLog | None = None,
        max_reasks: int = 2,
        transient_attempts: int = 4,
        timeout: float = 60.0,
    ):
        self.model = model
        self.api_base = api_base
        self._api_key = api_key  # from the environment variable vault.toml names; never logged
        self.remote = is_remote(model, api_base)
        self.log = log or CallLog(None)
        self.max_reasks = max_reasks
        self.timeout = timeout
        self._completion = completion
        self._transient_attempts = transient_attempts
        self._client: Any = None  # instructor's client, built on the first call (imports litellm)

    def _build_client(self):
        import instructor
        from tenacity import retry, retry_if_exception_type, stop_after_attempt, wait_exponential

        completion = self._completion or _import_litellm().completion
        retrying = retry(
            retry=retry_if_exception_type(_transient_errors()),
            stop=stop_after_attempt(self._transient_attempts),
            wait=wait_exponential(multiplier=0.5, max=8),
            reraise=True,
        )
        client = instructor.from_litellm(retrying(completion), mode=instructor.Mode.JSON)
        redact_library_logs()
        quiet_library_logs()  # also when a test injects ``completion`` and litellm came in another way
        return client

    def call(
        self,
        prompt: Prompt,
        variables: Mapping[str, Any],
        response_model: type[T],
        *,
        context: Mapping[str, Any] | None = None,
    ) -> T:
        """Ask the model; re-ask on validation failure; raise ModelError when it never validates."""
        from instructor.core.exceptions import InstructorRetryException

        if self._client is None:
            self._client = self._build_client()
        started = time.perf_counter()
        extra = {"api_base": self.api_base} if self.api_base else {}
        if self._api_key:
            extra["api_key"] = self._api_key
        try:
            result, raw = self._client.chat.completions.create_with_completion(
                model=self.model,
                messages=_literal(prompt.render(variables)) if context else prompt.render(variables),
                response_model=response_model,
                max_retries=self.max_reasks,
                context=dict(context or {}),
                temperature=prompt.temperature,
                timeout=self.timeout,
                **extra,
            )
        except InstructorRetryException as exc:
            if exc.__cause__ is not None and not isinstance(exc.__cause__, ValueError):
                raise self._failed(prompt, variables, started, exc.__cause__) from exc  # auth, transport: not output
            last = redact(str(getattr(exc, "last_completion", "") or ""))[:2000]
            attempts = int(getattr(exc, "n_attempts", self.max_reasks + 1) or 0)
            self.log.record(
                log_entry(
                    prompt,
                    self.model,
                    variables,
                    started,
                    outcome="invalid",
                    attempts=attempts,
                    error=redact(str(exc))[:2000],
                )
            )
            raise ModelError(prompt.name, self.model, NEVER_VALIDATED, attempts, last) from exc
        except ConfigError:
            raise
        except Exception as exc:  # transport errors after tenacity gave up, auth, bad model string
            raise self._failed(prompt, variables, started, exc) from exc
        self.log.record(
            log_entry(
                prompt,
                self.model,
                variables,
                started,
                outcome="ok",
                tokens=_usage(raw),
                output=result.model_dump(mode="json"),
            )
        )
        return result

    def _failed(self, prompt: Prompt, variables: Mapping[str, Any], started: float, exc: BaseException) -> ModelError:
        """Log a call that failed for a reason other than its output, and the error to raise (keys redacted)."""
        reason = redact(f"{type(exc).__name__}: {exc}")
        self.log.record(log_entry(prompt, self.model, variables, started, outcome="error", error=reason[:2000]))
        return ModelError(prompt.name, self.model, reason[:500])


def _usage(raw: Any) -> dict[str, int]:
    usage = getattr(raw, "usage", None)
    return {
        "prompt": int(getattr(usage, "prompt_tokens", 0) or 0),
        "completion": int(getattr(usage, "completion_tokens", 0) or 0),
    }


def is_remote(model: str, api_base: str | None = None) -> bool:
    """True when calls to this model leave the machine (the offline backend and loopback servers do not)."""
    if model == OFFLINE_MODEL:
        return False
    if api_base:
        host = urlparse(api_base).hostname or ""
        if host == "localhost":
            return False
        try:
            return not ip_address(host).is_loopback
        except ValueError:
            return True
    return not model.startswith("ollama")  # ollama/... defaults to a local server


def litellm_embed(
    model: str, texts: list[str], *, api_base: str | None = None, api_key: str | None = None
) -> list[list[float]]:
    """Embed texts with a LiteLLM embedding model (used by ``embed.LiteLLMEmbedder``)."""
    litellm = _import_litellm()
    extra = {"api_base": api_base} if api_base else {}
    if api_key:
        extra["api_key"] = api_key
    try:
        response = litellm.embedding(model=model, input=texts, **extra)
    except Exception as exc:
        raise ModelError("embedding", model, redact(f"{type(exc).__name__}: {exc}")[:500]) from exc
    return [item["embedding"] for item in response.data]
