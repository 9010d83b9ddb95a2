"""The answer cache: a model's validated answers, kept so that an interrupted ingest never pays twice.

An answer is keyed by everything that decides it: the model and the server asked, the prompt's
content hash (its text, version and temperature), the variables it was rendered with, the
answer's schema and the validation context. A changed prompt, model, schema or input is another
key, so nothing stale is reused. An answer read back is validated again, with today's validators,
before it is returned; one that no longer validates is asked for again. The cache is a SQLite file
under ``<vault>/.vault_pipeline/`` (derived: deleting it costs calls, nothing else), written after
each answer so a killed process keeps every answer it was given. docs/decisions/0081-model-ingest.md.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
import time
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from vault_pipeline.models.calllog import CallLog, log_entry
from vault_pipeline.models.prompts import Prompt
from vault_pipeline.models.protocol import StructuredLLM, T

ANSWERS_FILE = "answers.sqlite"


@cache
def _schema_hash(response_model: type[BaseModel]) -> str:
    schema = json.dumps(response_model.model_json_schema(), sort_keys=True)
    return hashlib.sha256(schema.encode("utf-8")).hexdigest()[:16]


def answer_key(
    model: str,
    api_base: str | None,
    prompt: Prompt,
    variables: Mapping[str, Any],
    response_model: type[BaseModel],
    context: Mapping[str, Any] | None,
) -> str:
    """The cache key of one call: a hash of the model, server, prompt, variables, schema and context."""
    payload = {
        "model": model,
        "api_base": api_base or "",
        "prompt": [prompt.name, prompt.hash],
        "schema": [response_model.__name__, _schema_hash(response_model)],
        "variables": variables,
        "context": context or {},
    }
    text = json.dumps(payload, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


class AnswerCache:
    """Validated answers by ``answer_key``, in one SQLite file, safe to share between threads."""

    def __init__(self, path: Path):
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("CREATE TABLE IF NOT EXISTS answers (key TEXT PRIMARY KEY, answer TEXT NOT NULL)")
        self._lock = threading.Lock()

    def get(self, key: str) -> str | None:
        """The stored answer (JSON text), or None."""
        with self._lock:
            row = self._db.execute("SELECT answer FROM answers WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

    def has(self, key: str) -> bool:
        """Whether an answer is stored under ``key``."""
        return self.get(key) is not None

    def put(self, key: str, answer: str) -> None:
        """Store an answer (committed at once: a killed process keeps it)."""
        with self._lock:
            self._db.execute("INSERT OR REPLACE INTO answers (key, answer) VALUES (?, ?)", (key, answer))

    def __len__(self) -> int:
        with self._lock:
            return int(self._db.execute("SELECT COUNT(*) FROM answers").fetchone()[0])

    def close(self) -> None:
        """Close the file."""
        with self._lock:
            self._db.close()


class CachedLLM:
    """A ``StructuredLLM`` that answers from an ``AnswerCache`` where it can and asks ``inner`` elsewhere."""

    def __init__(self, inner: StructuredLLM, answers: AnswerCache, *, log: CallLog | None = None):
        self.inner = inner
        self.answers = answers
        self.model = inner.model
        self.remote = inner.remote
        self.log = log or getattr(inner, "log", None) or CallLog(None)

    def key(
        self,
        prompt: Prompt,
        variables: Mapping[str, Any],
        response_model: type[BaseModel],
        context: Mapping[str, Any] | None,
    ) -> str:
        """The cache key of a call to this model."""
        return answer_key(self.model, getattr(self.inner, "api_base", None), prompt, variables, response_model, context)

    def call(
        self,
        prompt: Prompt,
        variables: Mapping[str, Any],
        response_model: type[T],
        *,
        context: Mapping[str, Any] | None = None,
    ) -> T:
        """The stored answer, validated again, or the model's (then stored)."""
        key = self.key(prompt, variables, response_model, context)
        started = time.perf_counter()
        stored = self.answers.get(key)
        if stored is not None:
            try:
                result = response_model.model_validate_json(stored, context=dict(context or {}))
            except ValidationError:
                pass  # today's validators refuse it: ask again
            else:
                self.log.record(log_entry(prompt, self.model, variables, started, outcome="cached"))
                return result
        result = self.inner.call(prompt, variables, response_model, context=context)
        self.answers.put(key, result.model_dump_json())
        return result
