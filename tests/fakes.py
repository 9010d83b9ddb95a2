"""Test fakes for the project's outside-service Protocols (others may append here)."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from functools import lru_cache

import numpy as np

_WORD = re.compile(r"\w+", re.UNICODE)


@lru_cache(maxsize=65536)
def _bucket(feature: str, dim: int) -> tuple[int, float]:
    """A stable (bucket, sign) for a feature; Python's hash() is salted per process."""
    digest = int.from_bytes(hashlib.blake2b(feature.encode("utf-8"), digest_size=8).digest(), "big")
    return digest % dim, (1.0 if (digest >> 63) & 1 else -1.0)


class HashEmbedder:
    """Deterministic bag-of-words feature hashing (+ char trigrams), L2-normalised.

    Fast and offline: shared words give high cosine, near-words (plural,
    tense) relate through their trigrams, unrelated texts sit near zero.
    """

    def __init__(self, dim: int = 64, trigram_weight: float = 0.5):
        self.dim = dim
        self.name = f"hash-{dim}"
        self.trigram_weight = trigram_weight
        self.calls: list[list[str]] = []

    def _features(self, text: str) -> list[tuple[str, float]]:
        words = _WORD.findall(text.lower())
        feats = [("w:" + w, 1.0) for w in words]
        for word in words:
            padded = f"#{word}#"
            feats.extend(("t:" + padded[i:i + 3], self.trigram_weight) for i in range(len(padded) - 2))
        return feats or [("<empty>", 1.0)]

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Embed ``texts`` into (n, dim) float32 unit rows."""
        self.calls.append(list(texts))
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            for feature, weight in self._features(text):
                bucket, sign = _bucket(feature, self.dim)
                out[row, bucket] += sign * weight
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return out / np.clip(norms, 1e-12, None)


def queued_completion(answers: list[str]):
    """A completion callable answering through litellm's ``mock_response``, one queued answer a call.

    The real instructor parsing and re-ask path runs on it with no network; ``calls`` records
    every request so tests can read what was asked (and the validation error of a re-ask).
    """
    import litellm

    calls: list[dict] = []
    queue = iter(answers)

    def completion(**kwargs):
        calls.append(kwargs)
        return litellm.completion(mock_response=next(queue), **kwargs)

    return completion, calls
