"""Shared by ``train_relevance.py`` and ``bench_pairs.py``: a plain BM25 over short passages and the
ranking figures of a pair test (ROC-AUC, recall@k, precision at a recall, precision/recall at a threshold).

BM25 here is Robertson's with k1 = 1.2, b = 0.75 over ``vault_pipeline.text.tokens`` (lower-cased
words and numbers); it stands for the funnel's full-text lane in the pair test and picks the hard
negatives of the training data.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Sequence

import numpy as np

from vault_pipeline.text import tokens

K1 = 1.2
B = 0.75


class BM25:
    """An inverted index over ``docs``; ``scores(query)`` gives one score per doc."""

    def __init__(self, docs: Sequence[str]):
        self.terms = [Counter(tokens(d)) for d in docs]
        self.lengths = np.array([sum(t.values()) for t in self.terms], dtype=np.float64)
        self.mean = float(self.lengths.mean()) if len(docs) else 1.0
        self.postings: dict[str, list[tuple[int, int]]] = defaultdict(list)
        for i, counts in enumerate(self.terms):
            for term, n in counts.items():
                self.postings[term].append((i, n))
        self.n = len(docs)

    def scores(self, query: str) -> np.ndarray:
        """BM25 score of every doc for ``query`` (0 where no query word occurs)."""
        out = np.zeros(self.n, dtype=np.float64)
        for term in set(tokens(query)):
            posting = self.postings.get(term)
            if not posting:
                continue
            idf = math.log(1 + (self.n - len(posting) + 0.5) / (len(posting) + 0.5))
            for i, tf in posting:
                norm = tf + K1 * (1 - B + B * self.lengths[i] / self.mean)
                out[i] += idf * tf * (K1 + 1) / norm
        return out


def auc(scores: Sequence[float], labels: Sequence[bool]) -> float:
    """ROC-AUC by ranks (ties share their mean rank)."""
    s = np.asarray(scores, dtype=np.float64)
    y = np.asarray(labels, dtype=bool)
    pos, neg = int(y.sum()), int((~y).sum())
    if pos == 0 or neg == 0:
        return float("nan")
    order = np.argsort(s, kind="mergesort")
    ranks = np.empty(len(s), dtype=np.float64)
    sorted_s = s[order]
    i = 0
    while i < len(s):
        j = i
        while j + 1 < len(s) and sorted_s[j + 1] == sorted_s[i]:
            j += 1
        ranks[order[i : j + 1]] = (i + j) / 2 + 1
        i = j + 1
    return float((ranks[y].sum() - pos * (pos + 1) / 2) / (pos * neg))


def precision_at_recall(scores: Sequence[float], labels: Sequence[bool], recall: float) -> tuple[float, float]:
    """(precision, threshold) at the highest threshold whose recall reaches ``recall``."""
    s = np.asarray(scores, dtype=np.float64)
    y = np.asarray(labels, dtype=bool)
    order = np.argsort(-s, kind="mergesort")
    hits = np.cumsum(y[order])
    total = max(1, int(y.sum()))
    idx = int(np.searchsorted(hits, math.ceil(recall * total)))
    idx = min(idx, len(s) - 1)
    return float(hits[idx] / (idx + 1)), float(s[order][idx])


def at_threshold(scores: Sequence[float], labels: Sequence[bool], threshold: float) -> tuple[float, float]:
    """(precision, recall) of ``score >= threshold``."""
    s = np.asarray(scores, dtype=np.float64)
    y = np.asarray(labels, dtype=bool)
    kept = s >= threshold
    tp = int((kept & y).sum())
    return (tp / int(kept.sum()) if kept.any() else 0.0), tp / max(1, int(y.sum()))


def best_f1_threshold(scores: Sequence[float], labels: Sequence[bool]) -> float:
    """The threshold with the best F1 of ``score >= threshold``."""
    s = np.asarray(scores, dtype=np.float64)
    y = np.asarray(labels, dtype=bool)
    order = np.argsort(-s, kind="mergesort")
    hits = np.cumsum(y[order])
    k = np.arange(1, len(s) + 1)
    f1 = 2 * hits / (k + max(1, int(y.sum())))
    return float(s[order][int(np.argmax(f1))])


def recall_at(groups: dict[str, list[tuple[float, bool]]], k: int = 5) -> float:
    """Mean over queries with a positive of the share of its positives among its top ``k`` by score."""
    shares = []
    for rows in groups.values():
        pos = sum(1 for _, y in rows if y)
        if not pos:
            continue
        top = sorted(rows, key=lambda r: -r[0])[:k]
        shares.append(sum(1 for _, y in top if y) / min(pos, k))
    return float(np.mean(shares)) if shares else float("nan")
