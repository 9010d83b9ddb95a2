"""Logistic regression by Newton's method: the one fit behind the offline gates' weights.

The Note Quality Gate (``ingest/quality.py``) and the offline fit-gate
(``models/offline/relevance.py``) each weigh a handful of signals; both fit them here,
L2-regularised, with numpy only (no model library for six numbers).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence


def newton(
    rows: Sequence[Mapping[str, float]],
    labels: Sequence[bool],
    names: Sequence[str],
    *,
    l2: float = 1.0,
    steps: int = 100,
    tolerance: float = 1e-10,
) -> tuple[dict[str, float], float]:
    """(weights by name, bias) of an L2-regularised logistic regression; the bias is not shrunk.

    A missing signal in a row counts as 0; booleans count as 0 / 1."""
    import numpy as np

    x = np.array([[1.0] + [float(r.get(n, 0.0)) for n in names] for r in rows])
    y = np.array([1.0 if lab else 0.0 for lab in labels])
    w = np.zeros(x.shape[1])
    penalty = np.eye(x.shape[1]) * l2
    penalty[0, 0] = 0.0
    for _ in range(steps):
        p = 1.0 / (1.0 + np.exp(-(x @ w)))
        grad = x.T @ (p - y) + penalty @ w
        hess = (x.T * (p * (1 - p))) @ x + penalty + np.eye(x.shape[1]) * 1e-9
        step = np.linalg.solve(hess, grad)
        w -= step
        if float(np.abs(step).max()) < tolerance:
            break
    return {n: float(v) for n, v in zip(names, w[1:])}, float(w[0])


def sigmoid(x: float) -> float:
    """The logistic function, without overflow for a large negative ``x``."""
    return 1.0 / (1.0 + math.exp(-x)) if x >= 0 else math.exp(x) / (1.0 + math.exp(x))
