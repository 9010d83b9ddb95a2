"""The model seam: every model call in the project goes through this module.

Two backends implement one protocol, ``StructuredLLM.call(prompt, variables,
response_model, context=...)``:

* ``LiteLLMBackend``: any LiteLLM model string, through instructor in JSON mode
  (litellm 1.106.2 fails any ``tools=`` call without the ``mcp`` package, so
  instructor's default TOOLS mode is not used). Validation failures are re-asked
  by instructor; transient transport errors are retried by tenacity.
* ``OfflineBackend``: deterministic algorithms in ``vault_pipeline.models.offline``; it
  returns the same pydantic types through the same validators and never imports
  litellm (whose import alone costs seconds).

Only this module imports litellm and instructor.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from functools import lru_cache
from ipaddress import ip_address
from pathlib import Path
from typing import Any, Protocol, TypeVar
from urllib.parse import urlparse

from pydantic import BaseModel, ValidationError

from vault_pipeline.errors import ConfigError, ModelError

T = TypeVar("T", bound=BaseModel)

OFFLINE_MODEL = "offline"
_PACKAGE_PROMPTS = Path(__file__).resolve().parents[1] / "_prompts"
_REPO_PROMPTS = Path(__file__).resolve().parents[2] / "prompts"


# --------------------------------------------------------------------------- prompts


@dataclass(frozen=True)
class Prompt:
    """A prompt file: settings from its frontmatter, a system part and a user template."""

    name: str
    version: str
    temperature: float
    system: str
    template: str

    @property
    def hash(self) -> str:
        """Short content hash of the prompt, logged with every call."""
        text = f"{self.name}\n{self.version}\n{self.temperature}\n{self.system}\n{self.template}"
        return hashlib.sha256(text.encode()).hexdigest()[:12]

    def render(self, variables: Mapping[str, Any]) -> list[dict[str, str]]:
        """Render to chat messages; a missing variable is an error, never an empty string."""
        env = _jinja_env()
        try:
            user = env.from_string(self.template).render(**variables)
            system = env.from_string(self.system).render(**variables)
        except Exception as exc:  # jinja2's UndefinedError and sandbox errors
            raise ConfigError(f"prompt {self.name!r}: {exc}") from exc
        return [{"role": "system", "content": system.strip()}, {"role": "user", "content": user.strip()}]


@lru_cache(maxsize=1)
def _jinja_env():
    from jinja2 import StrictUndefined
    from jinja2.sandbox import SandboxedEnvironment

    env = SandboxedEnvironment(undefined=StrictUndefined, autoescape=False, keep_trailing_newline=True)
    env.filters["tojson"] = lambda value: json.dumps(value, ensure_ascii=False, default=str)
    return env


def prompts_dir() -> Path:
    """The prompt folder: inside an installed wheel, else the repository's ``prompts/``."""
    return _PACKAGE_PROMPTS if _PACKAGE_PROMPTS.is_dir() else _REPO_PROMPTS


@lru_cache(maxsize=None)
def load_prompt(name: str) -> Prompt:
    """Load ``prompts/<name>.md``: YAML-ish frontmatter, then ``# system`` and ``# user`` parts."""
    path = prompts_dir() / f"{name}.md"
    if not path.is_file():
        raise ConfigError(f"prompt file not found: {path}")
    text = path.read_text(encoding="utf-8")
    match = re.match(r"^---\n(.*?)\n---\n(.*)$", text, re.S)
    if not match:
        raise ConfigError(f"{path}: prompt needs a frontmatter block (name, version, temperature)")
    meta = dict(line.split(":", 1) for line in match.group(1).splitlines() if ":" in line)
    meta = {k.strip(): v.strip() for k, v in meta.items()}
    parts = re.split(r"^# (system|user)\s*$", match.group(2), flags=re.M)
    sections = dict(zip(parts[1::2], parts[2::2]))
    if "user" not in sections:
        raise ConfigError(f"{path}: prompt needs a '# user' section")
    return Prompt(
        name=meta.get("name", name),
        version=meta.get("version", "0"),
        temperature=float(meta.get("temperature", "0")),
        system=sections.get("system", ""),
        template=sections["user"],
    )


# --------------------------------------------------------------------------- call log

_SECRET = re.compile(
    r"(sk-[A-Za-z0-9_\-]{8,}|sk-ant-[A-Za-z0-9_\-]{8,}|(?i:api[_-]?key|authorization|bearer)[\"'=: ]+[A-Za-z0-9_\-\.]{8,})"
)


def redact(text: str) -> str:
    """Replace anything shaped like an API key or auth header with a placeholder."""
    return _SECRET.sub("[redacted]", text)


class _RedactLogs(logging.Filter):
    """Scrub key-shaped text from library log records (instructor logs each failed attempt's error)."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.msg, record.args = redact(record.getMessage()), None
        if record.exc_info:
            record.exc_text = redact(logging.Formatter().formatException(record.exc_info))
            record.exc_info = None
        return True


_REDACT_LOGS = _RedactLogs()


def _redact_library_logs() -> None:
    """Attach the redacting filter to every instructor and LiteLLM logger created so far."""
    for name, logger in list(logging.root.manager.loggerDict.items()):
        if name.startswith(("instructor", "LiteLLM", "litellm")) and isinstance(logger, logging.Logger) \
                and _REDACT_LOGS not in logger.filters:
            logger.addFilter(_REDACT_LOGS)


class CallLog:
    """Append-only JSONL log of model calls; ``path=None`` turns logging off."""

    def __init__(self, path: Path | None, *, payloads: bool = True):
        self.path = path
        self.payloads = payloads
        self._lock = threading.Lock()

    def record(self, entry: dict[str, Any]) -> None:
        """Append one call record (keys scrubbed of secrets) as a JSON line."""
        if self.path is None:
            return
        if not self.payloads:
            entry = {k: v for k, v in entry.items() if k not in ("variables", "output")}
        line = redact(json.dumps(entry, ensure_ascii=False, default=str, sort_keys=True))
        with self._lock:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("a", encoding="utf-8") as fh:
                fh.write(line + "\n")


def _entry(prompt: Prompt, model: str, variables: Mapping[str, Any], started: float, **extra: Any) -> dict:
    return {
        "ts": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "prompt": prompt.name,
        "prompt_version": prompt.version,
        "prompt_hash": prompt.hash,
        "model": model,
        "temperature": prompt.temperature,
        "latency_ms": round((time.perf_counter() - started) * 1000, 2),
        "variables": dict(variables),
        **extra,
    }


# --------------------------------------------------------------------------- batch answers


def check_one_per_key(seen: list[str], context: Mapping[str, Any] | None, what: str) -> None:
    """Raise (for a re-ask) unless a batched answer has exactly one item per key in ``context["keys"]``."""
    keys = (context or {}).get("keys")
    if keys is None:
        return
    missing = sorted(set(keys) - set(seen))
    unknown = sorted(set(seen) - set(keys))
    repeated = sorted({k for k in seen if seen.count(k) > 1})
    if missing or unknown or repeated:
        raise ValueError(f"give exactly one {what} per key {sorted(keys)}: "
                         f"missing {missing}, unknown {unknown}, repeated {repeated}")


# --------------------------------------------------------------------------- protocol


class StructuredLLM(Protocol):
    """A model that answers a prompt with a validated pydantic object."""

    model: str
    remote: bool

    def call(self, prompt: Prompt, variables: Mapping[str, Any], response_model: type[T], *,
             context: Mapping[str, Any] | None = None) -> T:
        """Render ``prompt`` with ``variables`` and return a validated ``response_model``."""
        ...


# --------------------------------------------------------------------------- offline


class OfflineBackend:
    """Deterministic algorithmic stand-in for a model: same protocol, same validators."""

    model = OFFLINE_MODEL
    remote = False

    def __init__(self, log: CallLog | None = None,
                 handlers: Mapping[str, Callable[[Mapping[str, Any]], Any]] | None = None):
        self.log = log or CallLog(None)
        self._handlers = handlers

    def _handler(self, name: str) -> Callable[[Mapping[str, Any]], Any]:
        if self._handlers is None:
            from vault_pipeline.models.offline import HANDLERS

            self._handlers = HANDLERS
        try:
            return self._handlers[name]
        except KeyError:
            raise ModelError(name, self.model, "the offline backend has no algorithm for this prompt") from None

    def call(self, prompt: Prompt, variables: Mapping[str, Any], response_model: type[T], *,
             context: Mapping[str, Any] | None = None) -> T:
        """Run the prompt's offline algorithm and validate its answer like a model's."""
        started = time.perf_counter()
        data = self._handler(prompt.name)(variables)
        try:
            result = response_model.model_validate(data, context=dict(context or {}))
        except ValidationError as exc:
            self.log.record(_entry(prompt, self.model, variables, started, outcome="invalid", error=str(exc)))
            raise ModelError(prompt.name, self.model, f"offline answer failed validation: {exc}", 1,
                             json.dumps(data, default=str)[:2000]) from exc
        self.log.record(_entry(prompt, self.model, variables, started, outcome="ok", attempts=1,
                               tokens={"prompt": 0, "completion": 0},
                               output=result.model_dump(mode="json")))
        return result


# --------------------------------------------------------------------------- litellm


def _import_litellm():
    # Without the local cost map, importing litellm fetches it over the network (3 retries, ~11 s).
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import litellm

    litellm.telemetry = False
    return litellm


def _transient_errors() -> tuple[type[BaseException], ...]:
    litellm = _import_litellm()
    names = ("RateLimitError", "APIConnectionError", "Timeout", "ServiceUnavailableError",
             "InternalServerError", "BadGatewayError")
    return tuple(getattr(litellm, n) for n in names if hasattr(litellm, n))


class LiteLLMBackend:
    """Any LiteLLM model string through instructor (JSON mode) with retries and a call log."""

    remote = True

    def __init__(self, model: str, *, api_base: str | None = None,
                 completion: Callable[..., Any] | None = None, log: CallLog | None = None,
                 max_reasks: int = 2, transient_attempts: int = 4, timeout: float = 60.0):
        self.model = model
        self.api_base = api_base
        self.remote = is_remote(model, api_base)
        self.log = log or CallLog(None)
        self.max_reasks = max_reasks
        self.timeout = timeout
        self._completion = completion
        self._transient_attempts = transient_attempts
        self._client = None

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
        _redact_library_logs()
        return client

    def call(self, prompt: Prompt, variables: Mapping[str, Any], response_model: type[T], *,
             context: Mapping[str, Any] | None = None) -> T:
        """Ask the model; re-ask on validation failure; raise ModelError when it never validates."""
        from instructor.core.exceptions import InstructorRetryException

        if self._client is None:
            self._client = self._build_client()
        started = time.perf_counter()
        extra = {"api_base": self.api_base} if self.api_base else {}
        try:
            result, raw = self._client.chat.completions.create_with_completion(
                model=self.model, messages=prompt.render(variables), response_model=response_model,
                max_retries=self.max_reasks, context=dict(context or {}),
                temperature=prompt.temperature, timeout=self.timeout, **extra)
        except InstructorRetryException as exc:
            if exc.__cause__ is not None and not isinstance(exc.__cause__, ValueError):
                raise self._failed(prompt, variables, started, exc.__cause__) from exc  # auth, transport: not output
            last = redact(str(getattr(exc, "last_completion", "") or ""))[:2000]
            attempts = int(getattr(exc, "n_attempts", self.max_reasks + 1) or 0)
            self.log.record(_entry(prompt, self.model, variables, started, outcome="invalid",
                                   attempts=attempts, error=redact(str(exc))[:2000]))
            raise ModelError(prompt.name, self.model, "output never validated", attempts, last) from exc
        except ConfigError:
            raise
        except Exception as exc:  # transport errors after tenacity gave up, auth, bad model string
            raise self._failed(prompt, variables, started, exc) from exc
        self.log.record(_entry(prompt, self.model, variables, started, outcome="ok",
                               tokens=_usage(raw), output=result.model_dump(mode="json")))
        return result

    def _failed(self, prompt: Prompt, variables: Mapping[str, Any], started: float, exc: BaseException) -> ModelError:
        """Log a call that failed for a reason other than its output, and the error to raise (keys redacted)."""
        reason = redact(f"{type(exc).__name__}: {exc}")
        self.log.record(_entry(prompt, self.model, variables, started, outcome="error", error=reason[:2000]))
        return ModelError(prompt.name, self.model, reason[:500])


def _usage(raw: Any) -> dict[str, int]:
    usage = getattr(raw, "usage", None)
    return {"prompt": int(getattr(usage, "prompt_tokens", 0) or 0),
            "completion": int(getattr(usage, "completion_tokens", 0) or 0)}


# --------------------------------------------------------------------------- factory


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


def build_llm(model: str, *, api_base: str | None = None, log: CallLog | None = None) -> StructuredLLM:
    """The backend for a model string: ``offline`` or any LiteLLM model string."""
    if not model:
        raise ConfigError("empty model string")
    if model == OFFLINE_MODEL:
        return OfflineBackend(log=log)
    if "/" not in model:
        raise ConfigError(f"model {model!r}: use a LiteLLM model string such as 'openai/gpt-4o-mini', "
                          "'anthropic/claude-3-5-haiku-latest' or 'ollama/llama3.1', or 'offline'")
    return LiteLLMBackend(model, api_base=api_base, log=log)


def litellm_embed(model: str, texts: list[str], *, api_base: str | None = None) -> list[list[float]]:
    """Embed texts with a LiteLLM embedding model (used by ``embed.LiteLLMEmbedder``)."""
    litellm = _import_litellm()
    extra = {"api_base": api_base} if api_base else {}
    try:
        response = litellm.embedding(model=model, input=texts, **extra)
    except Exception as exc:
        raise ModelError("embedding", model, redact(f"{type(exc).__name__}: {exc}")[:500]) from exc
    return [item["embedding"] for item in response.data]
