"""Candidate pairs for the cleaning sweep: vector neighbours combined with a lexical signal.

A bare cosine cut-off is not a duplicate detector: on short notes every note's nearest
neighbours sit high, and look-alikes about another subject score as high as true rewrites
(docs/decisions/0011-sweep-candidates.md). So the two signals are combined, in three steps:

1. **pool** = vector neighbours (top ``k`` per note; exact search below ``exact_below``
   notes, else IVF-style: seeded k-means lists, each query scanning its ``probes`` nearest
   lists) UNION MinHash-LSH collisions over each note's *uncommon* content stems (corpus
   stopwords - stems in over 5% of notes - removed) whose estimated Jaccard is >= 0.4;
2. **rank**: each pool pair scores a blend of cosine and estimated Jaccard (``rank_lexical``)
   and survives only if it is among the ``per_note`` best pairs of either note, which bounds the
   work for the judge at n * per_note pairs however crowded a neighbourhood is;
3. **check**: a survivor must share ``min_shared`` uncommon stems and reach
   (cosine + stem overlap) / 2 >= ``blend_floor``.

Pairs come out once each, ``(a < b)``, ordered by score desc then (a, b): a total order.
The numpy paths are vectorised; 100,000 notes take seconds, not minutes.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from vault_pipeline.text import jaccard, overlap

# --------------------------------------------------------------------------- settings


@dataclass(frozen=True)
class CandidateSettings:
    """Knobs of the candidate stage; defaults measured with benchmarks/bench_clean.py."""

    k: int = 8  # vector neighbours per note in the pool
    per_note: int = 4  # a pair survives if it is among the 4 best of either note: <= n * 4 pairs
    rank_lexical: float = 0.3  # weight of the estimated Jaccard in the per-note ranking (best of 0-1 measured)
    min_shared: int = 1  # ... and shares at least one uncommon content stem
    blend_floor: float = 0.45  # ... and (cosine + stem overlap) / 2 reaches this
    common_df: float = 0.05  # stems in more than 5% of notes (and > common_min) are corpus stopwords
    common_min: int = 50
    # 16 bands x 3 rows: P(collide) = 1-(1-J^3)^16 = 0.35 at J=0.3, 0.88 at J=0.5, 0.998 at J=0.7,
    # so a changed value ("X is May 3" / "X moved to May 10", J about 0.57) collides almost always.
    lsh_bands: int = 16
    lsh_rows: int = 3
    lsh_max_bucket: int = 64  # bigger buckets are boilerplate, not rewrites
    lsh_estimate: float = 0.4  # MinHash-estimated Jaccard a collision needs to enter the pool
    exact_below: int = 20_000  # exact neighbour search below this many notes
    probes: int = 8  # k-means lists each query scans (0.95 neighbour recall at 20k notes)
    seed: int = 0


@dataclass(frozen=True)
class Candidate:
    """One pair of notes (by row index, ``a < b``) with both signals."""

    a: int
    b: int
    cosine: float
    lexical: float  # Jaccard of uncommon content stems
    score: float  # (cosine + overlap) / 2: the per-note ranking and the plan's order
    via: str  # "vector" (a neighbour, maybe also an LSH hit) or "lexical" (an LSH hit only)


# --------------------------------------------------------------------------- vector neighbours


def neighbours(
    vectors: np.ndarray, k: int, settings: CandidateSettings = CandidateSettings()
) -> tuple[np.ndarray, np.ndarray]:
    """Top-``k`` neighbours of every row (self excluded): (indices int64, cosines float32), -1 padded."""
    vectors = np.ascontiguousarray(vectors, dtype=np.float32)
    n = len(vectors)
    k = max(0, min(k, n - 1))
    if n == 0 or k == 0:
        return np.full((n, k), -1, np.int64), np.zeros((n, k), np.float32)
    if n < settings.exact_below:
        return _search(vectors, np.arange(n), np.arange(n), k)
    return _partitioned(vectors, k, settings)


def _search(
    vectors: np.ndarray, queries: np.ndarray, pool: np.ndarray, k: int, block: int = 1024
) -> tuple[np.ndarray, np.ndarray]:
    """Exact top-k of ``queries`` within ``pool`` (row indices), in blocks to bound memory."""
    out_i = np.full((len(queries), k), -1, np.int64)
    out_s = np.zeros((len(queries), k), np.float32)
    kk = min(k, len(pool) - 1)
    if kk <= 0:
        return out_i, out_s
    base = vectors[pool]
    for start in range(0, len(queries), block):
        rows = queries[start : start + block]
        sims = vectors[rows] @ base.T
        at = np.searchsorted(pool, rows)  # pool is sorted; a query found in it is not its own neighbour
        mine = at < len(pool)
        mine[mine] = pool[at[mine]] == rows[mine]
        sims[np.flatnonzero(mine), at[mine]] = -np.inf
        top = np.argpartition(-sims, kk - 1, axis=1)[:, :kk]
        top_s = np.take_along_axis(sims, top, axis=1)
        # Total order: similarity desc, then pool index asc, so ties never flip between runs.
        order = np.lexsort((pool[top], -top_s), axis=1)
        out_i[start : start + len(rows), :kk] = pool[np.take_along_axis(top, order, axis=1)]
        out_s[start : start + len(rows), :kk] = np.take_along_axis(top_s, order, axis=1)
    out_i[~np.isfinite(out_s)] = -1
    return out_i, np.nan_to_num(out_s, neginf=0.0)


def _partitioned(vectors: np.ndarray, k: int, settings: CandidateSettings) -> tuple[np.ndarray, np.ndarray]:
    """IVF-style search: k-means lists; each query scans the lists of its ``probes`` nearest centroids."""
    centroids = _kmeans(vectors, int(np.sqrt(len(vectors))), settings.seed)
    probes = min(settings.probes, len(centroids))
    nearest = _nearest_centroids(vectors, centroids, probes)
    lists = _group(nearest[:, 0], len(centroids))  # each note lives in its nearest list
    asking = _group(nearest.ravel(), len(centroids), probes)  # the queries that probe each list
    parts_q, parts_i, parts_s = [], [], []
    for c in range(len(centroids)):
        queries, members = asking[c], lists[c]
        if len(queries) == 0 or len(members) == 0:
            continue
        idx, sims = _search(vectors, queries, members, k)
        parts_q.append(np.repeat(queries.astype(np.int32), idx.shape[1]))  # int32: n * probes * k entries
        parts_i.append(idx.ravel().astype(np.int32))
        parts_s.append(sims.ravel())
    queries, idx, sims = np.concatenate(parts_q), np.concatenate(parts_i), np.concatenate(parts_s)
    del parts_q, parts_i, parts_s
    return _top_k(queries, idx, sims, len(vectors), k)


def _top_k(queries: np.ndarray, idx: np.ndarray, sims: np.ndarray, n: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` best (similarity desc, index asc) of each query's partial results, in one sort."""
    valid = idx >= 0
    queries, idx, sims = queries[valid], idx[valid], sims[valid]
    order = _ranked(queries, sims, idx, n)
    queries, idx, sims = queries[order], idx[order], sims[order]
    rank = np.arange(len(queries)) - np.searchsorted(queries, queries, side="left")
    out_i = np.full((n, k), -1, np.int64)
    out_s = np.zeros((n, k), np.float32)
    take = rank < k
    out_i[queries[take], rank[take]] = idx[take]
    out_s[queries[take], rank[take]] = sims[take]
    return out_i, out_s


def _ranked(groups: np.ndarray, scores: np.ndarray, ties: np.ndarray, n: int) -> np.ndarray:
    """Order by group asc, score desc, tie asc: one int64 key sort when n < 2**20, else lexsort."""
    if n < 2**20:  # built in place: at 100,000 notes these arrays hold millions of entries
        key = np.clip(scores, -2.0, 2.0).astype(np.float64)
        np.subtract(2.0, key, out=key)
        np.multiply(key, 5e5, out=key)  # 1e-6 steps, < 2**21
        key = np.rint(key, out=key).astype(np.int64)
        key <<= 20
        key |= ties
        key |= groups.astype(np.int64) << 41
        return np.argsort(key, kind="stable")
    return np.lexsort((ties, -scores, groups))


def _nearest_centroids(vectors: np.ndarray, centroids: np.ndarray, probes: int, block: int = 8192) -> np.ndarray:
    """(n, probes) centroid indices per row, nearest first."""
    out = []
    for s in range(0, len(vectors), block):
        sims = vectors[s : s + block] @ centroids.T
        top = np.argpartition(-sims, probes - 1, axis=1)[:, :probes]
        order = np.argsort(-np.take_along_axis(sims, top, axis=1), axis=1, kind="stable")
        out.append(np.take_along_axis(top, order, axis=1))
    return np.concatenate(out)


def _group(labels: np.ndarray, groups: int, stride: int = 1) -> list[np.ndarray]:
    """Row indices per label, sorted (``stride`` > 1: labels is a raveled (n, stride) table)."""
    order = np.argsort(labels, kind="stable")
    bounds = np.searchsorted(labels[order], np.arange(groups + 1))
    rows = order // stride
    return [np.sort(rows[bounds[g] : bounds[g + 1]]) for g in range(groups)]


def _kmeans(vectors: np.ndarray, n_lists: int, seed: int, iters: int = 8, sample: int = 25_000) -> np.ndarray:
    """Spherical k-means on a seeded sample (deterministic; exactness is not needed, only buckets)."""
    rng = np.random.default_rng(seed)
    data = vectors[np.sort(rng.choice(len(vectors), min(sample, len(vectors)), replace=False))]
    centroids = data[np.sort(rng.choice(len(data), n_lists, replace=False))].copy()
    for _ in range(iters):
        assign = _assign(data, centroids)
        order = np.argsort(assign, kind="stable")
        counts = np.bincount(assign, minlength=n_lists)
        starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
        sums = centroids.copy()  # an empty list keeps its old centroid
        filled = counts > 0
        sums[filled] = np.add.reduceat(data[order], starts[filled], axis=0)
        centroids = sums / np.clip(np.linalg.norm(sums, axis=1, keepdims=True), 1e-12, None)
    return centroids.astype(np.float32)


def _assign(vectors: np.ndarray, centroids: np.ndarray, block: int = 8192) -> np.ndarray:
    return np.concatenate(
        [np.argmax(vectors[s : s + block] @ centroids.T, axis=1) for s in range(0, len(vectors), block)]
    )


# --------------------------------------------------------------------------- MinHash-LSH


def _hash64(token: str) -> int:
    # crc32 under two seeds gives a stable 64-bit token hash (Python's hash() is salted per process).
    data = token.encode()
    return (zlib.crc32(data) << 32) | zlib.crc32(data, 0x9E3779B9)


def minhash(stem_sets: Sequence[frozenset[str]], perms: int, seed: int = 0) -> np.ndarray:
    """(n, perms) uint64 MinHash signatures, vectorised over all (note, stem) pairs at once.

    One pass over every (note, stem) pair instead of a MinHash object per note (datasketch):
    about 1 s at 100,000 notes instead of 17.
    """
    lengths = np.fromiter((len(s) for s in stem_sets), np.int64, len(stem_sets))
    flat = np.fromiter((_hash64(t) for s in stem_sets for t in sorted(s)), np.uint64, int(lengths.sum()))
    rng = np.random.default_rng(seed)
    a = rng.integers(1, 2**61 - 1, perms, dtype=np.uint64) | np.uint64(1)
    b = rng.integers(0, 2**61 - 1, perms, dtype=np.uint64)
    out = np.full((len(stem_sets), perms), np.iinfo(np.uint64).max, np.uint64)
    nonempty = lengths > 0
    if not flat.size:
        return out
    starts = np.concatenate(([0], np.cumsum(lengths)[:-1]))[nonempty]
    for p in range(perms):  # multiply-add hashing wraps mod 2**64: a permutation of the token hashes
        out[nonempty, p] = np.minimum.reduceat(flat * a[p] + b[p], starts)
    return out


def lsh_pairs(signatures: np.ndarray, settings: CandidateSettings = CandidateSettings()) -> np.ndarray:
    """(m, 2) unique pairs ``i < j`` whose signatures collide in at least one band."""
    n = len(signatures)
    found = [np.zeros((0, 2), np.int64)]
    live = np.flatnonzero(signatures[:, 0] != np.iinfo(np.uint64).max)  # empty sets hash nowhere
    for band in range(settings.lsh_bands):
        cols = signatures[live, band * settings.lsh_rows : (band + 1) * settings.lsh_rows]
        keys = np.zeros(len(live), np.uint64)
        for col in range(cols.shape[1]):  # mix the band into one key; a rare clash is caught later
            keys = (keys ^ cols[:, col]) * np.uint64(0x9E3779B97F4A7C15)
        found.append(_bucket_pairs(live, keys, settings.lsh_max_bucket))
    return _unique_pairs(np.concatenate(found), n)


def _bucket_pairs(rows: np.ndarray, keys: np.ndarray, max_bucket: int) -> np.ndarray:
    """Every pair inside each bucket of 2..max_bucket equal keys, generated per bucket size."""
    order = np.argsort(keys, kind="stable")
    sorted_keys, sorted_rows = keys[order], rows[order]
    starts = np.flatnonzero(np.concatenate(([True], sorted_keys[1:] != sorted_keys[:-1])))
    sizes = np.diff(np.concatenate((starts, [len(keys)])))
    out = [np.zeros((0, 2), np.int64)]
    for size in np.unique(sizes[(sizes >= 2) & (sizes <= max_bucket)]):
        groups = sorted_rows[starts[sizes == size][:, None] + np.arange(size)]
        left, right = np.triu_indices(size, 1)
        out.append(np.stack((groups[:, left].ravel(), groups[:, right].ravel()), axis=1))
    return np.concatenate(out)


def _vector_pairs(idx: np.ndarray, sims: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Unique sorted pairs ``i < j`` from a neighbour table, with their cosines."""
    rows = np.repeat(np.arange(len(idx)), idx.shape[1])
    valid = idx.ravel() >= 0
    codes = _codes(np.stack((rows, idx.ravel()), axis=1)[valid], n)
    values = sims.ravel()[valid]
    order = np.argsort(codes, kind="stable")
    codes, values = codes[order], values[order]
    first = np.concatenate(([True], codes[1:] != codes[:-1])) if len(codes) else np.zeros(0, bool)
    codes, values = codes[first], values[first]
    return np.stack((codes // n, codes % n), axis=1), values.astype(np.float32)


def _codes(pairs: np.ndarray, n: int) -> np.ndarray:
    """One int64 per unordered pair, ``min * n + max``: sortable, comparable, cheap."""
    lo, hi = np.minimum(pairs[:, 0], pairs[:, 1]), np.maximum(pairs[:, 0], pairs[:, 1])
    return lo[lo != hi].astype(np.int64) * n + hi[lo != hi]


def _unique_pairs(pairs: np.ndarray, n: int) -> np.ndarray:
    """Pairs ``i < j``, each once, sorted (np.unique's hash path is ~30x slower than a sort here)."""
    codes = np.sort(_codes(pairs, n))
    codes = codes[np.concatenate(([True], codes[1:] != codes[:-1]))] if len(codes) else codes
    return np.stack((codes // n, codes % n), axis=1) if len(codes) else np.zeros((0, 2), np.int64)


def _member(pairs: np.ndarray, sorted_pairs: np.ndarray, n: int) -> np.ndarray:
    """Which ``pairs`` occur in ``sorted_pairs`` (both unique, ``i < j``, the latter sorted)."""
    codes, table = pairs[:, 0] * n + pairs[:, 1], sorted_pairs[:, 0] * n + sorted_pairs[:, 1]
    at = np.minimum(np.searchsorted(table, codes), max(len(table) - 1, 0))
    return table[at] == codes if len(table) else np.zeros(len(pairs), bool)


# --------------------------------------------------------------------------- combination


def candidate_pairs(
    stem_sets: Sequence[frozenset[str]], vectors: np.ndarray, settings: CandidateSettings = CandidateSettings()
) -> list[Candidate]:
    """Vector neighbours and LSH collisions, ranked per note, checked lexically; once each, ordered."""
    n = len(stem_sets)
    if n != len(vectors):
        raise ValueError(f"{n} stem sets but {len(vectors)} vectors")
    if n < 2:
        return []
    vectors = np.ascontiguousarray(vectors, dtype=np.float32)
    lexical = uncommon(stem_sets, settings)
    signatures = minhash(lexical, settings.lsh_bands * settings.lsh_rows, settings.seed)
    by_vector, vector_cosines = _vector_pairs(*neighbours(vectors, settings.k, settings), n)
    by_lsh = lsh_pairs(signatures, settings)
    by_lsh = by_lsh[(_agreement(signatures, by_lsh) >= settings.lsh_estimate) & ~_member(by_lsh, by_vector, n)]
    pool = np.concatenate((by_vector, by_lsh))
    cosines = np.concatenate((vector_cosines, _cosines(vectors, by_lsh)))
    rank_by = (1 - settings.rank_lexical) * cosines + settings.rank_lexical * _agreement(signatures, pool)
    keep = _best_per_note(pool, rank_by, n, settings.per_note)
    pool, cosines = pool[keep], cosines[keep]
    from_vectors = int(keep[: len(by_vector)].sum())  # the pool lists vector pairs first
    found = []
    for at, ((i, j), cosine) in enumerate(zip(pool.tolist(), cosines.tolist())):
        via = "vector" if at < from_vectors else "lexical"
        a, b = lexical[i], lexical[j]
        score = (cosine + overlap(a, b)) / 2
        if len(a & b) >= settings.min_shared and score >= settings.blend_floor:
            found.append(Candidate(i, j, round(cosine, 6), round(jaccard(a, b), 6), round(score, 6), via))
    return sorted(found, key=lambda c: (-c.score, c.a, c.b))


def uncommon(
    stem_sets: Sequence[frozenset[str]], settings: CandidateSettings = CandidateSettings()
) -> list[frozenset[str]]:
    """Stem sets without the corpus's own stopwords (stems in more than ``common_df`` of the notes).

    "agreed", "set", a template's verb: shared by thousands of notes, they make look-alikes
    look like rewrites. Small vaults keep everything (the limit never drops below ``common_min``).
    """
    counts: dict[str, int] = {}
    for stems in stem_sets:
        for s in stems:
            counts[s] = counts.get(s, 0) + 1
    limit = max(settings.common_df * len(stem_sets), settings.common_min)
    common = {s for s, c in counts.items() if c > limit}
    return [stems - common if common & stems else stems for stems in stem_sets]


def _agreement(signatures: np.ndarray, pairs: np.ndarray, block: int = 65_536) -> np.ndarray:
    """MinHash-estimated Jaccard of each pair: the share of equal signature slots."""
    out = np.zeros(len(pairs), np.float32)
    for s in range(0, len(pairs), block):
        p = pairs[s : s + block]
        out[s : s + block] = (signatures[p[:, 0]] == signatures[p[:, 1]]).mean(axis=1)
    return out


def _cosines(vectors: np.ndarray, pairs: np.ndarray, block: int = 16_384) -> np.ndarray:
    out = np.zeros(len(pairs), np.float32)
    for s in range(0, len(pairs), block):
        p = pairs[s : s + block]
        out[s : s + block] = np.einsum("ij,ij->i", vectors[p[:, 0]], vectors[p[:, 1]])
    return out


def _best_per_note(pairs: np.ndarray, scores: np.ndarray, n: int, per_note: int) -> np.ndarray:
    """Mask of pairs that are among the ``per_note`` best-scored pairs of either of their notes."""
    ends = np.concatenate((pairs[:, 0], pairs[:, 1]))
    others = np.concatenate((pairs[:, 1], pairs[:, 0]))
    order = _ranked(ends, np.concatenate((scores, scores)), others, n)  # per note: score desc, id asc
    sorted_ends = ends[order]
    rank = np.arange(len(order)) - np.searchsorted(sorted_ends, sorted_ends, side="left")
    keep = np.zeros(len(pairs), bool)
    keep[(order % max(len(pairs), 1))[rank < per_note]] = True
    return keep
