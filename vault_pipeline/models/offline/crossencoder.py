"""The offline gate's relevance model: a small cross-encoder trained by this project.

It reads a (prompt, passage) pair as one sequence (``[CLS] prompt [SEP] passage [SEP]``, at most
``MAX_TOKENS`` word pieces) and gives a logit; ``sigmoid(a * logit + b)`` (Platt scaling, fitted
on held-out conversations of the export) is its calibrated probability that the passage is about
the prompt. The weights are all-MiniLM-L6-v2 fine-tuned by ``benchmarks/train_relevance.py``
(data and licences: docs/decisions/0110-relevance-model.md), exported to ONNX and shipped in
``relevance_model/`` beside this module with its tokenizer and ``relevance.json`` (name, sha256,
calibration). Nothing is downloaded: onnxruntime and tokenizers load the files lazily on the
first call, so importing this module costs nothing.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from vault_pipeline.errors import ConfigError
from vault_pipeline.models.offline.relevance import FOUND, FoundModel

MODEL_DIR = Path(__file__).resolve().parent / "relevance_model"
MAX_TOKENS = 128
RELEVANCE_GATE = "offline-relevance"  # the ``[models] gate`` string of the offline backend gating with this model
BATCH = 1  # one pair a run: int8 dynamic quantisation scales activations per run, so a batch would make a
# pair's probability depend on its neighbours (up to 0.2 in logit); one at a time is as fast here


@dataclass(frozen=True)
class EncoderSettings:
    """The thresholds on the model's calibrated probability: ``threshold`` keeps a candidate (the
    gate), ``stop`` makes a survivor a block (the depth stop), ``found`` says whether anything was."""

    threshold: float
    stop: float
    found: FoundModel


# Fitted by ``benchmarks/fit_evidence.py --encoder`` (docs/decisions/0111-relevance-thresholds.md).
ENCODER = EncoderSettings(threshold=0.212322, stop=0.212322, found=FOUND)


def pair_text(query: str, passage: str) -> tuple[str, str]:
    """The two sequences the model reads (whitespace collapsed)."""
    return " ".join(query.split()), " ".join(passage.split())


class CrossEncoderModel:
    """An ONNX cross-encoder and its tokenizer; ``probabilities`` scores pairs in batches."""

    def __init__(
        self, model: Path, tokenizer: Path, *, a: float, b: float, name: str = "", sha256: str = "", threads: int = 2
    ):
        self.model_path, self.tokenizer_path = model, tokenizer
        self.a, self.b = a, b
        self.name, self.sha256 = name, sha256
        self.threads = threads
        self._lock = threading.Lock()
        self._session: Any = None
        self._tokenizer: Any = None

    def _load(self) -> None:
        with self._lock:
            if self._session is not None:
                return
            from tokenizers import Tokenizer

            from vault_pipeline.models.embed import onnx_session

            if not self.model_path.is_file() or not self.tokenizer_path.is_file():
                raise ConfigError(f"relevance model missing: {self.model_path} (reinstall vault_pipeline)")
            tokenizer = Tokenizer.from_file(str(self.tokenizer_path))
            tokenizer.no_padding()
            tokenizer.enable_truncation(max_length=MAX_TOKENS)
            session = onnx_session(self.model_path, self.threads)
            self._tokenizer, self._session = tokenizer, session

    def logits(self, queries: Sequence[str], passages: Sequence[str]) -> np.ndarray:
        """The raw logit of each (query, passage) pair, in input order."""
        out = np.zeros(len(queries), dtype=np.float64)
        if not len(queries):
            return out
        self._load()
        encs = self._tokenizer.encode_batch([pair_text(q, p) for q, p in zip(queries, passages)])
        # Length-sorted batches keep the padding small; the index breaks ties so runs repeat.
        order = sorted(range(len(encs)), key=lambda i: (len(encs[i].ids), i))
        for start in range(0, len(order), BATCH):
            rows = order[start : start + BATCH]
            width = max(len(encs[i].ids) for i in rows)
            ids = np.zeros((len(rows), width), dtype=np.int64)
            mask = np.zeros_like(ids)
            types = np.zeros_like(ids)
            for r, i in enumerate(rows):
                n = len(encs[i].ids)
                ids[r, :n], mask[r, :n], types[r, :n] = encs[i].ids, 1, encs[i].type_ids
            (logit,) = self._session.run(None, {"input_ids": ids, "attention_mask": mask, "token_type_ids": types})
            out[rows] = np.asarray(logit, dtype=np.float64).reshape(-1)
        return out

    def probabilities(self, queries: Sequence[str], passages: Sequence[str]) -> np.ndarray:
        """The calibrated probability that each passage is about its query."""
        z = self.a * self.logits(queries, passages) + self.b
        return 1.0 / (1.0 + np.exp(-np.clip(z, -60, 60)))


@cache
def shipped() -> CrossEncoderModel:
    """The model shipped in ``relevance_model/`` (one per process; loaded on first use)."""
    meta_path = MODEL_DIR / "relevance.json"
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
        platt = meta["platt"]
        return CrossEncoderModel(
            MODEL_DIR / "relevance.onnx",
            MODEL_DIR / "tokenizer.json",
            a=float(platt["a"]),
            b=float(platt["b"]),
            name=str(meta["name"]),
            sha256=str(meta["sha256"]),
        )
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ConfigError(f"{meta_path}: unreadable relevance model description ({exc})") from None


def relevance_identity() -> dict[str, str]:
    """The shipped model's name and sha256, as the index manifest records them beside the embedder's
    (read from ``relevance.json``, without loading the model; empty when it is unreadable)."""
    try:
        model = shipped()
    except ConfigError:
        return {}
    return {"relevance_model": model.name, "relevance_sha256": model.sha256}
