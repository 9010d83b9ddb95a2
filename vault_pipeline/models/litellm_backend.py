"""The LiteLLM backend: any LiteLLM model string through instructor, with the output the provider enforces.

Output (``output_mode``): a JSON schema response format where LiteLLM's capability flags say the
provider enforces one, and for a self-hosted OpenAI-compatible server (llama.cpp, vLLM, Ollama and
LM Studio all take a schema); forced tool calling where only that is flagged; JSON mode with
instructor's re-ask elsewhere. ``[models] output`` forces one. A server that refuses the schema
(an HTTP 400 naming it) is asked again in JSON mode, and from then on.

Failures (``classify``): authentication, not found and a refused request are final, never retried;
a rate limit waits what ``Retry-After`` says; a timeout, a 5xx or a refused connection is retried
with back-off (tenacity), never past the current deadline (``protocol.deadline``): each request's
timeout is cut to what is left. LiteLLM's own client retries are off, so these are the only ones.
Every failure ends as a ``ModelError`` whose reason is one line naming the cause. A loopback
``api_base`` with no key configured gets a placeholder key: a local server needs none, and the
provider's real key is never sent to it. Why: docs/decisions/0080-model-path.md.

Only this module imports litellm, instructor and tenacity, and only inside the functions that
need them: importing litellm alone costs seconds, and the offline default never pays it.
"""

from __future__ import annotations

import logging
import os
import re
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from ipaddress import ip_address
from typing import Any, Literal, get_args
from urllib.parse import urlparse

from vault_pipeline.errors import NEVER_VALIDATED, ConfigError, DeadlinePassed, ModelError
from vault_pipeline.models.calllog import CallLog, log_entry, redact, redact_library_logs
from vault_pipeline.models.prompts import Prompt
from vault_pipeline.models.protocol import OFFLINE_MODEL, T, time_left

# Loggers of the libraries this module drives. Their messages repeat, in colour and over several
# lines, what the one-line ModelError already says ("Give Feedback / Get Help", "Provider List",
# instructor's "API call failed on attempt 1"); the call log keeps the full error.
_LIBRARY_LOGGERS = ("LiteLLM", "LiteLLM Router", "LiteLLM Proxy", "litellm", "instructor", "httpx")

OutputMode = Literal["json_schema", "tools", "json"]
OUTPUT_MODES: tuple[str, ...] = get_args(OutputMode)
# LiteLLM providers that speak to a server the user runs; each takes a JSON schema response format.
_SELF_HOSTED = frozenset({"openai", "hosted_vllm", "ollama", "ollama_chat", "lm_studio", "llamafile", "openai_like"})
LOCAL_KEY = "no-key-needed"  # sent to a loopback server when no key is configured
_SCHEMA_WORDS = re.compile(r"response_format|json_schema|structured output|\btools?\b", re.I)


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


# --------------------------------------------------------------------------- output and failures


def output_mode(model: str, api_base: str | None = None, choice: str = "auto") -> OutputMode:
    """How a model is asked for structured output: ``json_schema``, ``tools`` or ``json``.

    ``choice`` other than ``auto`` wins. Else LiteLLM's capability flags decide, and a self-hosted
    OpenAI-compatible server (an ``api_base``, or Ollama) is given the schema."""
    if choice in OUTPUT_MODES:
        return choice  # type: ignore[return-value]
    litellm = _import_litellm()
    try:
        provider = litellm.get_llm_provider(model)[1]
    except Exception:  # an unknown provider: the call itself will say so
        return "json"
    if _flag(litellm.supports_response_schema, model, provider):
        return "json_schema"
    if provider in _SELF_HOSTED and (api_base or provider.startswith("ollama")):
        return "json_schema"
    if _flag(litellm.supports_function_calling, model, provider):
        return "tools"
    return "json"


def _flag(check: Callable[..., bool], model: str, provider: str) -> bool:
    try:
        return bool(check(model=model, custom_llm_provider=provider))
    except Exception:  # a model missing from the table raises in some versions
        return False


@dataclass(frozen=True)
class Failure:
    """What a failed request means: a one-line cause, whether to retry, how long the server asked to wait."""

    cause: str
    retry: bool
    wait: float | None = None
    schema_refused: bool = False  # a 400 naming the response format: ask again in JSON mode


_LIBRARY_PREFIX = re.compile(r"^(?:litellm\.\w+:\s*)?(?:\w+(?:Error|Exception):\s*)*(?:\w+Exception\s*-\s*)?")


def _detail(exc: BaseException) -> str:
    """The server's or library's message without LiteLLM's class-name prefixes, on one line."""
    text = " ".join(str(exc).split())
    return redact(_LIBRARY_PREFIX.sub("", text))[:300] or type(exc).__name__


def classify(exc: BaseException, *, api_base: str | None = None, timeout: float | None = None) -> Failure:
    """The cause of a failed request in one line, and whether it is worth another attempt."""
    status = getattr(exc, "status_code", None)
    detail = _detail(exc)
    if isinstance(exc, DeadlinePassed):
        return Failure("no answer before the deadline", retry=False)
    if "missing credentials" in detail.lower():  # the client refused to send a request without a key
        return Failure(
            "authentication failed: no API key given; set the provider's key variable or [models] api_key_env",
            retry=False,
        )
    if status in (401, 403):
        return Failure(f"authentication failed ({_http(status)}{detail})", retry=False)
    if status == 429:
        return Failure(f"rate limited ({_http(status)}{detail})", retry=True, wait=retry_after(exc))
    return _transport(exc, status, detail, api_base or "the provider", timeout)


def _transport(exc: BaseException, status: Any, detail: str, where: str, timeout: float | None) -> Failure:
    """``classify`` for what is not about the key or the rate: not found, timeouts, connections, statuses."""
    if status == 404:
        return Failure(f"model or endpoint not found at {where} ({_http(status)}{detail})", retry=False)
    if status == 408 or type(exc).__name__ in ("Timeout", "APITimeoutError"):
        within = f" within {timeout:g}s" if timeout else ""
        return Failure(f"no answer{within} from {where}", retry=True)
    if "connection error" in detail.lower() or type(exc).__name__ == "APIConnectionError":
        return Failure(f"cannot connect to {where} ({detail})", retry=True)
    if isinstance(status, int) and status >= 500:
        return Failure(f"server error ({_http(status)}{detail})", retry=True)
    if isinstance(status, int) and status >= 400:
        refused = bool(_SCHEMA_WORDS.search(detail))
        return Failure(f"request refused ({_http(status)}{detail})", retry=False, schema_refused=refused)
    return Failure(f"{type(exc).__name__}: {detail}", retry=False)


def _http(status: Any) -> str:
    return f"HTTP {status}: " if isinstance(status, int) else ""


def retry_after(exc: BaseException) -> float | None:
    """Seconds a 429's ``Retry-After`` header asks for (a number or an HTTP date), if it says."""
    headers = getattr(exc, "litellm_response_headers", None)
    if headers is None:
        response = getattr(exc, "response", None)
        headers = getattr(response, "headers", None)
    value = headers.get("retry-after") if headers is not None else None
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        return max(0.0, parsedate_to_datetime(value).timestamp() - time.time())
    except (TypeError, ValueError):
        return None


# --------------------------------------------------------------------------- the backend


class LiteLLMBackend:
    """Any LiteLLM model string through instructor, with retries, deadlines and a call log."""

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
        output: str = "auto",
        sleep: Callable[[float], None] = time.sleep,
    ):
        self.model = model
        self.api_base = api_base
        self._api_key = api_key  # from the environment variable vault.toml names; never logged
        self.remote = is_remote(model, api_base)
        self.log = log or CallLog(None)
        self.max_reasks = max_reasks
        self.timeout = timeout
        self.output = output
        self._mode: OutputMode | None = None  # chosen on the first call (the flags import litellm)
        self._completion = completion
        self._transient_attempts = transient_attempts
        self._sleep = sleep
        self._clients: dict[str, Any] = {}  # instructor's client per output mode
        self._lock = threading.Lock()  # calls arrive from several threads (the gate, a concurrent ingest)
        self._tries = threading.local()  # requests sent for the current call, per thread

    @property
    def mode(self) -> OutputMode:
        """The output mode this backend asks in (``output_mode``), chosen once."""
        if self._mode is None:
            self._mode = output_mode(self.model, self.api_base, self.output)
        return self._mode

    def preload(self) -> threading.Thread:
        """Import LiteLLM and instructor and build the client on a background thread (seconds of
        imports that must not eat into the gate's deadline); the first call waits for it."""
        thread = threading.Thread(target=self._preload_quietly, name="litellm-load", daemon=True)
        thread.start()
        return thread

    def _preload_quietly(self) -> None:
        try:
            self._client(self.mode)
        except Exception:  # the first call builds it again and raises in its own thread
            return

    def _client(self, mode: OutputMode) -> Any:
        with self._lock:
            if mode not in self._clients:
                self._clients[mode] = self._build_client(mode)
            return self._clients[mode]

    def _build_client(self, mode: OutputMode) -> Any:
        import instructor
        from tenacity import Retrying, retry_if_exception

        completion = self._completion or _import_litellm().completion

        def attempt(**kwargs: Any) -> Any:
            kwargs["max_retries"] = 0  # LiteLLM's client retries off: tenacity's below are the only ones
            left = time_left()
            if left is not None:
                if left <= 0:
                    raise DeadlinePassed()
                kwargs["timeout"] = min(float(kwargs.get("timeout", self.timeout)), left)
            self._tries.sent = getattr(self._tries, "sent", 0) + 1
            return completion(**kwargs)

        retrying = Retrying(
            retry=retry_if_exception(lambda exc: self._failure(exc).retry),
            stop=_stop(self._transient_attempts),
            wait=self._wait,
            sleep=self._sleep,
            reraise=True,
        )
        modes = {
            "json_schema": instructor.Mode.JSON_SCHEMA,
            "tools": instructor.Mode.TOOLS,
            "json": instructor.Mode.JSON,
        }
        client = instructor.from_litellm(retrying.wraps(attempt), mode=modes[mode])
        redact_library_logs()
        quiet_library_logs()  # also when a test injects ``completion`` and litellm came in another way
        return client

    def _failure(self, exc: BaseException) -> Failure:
        failure = classify(exc, api_base=self.api_base, timeout=self.timeout)
        left = time_left()
        if left is not None and left <= 0 and failure.retry:  # the deadline cut the request short
            return Failure("no answer before the deadline", retry=False)
        return failure

    def _wait(self, state: Any) -> float:
        """Seconds before the next attempt: what a 429 asked for, else an exponential back-off."""
        exc = state.outcome.exception() if state.outcome is not None else None
        asked = self._failure(exc).wait if exc is not None else None
        return asked if asked is not None else min(8.0, 0.5 * 2 ** (state.attempt_number - 1))

    def _options(self) -> dict[str, Any]:
        """The request's transport options: timeout, the server and its key."""
        options: dict[str, Any] = {"timeout": self.timeout}
        if self.api_base:
            options["api_base"] = self.api_base
        key = self._api_key or (LOCAL_KEY if self.api_base and not self.remote else None)
        if key:
            options["api_key"] = key
        return options

    def call(
        self,
        prompt: Prompt,
        variables: Mapping[str, Any],
        response_model: type[T],
        *,
        context: Mapping[str, Any] | None = None,
    ) -> T:
        """Ask the model; re-ask on validation failure; raise ModelError naming the cause when it fails."""
        return self._ask(prompt, variables, response_model, context, self.mode)

    def _ask(
        self,
        prompt: Prompt,
        variables: Mapping[str, Any],
        response_model: type[T],
        context: Mapping[str, Any] | None,
        mode: OutputMode,
    ) -> T:
        from instructor.core.exceptions import InstructorRetryException

        started = time.perf_counter()
        messages = prompt.render(variables)
        self._tries.sent = 0
        try:
            result, raw = self._client(mode).chat.completions.create_with_completion(
                model=self.model,
                messages=_literal(messages) if context else messages,
                response_model=response_model,
                max_retries=self.max_reasks,
                context=dict(context or {}),
                temperature=prompt.temperature,
                **self._options(),
            )
        except InstructorRetryException as exc:
            if exc.__cause__ is not None and not isinstance(exc.__cause__, ValueError):
                return self._on_failure(prompt, variables, response_model, context, mode, started, exc.__cause__)
            raise self._never_valid(prompt, variables, started, exc, mode) from exc
        except ConfigError:
            raise
        except Exception as exc:  # transport errors after the retries, auth, a bad model string
            return self._on_failure(prompt, variables, response_model, context, mode, started, exc)
        output = result.model_dump(mode="json")
        self.log.record(
            log_entry(
                prompt,
                self.model,
                variables,
                started,
                outcome="ok",
                tokens=_usage(raw),
                cost=self._cost(raw),
                output_mode=mode,
                output=output,
            )
        )
        return result

    def _on_failure(
        self,
        prompt: Prompt,
        variables: Mapping[str, Any],
        response_model: type[T],
        context: Mapping[str, Any] | None,
        mode: OutputMode,
        started: float,
        exc: BaseException,
    ) -> T:
        """Ask again in JSON mode when the server refused the schema; else log and raise the failure."""
        failure = self._failure(exc)
        self.log.record(
            log_entry(prompt, self.model, variables, started, outcome="error", output_mode=mode, error=failure.cause)
        )
        if failure.schema_refused and mode != "json":
            self._mode = "json"  # this server takes no schema: JSON mode and re-asks from now on
            return self._ask(prompt, variables, response_model, context, "json")
        raise ModelError(prompt.name, self.model, failure.cause, getattr(self._tries, "sent", 0)) from exc

    def _never_valid(
        self, prompt: Prompt, variables: Mapping[str, Any], started: float, exc: Any, mode: OutputMode
    ) -> ModelError:
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
                output_mode=mode,
                error=redact(str(exc))[:2000],
            )
        )
        return ModelError(prompt.name, self.model, NEVER_VALIDATED, attempts, last)

    def _cost(self, raw: Any) -> float:
        """The call's price by LiteLLM's table; 0 for a local or unlisted model."""
        if not self.remote:
            return 0.0
        try:
            return float(_import_litellm().completion_cost(completion_response=raw) or 0.0)
        except Exception:  # not in the price table
            return 0.0


def _past_deadline(state: Any) -> bool:
    """Stop retrying when the next attempt could not start before the current deadline."""
    left = time_left()
    return left is not None and left <= float(getattr(state, "upcoming_sleep", 0.0) or 0.0)


def _stop(attempts: int) -> Any:
    """Tenacity's stop: after ``attempts`` attempts, or when the deadline leaves no room for another."""
    from tenacity import stop_after_attempt
    from tenacity.stop import stop_base

    class PastDeadline(stop_base):
        def __call__(self, retry_state: Any) -> bool:
            return _past_deadline(retry_state)

    return stop_after_attempt(attempts) | PastDeadline()


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
    key = api_key or (LOCAL_KEY if api_base and not is_remote(model, api_base) else None)
    if key:
        extra["api_key"] = key
    try:
        response = litellm.embedding(model=model, input=texts, **extra)
    except Exception as exc:
        raise ModelError("embedding", model, classify(exc, api_base=api_base).cause) from exc
    return [item["embedding"] for item in response.data]


def count_tokens(model: str, messages: list[dict[str, Any]]) -> int:
    """Prompt tokens of ``messages`` by the model's own tokenizer where LiteLLM knows it (else its default)."""
    return int(_import_litellm().token_counter(model=model, messages=messages))


def price(model: str, prompt_tokens: int, completion_tokens: int) -> float | None:
    """US dollars for these tokens by LiteLLM's price table; None when the model is not in it."""
    try:
        prompt_cost, completion_cost = _import_litellm().cost_per_token(
            model=model, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens
        )
    except Exception:  # not in the table
        return None
    return float(prompt_cost) + float(completion_cost)
