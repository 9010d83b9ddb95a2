"""A lane's exact top ``k``: LanceDB's page re-scored exactly, cut with ties broken by chunk id.

The search reads a slim page (chunk ids, and vectors for the exact cosine); ``ranked`` keeps the
top ``k`` by score, then chunk id, fetching a bigger page while ties cross the cut. ``Index``
then reads the other columns of every lane's top in one ``take`` (``positions`` finds them).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa


def text_score(qvec: np.ndarray | None, cosines):
    """A full-text page's scores: (BM25, cosine to ``qvec`` or NaN)."""

    def score(rows: pa.Table) -> tuple[np.ndarray, np.ndarray]:
        bm25 = rows["_score"].to_numpy().astype(np.float64)
        sims = np.full(rows.num_rows, np.nan) if qvec is None else cosines(rows, qvec)
        return bm25, sims

    return score


def page(k: int) -> int:
    """Rows fetched for a top ``k``: a margin, since the library's cut and our exact re-score may
    disagree by float noise, and room for BM25 ties (templated notes tie often: with k + 5 rows
    a third of full-text searches had to fetch again; with 3k + 10 none did at 120k rows)."""
    return 3 * k + 10


@dataclass(frozen=True)
class Ranked:
    """A lane's top ``k`` before its columns are read: the searched (slim) rows, scores, cosines."""

    rows: pa.Table  # chunk_id, _rowid (and the vector when the lane searched with it)
    scores: np.ndarray
    sims: np.ndarray


def take_positions(top: Ranked, where: dict[int, int], chunk_ids: list[str]) -> list[int] | None:
    """Where each of a top's rows sits in the shared take; None when a row is missing or another chunk."""
    positions = [where.get(int(r), -1) for r in top.rows["_rowid"].to_pylist()]
    if any(p < 0 or chunk_ids[p] != c for p, c in zip(positions, top.rows["chunk_id"].to_pylist())):
        return None
    return positions


def by_score(rows: pa.Table, scores: np.ndarray) -> list[int]:
    """Row positions by score desc, then chunk id asc."""
    ids = rows["chunk_id"].to_pylist()
    return sorted(range(len(ids)), key=lambda i: (-float(scores[i]), ids[i]))


def ranked(fetch, score, k: int) -> Ranked:
    """Top ``k`` by score desc, then chunk id asc, fetching more while ties cross the cut."""
    limit = page(k)
    while True:
        rows = fetch(limit)
        scores, sims = score(rows)
        order = by_score(rows, scores)
        # A full page whose last score still equals the k-th may hide tied rows with smaller ids.
        if rows.num_rows < limit or len(order) <= k or float(scores[order[k - 1]]) != float(scores[order[-1]]):
            keep = order[:k]
            return Ranked(rows.take(pa.array(keep, type=pa.int64())), scores[keep], sims[keep])
        limit *= 4
