"""The call log: one redacted JSON line per model call, and redaction of key-shaped text in library logs."""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from vault_pipeline.models.prompts import Prompt

# A provider key ("sk-", "sk-proj-", "sk-ant-api03-" and a long run of key characters), or a value after
# an auth word. The key starts a word ("ask-him-to" is a file name, not a key) and its run after the
# prefix has no hyphen-separated short words in it.
_SECRET = re.compile(
    r"((?<![A-Za-z0-9])sk-(?:[A-Za-z]{2,8}\d{0,2}-){0,3}[A-Za-z0-9_]{12,}[A-Za-z0-9_\-]*"
    r"|(?i:api[_-]?key|authorization|bearer)[\"'=: ]+[A-Za-z0-9_\-\.]{8,})"
)


def redact(text: str) -> str:
    """Replace anything shaped like an API key or auth header with a placeholder."""
    return _SECRET.sub("[redacted]", text)


# A placeholder in a tutorial ("YOUR_API_KEY", "your_openai_api_key_here", os.environ[...]) has no
# digit; a real key or token almost surely has letters and digits mixed.
_PLACEHOLDER = re.compile(r"your|example|xxxx|placeholder|here|<|\.\.\.", re.IGNORECASE)


def holds_secret(text: str) -> bool:
    """Whether ``text`` holds something that looks like a real key or token, not a placeholder:
    ``redact``'s shapes whose value mixes letters and digits and names no placeholder."""
    for match in _SECRET.finditer(text):
        value = re.split(r"[\"'=: ]+", match.group(0))[-1]
        if re.search(r"\d", value) and re.search(r"[A-Za-z]", value) and not _PLACEHOLDER.search(value):
            return True
    return False


class _RedactLogs(logging.Filter):
    """Scrub key-shaped text from library log records (instructor logs each failed attempt's error)."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.msg, record.args = redact(record.getMessage()), None
        if record.exc_info:
            record.exc_text = redact(logging.Formatter().formatException(record.exc_info))
            record.exc_info = None
        return True


_REDACT_LOGS = _RedactLogs()


def redact_library_logs() -> None:
    """Attach the redacting filter to every instructor and LiteLLM logger created so far."""
    for name, logger in list(logging.root.manager.loggerDict.items()):
        if (
            name.startswith(("instructor", "LiteLLM", "litellm"))
            and isinstance(logger, logging.Logger)
            and _REDACT_LOGS not in logger.filters
        ):
            logger.addFilter(_REDACT_LOGS)


MAX_LOGGED_CHARS = 4000  # characters of one string in a logged payload; the rest is cut with a marker
MAX_LOGGED_ITEMS = 200  # items of one list or mapping in a logged payload
_CUT = "... [{} more characters not logged]"


def excerpt(value: Any, max_chars: int = MAX_LOGGED_CHARS, max_items: int = MAX_LOGGED_ITEMS) -> Any:
    """A JSON-able copy of ``value`` with long strings and long lists cut, so one log line stays bounded."""
    if isinstance(value, str):
        return value if len(value) <= max_chars else value[:max_chars] + _CUT.format(len(value) - max_chars)
    if isinstance(value, Mapping):
        items = list(value.items())
        out = {str(k): excerpt(v, max_chars, max_items) for k, v in items[:max_items]}
        if len(items) > max_items:
            out["..."] = f"{len(items) - max_items} more keys not logged"
        return out
    if isinstance(value, (list, tuple)):
        kept = [excerpt(v, max_chars, max_items) for v in value[:max_items]]
        return [*kept, f"... [{len(value) - max_items} more items not logged]"] if len(value) > max_items else kept
    if value is None or isinstance(value, (bool, int, float)):
        return value
    return excerpt(str(value), max_chars, max_items)  # pydantic models, dates, ...: their text, cut


@dataclass(frozen=True)
class Usage:
    """What the calls recorded so far came to: the progress bar's "calls, cost so far"."""

    calls: int = 0  # requests that reached a model (answered, invalid or failed)
    cached: int = 0  # answers read from the answer cache instead (no request, no cost)
    failed: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost: float = 0.0  # US dollars by LiteLLM's price table (0 for local and unlisted models)

    def add(self, entry: Mapping[str, Any]) -> Usage:
        """These totals with one more call record counted."""
        outcome = entry.get("outcome")
        tokens = entry.get("tokens") or {}
        return Usage(
            calls=self.calls + (outcome != "cached"),
            cached=self.cached + (outcome == "cached"),
            failed=self.failed + (outcome in ("error", "invalid")),
            prompt_tokens=self.prompt_tokens + int(tokens.get("prompt", 0) or 0),
            completion_tokens=self.completion_tokens + int(tokens.get("completion", 0) or 0),
            cost=self.cost + float(entry.get("cost", 0.0) or 0.0),
        )

    def line(self) -> str:
        """``12 calls (3 cached), 8,210 tokens, $0.0042``."""
        cached = f" ({self.cached:,} cached)" if self.cached else ""
        tokens = self.prompt_tokens + self.completion_tokens
        return f"{self.calls:,} calls{cached}, {tokens:,} tokens, ${self.cost:.4f}"


class CallLog:
    """Append-only JSONL log of model calls; ``path=None`` turns logging off (``usage`` still counts).

    Payloads are logged as bounded excerpts (``max_chars`` per string), never whole: a 1 GB
    message must not become a 1 GB log line."""

    def __init__(self, path: Path | None, *, payloads: bool = True, max_chars: int = MAX_LOGGED_CHARS):
        self.path = path
        self.payloads = payloads
        self.max_chars = max_chars
        self.usage = Usage()
        self.unwritable = ""  # why the log file could not be written (then it is not tried again), or ''
        self._lock = threading.Lock()

    def record(self, entry: dict[str, Any]) -> None:
        """Count one call record and append it (keys scrubbed of secrets, payloads cut to excerpts) as a JSON line."""
        with self._lock:
            self.usage = self.usage.add(entry)
        if self.path is None:
            return
        if not self.payloads:
            entry = {k: v for k, v in entry.items() if k not in ("variables", "output")}
        line = redact(json.dumps(excerpt(entry, self.max_chars), ensure_ascii=False, sort_keys=True))
        with self._lock:
            if self.unwritable:
                return
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                with self.path.open("a", encoding="utf-8") as fh:
                    fh.write(line + "\n")
            except OSError as exc:
                # The log is a record, not the answer: a full disk or a read-only state folder (another
                # user's vault) must not fail a query. Said once; the calls are still counted.
                self.unwritable = f"{self.path}: {exc.strerror or exc}"
                logging.getLogger(__name__).warning("call log not written: %s", self.unwritable)


def log_entry(prompt: Prompt, model: str, variables: Mapping[str, Any], started: float, **extra: Any) -> dict:
    """The record of one call: prompt identity, model, latency since ``started``, variables and ``extra``."""
    return {
        "ts": datetime.now(UTC).isoformat(timespec="seconds"),
        "prompt": prompt.name,
        "prompt_version": prompt.version,
        "prompt_hash": prompt.hash,
        "model": model,
        "temperature": prompt.temperature,
        "latency_ms": round((time.perf_counter() - started) * 1000, 2),
        "variables": dict(variables),
        **extra,
    }
