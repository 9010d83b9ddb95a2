"""Counting what a gate run costs: model calls, and tokens from the backend's own call log.

``gate-calibrate`` wraps the gate model in ``MeteredLLM`` (calls) and taps its call log with
``TokenTap`` (tokens). A backend without a call log reports no tokens (None), never zero.
"""

from __future__ import annotations

import threading
from typing import Any

from vault_pipeline.models.protocol import CallRecorder, LoggedLLM, StructuredLLM


class MeteredLLM:
    """Wraps a StructuredLLM to count calls; tokens come from the backend's own call-log entries."""

    def __init__(self, llm: StructuredLLM):
        self.inner = llm
        self.model = llm.model
        self.remote = llm.remote
        self.calls = 0
        self._lock = threading.Lock()

    def call(self, prompt, variables, response_model, *, context=None):
        """Count the call, then forward it unchanged."""
        with self._lock:
            self.calls += 1
        return self.inner.call(prompt, variables, response_model, context=context)


class TokenTap:
    """While active, sees every entry the backend logs (and still forwards it to the real log)."""

    def __init__(self, llm: StructuredLLM):
        self.llm = llm if isinstance(llm, LoggedLLM) else None
        log = self.llm.log if self.llm is not None else None
        self.real: CallRecorder | None = log if isinstance(log, CallRecorder) else None
        self.tokens = 0
        self.entries = 0
        self._lock = threading.Lock()

    def record(self, entry: dict[str, Any]) -> None:
        """Add the entry's token counts, then forward it."""
        tokens = entry.get("tokens") or {}
        with self._lock:
            self.entries += 1
            self.tokens += int(tokens.get("prompt", 0)) + int(tokens.get("completion", 0))
        if self.real is not None:
            self.real.record(entry)

    def __enter__(self) -> TokenTap | None:
        if self.llm is None or self.real is None:
            return None  # a backend without a call log reports no tokens
        self.llm.log = self
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.llm is not None and self.real is not None:
            self.llm.log = self.real
