"""Counting tokens: a context package's by a real tokenizer, and what a gate run costs.

A package is counted by a tokenizer of the configured model family (``token_counter``), offline:
the litellm wheel carries tiktoken's encoding files (``litellm_core_utils/tokenizers/``, named as
tiktoken's cache names them: the sha1 of the file's URL) and an older Claude tokenizer. They are
found through the package's import path without importing litellm (its import costs seconds),
checked against tiktoken's own sha256 before tiktoken reads them, so it never fetches or removes
anything. Where they are missing the count falls back to ``text.estimate_tokens`` (UTF-8 bytes / 4),
and the counter's name says so. Decision 0140.

``gate-calibrate`` wraps the gate model in ``MeteredLLM`` (calls) and taps its call log with
``TokenTap`` (tokens). A backend without a call log reports no tokens (None), never zero.
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache, lru_cache
from pathlib import Path
from typing import Any

from vault_pipeline.models.protocol import CallRecorder, LoggedLLM, StructuredLLM
from vault_pipeline.text import estimate_tokens

log = logging.getLogger(__name__)

BYTES = "utf8-bytes/4"  # the fallback estimate (``text.estimate_tokens``)
CLAUDE = "claude"  # the Claude tokenizer litellm ships (``anthropic_tokenizer.json``, pre-Claude-3)
DEFAULT_TOKENIZER = "cl100k_base"
# tiktoken's encodings litellm ships, with the sha256 tiktoken itself expects of each
# (``tiktoken_ext/openai_public.py``): a file that differs is not handed to tiktoken, which would
# delete it and download another.
ENCODINGS = {
    "cl100k_base": "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
    "o200k_base": "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
    "p50k_base": "94b5ca7dff4d00767bc256fdd1b27e5b17361d7b8a5f968547f9f23eb70d2069",
}
TOKENIZERS = (*ENCODINGS, CLAUDE, BYTES)
_BLOB = "https://openaipublic.blob.core.windows.net/encodings/{}.tiktoken"
# Model families by a model string's words (LiteLLM names: "openai/gpt-4o-mini", "anthropic/claude-...").
_FAMILIES = (
    (("gpt-4o", "gpt-4.1", "gpt-4.5", "gpt-5", "chatgpt-4o", "gpt-oss", "/o1", "/o3", "/o4"), "o200k_base"),
    (("gpt-4", "gpt-3.5", "gpt-35", "text-embedding-3", "text-embedding-ada"), "cl100k_base"),
    (("text-davinci", "code-davinci"), "p50k_base"),
    (("claude", "anthropic/"), CLAUDE),
)
_LOAD_LOCK = threading.Lock()
COUNTS_KEPT = 4096  # texts whose token count a real tokenizer's counter remembers


@dataclass(frozen=True)
class TokenCounter:
    """A named way to count a text's tokens: ``name`` is what a package reports it used."""

    name: str
    count: Callable[[str], int]


def tokenizer_for(model: str) -> str:
    """The tokenizer of ``model``'s family; the default (cl100k) for a model no family names
    (the offline backend, a local Llama or Qwen: no tokenizer of theirs ships here)."""
    name = f"/{model.strip().lower()}"
    for words, tokenizer in _FAMILIES:
        if any(word in name for word in words):
            return tokenizer
    return DEFAULT_TOKENIZER


def bytes_counter() -> TokenCounter:
    """The fallback: ``text.estimate_tokens`` (ceil(UTF-8 bytes / 4))."""
    return TokenCounter(BYTES, estimate_tokens)


@cache
def token_counter(name: str) -> TokenCounter:
    """The counter called ``name`` (one of ``TOKENIZERS``); the bytes estimate, with a warning,
    when its files are not installed or not intact."""
    if name == BYTES:
        return bytes_counter()
    if name not in TOKENIZERS:
        raise ValueError(f"tokenizer {name!r} is not one of {', '.join(TOKENIZERS)}")
    try:
        with _LOAD_LOCK:
            count = _claude_count() if name == CLAUDE else _tiktoken_count(name)
    except (OSError, ValueError, ImportError) as exc:
        log.warning("tokenizer %s is not available offline (%s); counting UTF-8 bytes / 4", name, exc)
        return bytes_counter()
    # One package's assembly counts most texts several times (a block as it enters, refills, the
    # dropped list, the rendered whole before and after): a text is encoded once.
    return TokenCounter(name, lru_cache(maxsize=COUNTS_KEPT)(count))


def tokenizer_files() -> Path:
    """litellm's ``litellm_core_utils/tokenizers`` folder, found without importing litellm."""
    spec = importlib.util.find_spec("litellm")  # a top-level package: its __init__ is not run
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("litellm is not installed")
    return Path(next(iter(spec.submodule_search_locations))) / "litellm_core_utils" / "tokenizers"


def _tiktoken_count(name: str) -> Callable[[str], int]:
    import tiktoken

    folder = tokenizer_files()
    blob = (folder / hashlib.sha1(_BLOB.format(name).encode()).hexdigest()).read_bytes()
    if hashlib.sha256(blob).hexdigest() != ENCODINGS[name]:
        raise ValueError(f"{folder}: the {name} file is not the one tiktoken expects")
    # tiktoken reads an encoding from TIKTOKEN_CACHE_DIR when the file is there: point it at
    # litellm's folder for this one load (under the lock), then put the variable back.
    before = os.environ.get("TIKTOKEN_CACHE_DIR")
    os.environ["TIKTOKEN_CACHE_DIR"] = str(folder)
    try:
        encoding = tiktoken.get_encoding(name)
    finally:
        if before is None:
            os.environ.pop("TIKTOKEN_CACHE_DIR", None)
        else:
            os.environ["TIKTOKEN_CACHE_DIR"] = before
    return lambda text: len(encoding.encode_ordinary(text))


def _claude_count() -> Callable[[str], int]:
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(tokenizer_files() / "anthropic_tokenizer.json"))
    return lambda text: len(tokenizer.encode(text, add_special_tokens=False).ids)


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
