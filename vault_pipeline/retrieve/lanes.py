"""Funnel stage 2, retrieve: both lanes of every query, fused; and the prompt's words no note holds.

The vector and full-text lanes of every searched query run at once: the index starts the
full-text searches, the funnel embeds every query (the floor and the offline gate read the
unsearched ones' vectors too), the index runs the vector lane and reads the rows of both. The
lists are fused by reciprocal rank fusion, one candidate per chunk; a transcript message's own
chunk comes back as that turn (``expand.as_turn``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import replace
from functools import cache
from typing import Any

import numpy as np

from vault_pipeline.models.embed import l2_normalise
from vault_pipeline.models.workers import DaemonPool
from vault_pipeline.retrieve.evidence import content_words
from vault_pipeline.retrieve.expand import as_turn
from vault_pipeline.retrieve.gate import reads_signals
from vault_pipeline.retrieve.state import FunnelState, Tools
from vault_pipeline.retrieve.types import Candidate, FunnelConfig, Hit, Retriever

KIND_ORDER = ("original", "concept", "methodology", "continuity", "authority")
LANE_ORDER = ("vector", "text")
RRF_K = 60  # the constant of Cormack et al.'s reciprocal rank fusion


def retrieve(state: FunnelState) -> FunnelState:
    """Fuse both lanes of the planned queries; keep every query's vector for the floor and the gate."""
    texts = [text for _, text in state.queries]
    # The offline gate reads the intent's vector too: it is embedded in the same call as the queries.
    signals = state.config.gate_enabled and reads_signals(state.tools.llm_gate)
    extra = [state.intent] if signals and state.intent not in texts else []
    state.fused, vectors = search_lanes(state.queries, state.tools, state.config, state.unsearched, extra)
    state.query_vectors = dict(zip(texts + extra, vectors))
    return state


def search_lanes(
    queries: list[tuple[str, str]],
    tools: Tools,
    config: FunnelConfig,
    unsearched: AbstractSet[str] = frozenset(),
    extra: Sequence[str] = (),
) -> tuple[list[Candidate], np.ndarray]:
    """Both lanes of every query but the ``unsearched`` ones, fused; also every query's unit vector
    (the original first), then those of the ``extra`` texts, embedded in the same call, never searched."""
    words = [text for _, text in queries] + list(extra)
    runs = [text not in unsearched for _, text in queries] + [False] * len(extra)
    pending = tools.retriever.start_search(
        [w for w, run in zip(words, runs) if run], config.k, include_archived=config.include_archived
    )
    try:  # the full-text searches run while the queries are embedded
        vectors = l2_normalise(tools.embedder.embed(words))
    except BaseException:
        pending.cancel()
        raise
    nearest, found = pending.finish(vectors[runs])
    lists: list[tuple[str, str, Sequence[Hit]]] = []
    for (kind, _), hits, text in zip([q for q, run in zip(queries, runs) if run], nearest, found):
        lists += [(kind, "vector", list(hits)), (kind, "text", list(text))]
    return [replace(c, row=as_turn(c.row)) for c in fuse(lists)], vectors


def fuse(lists: Sequence[tuple[str, str, Sequence[Hit]]], k: int = RRF_K) -> list[Candidate]:
    """Reciprocal rank fusion over (kind, lane, hits) lists; one candidate per chunk id."""
    rows: dict[str, Hit] = {}
    rrf: dict[str, float] = {}
    lanes: dict[str, set[str]] = {}
    kinds: dict[str, set[str]] = {}
    original: dict[str, float] = {}
    for kind, lane, hits in lists:
        for position, hit in _first_of_each(hits):
            cid = hit.chunk_id
            rows.setdefault(cid, hit)
            rrf[cid] = rrf.get(cid, 0.0) + 1.0 / (k + position)
            lanes.setdefault(cid, set()).add(lane)
            kinds.setdefault(cid, set()).add(kind)
            if kind == "original" and cid not in original and _finite(hit.similarity):
                original[cid] = float(hit.similarity)
    out = [
        Candidate(
            rows[c], rrf[c], _ordered(lanes[c], LANE_ORDER), _ordered(kinds[c], KIND_ORDER), original.get(c, math.nan)
        )
        for c in rows
    ]
    return sorted(out, key=lambda c: (-round(c.rrf, 12), c.row.chunk_id))


def _first_of_each(hits: Sequence[Hit]) -> list[tuple[int, Hit]]:
    """(1-based position, hit) of each chunk's first hit in one list."""
    seen: set[str] = set()
    out = []
    for position, hit in enumerate(hits, 1):
        if hit.chunk_id not in seen:
            seen.add(hit.chunk_id)
            out.append((position, hit))
    return out


def _finite(value: Any) -> bool:
    try:
        return math.isfinite(float(value))
    except (TypeError, ValueError):
        return False


def _ordered(values: set[str], order: Sequence[str]) -> tuple[str, ...]:
    return tuple(sorted(values, key=lambda v: (order.index(v) if v in order else len(order), v)))


# --------------------------------------------------------------------------- words no note holds

LOOKUP_WORKERS = 4  # full-text lookups of absent words at once


@cache
def lookup_pool() -> DaemonPool:
    """The threads the funnel's own index lookups run on beside its walk, started once per process."""
    return DaemonPool(LOOKUP_WORKERS, name="vault-lookup")


def find_absent(state: FunnelState) -> FunnelState:
    """Start naming the prompt's content words that no note in the vault holds (``absent_words``):
    their lookups run on threads while the walk goes on, and the first reader of
    ``state.absent_words`` (the found judgement, else the assembly) waits for them."""
    state.absent_words = start_absent_words(state.query, state.fused, state.tools.retriever)
    return state


def absent_words(query: str, fused: Sequence[Candidate], retriever: Retriever) -> list[str]:
    """The prompt's content words that no note in the vault holds, in the prompt's order.

    A word found in a retrieved candidate's text (case-folded; inside a longer word counts) is
    known; each of the rest costs one full-text lookup, so a prompt whose words all came back in
    its candidates costs nothing. A package for such a prompt is the nearest the vault has, not
    notes about that word, and says so (``benchmarks/bench_absent.py``).
    """
    return start_absent_words(query, fused, retriever)()


def start_absent_words(query: str, fused: Sequence[Candidate], retriever: Retriever) -> Callable[[], list[str]]:
    """``absent_words``, started: the words' lookups (one each, independent) run at once on the
    lookup threads; the function returned waits for them and gives the words in the prompt's order."""
    words = content_words(query)
    texts = [c.row.text.casefold() for c in fused]
    missing = [w for w in words if not any(w in text for text in texts)]
    if not missing:
        return lambda: []
    pool = lookup_pool()
    lookups = [pool.submit(retriever.unknown_words, [word]) for word in missing]
    return lambda: [word for lookup in lookups for word in lookup.result()]
