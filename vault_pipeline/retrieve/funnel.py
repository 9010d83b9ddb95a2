"""The retrieval funnel (seed 004, "The retrieval side"): a query in, a ContextPackage out.

Steps, in the seed's order, each configurable in ``FunnelConfig`` and visible in
the package trace:

1. decompose the prompt into up to four variants (concept, methodology,
   continuity, authority); the original always runs too; every query's vector and
   full-text lanes run (the full-text searches concurrently) and are fused by
   reciprocal rank fusion;
2. keep the ``wide`` best fused candidates;
3. drop those below a cosine floor against the ORIGINAL query (a noise backstop);
4. the fit-gate (``gate.py``) keeps or drops each survivor against the intent;
5. rank the survivors, gate first: similarity x tier weight x recency;
6. collapse exact duplicates into the highest-provenance copy (steps 5-6: ``rank.py``);
7-8. the token-cap backstop and tiered budget assembly (``package.py``).

The funnel's types are in ``types.py``; ``trace.py`` writes its stats and per-candidate trace.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import datetime
from functools import cache
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, Field, field_validator

from vault_pipeline.errors import ConfigError, ModelError
from vault_pipeline.models.embed import Embedder, l2_normalise
from vault_pipeline.models.prompts import load_prompt
from vault_pipeline.models.protocol import StructuredLLM
from vault_pipeline.retrieve.gate import GateOutcome, Skipped, gate_rows, survives
from vault_pipeline.retrieve.package import ContextPackage, assemble
from vault_pipeline.retrieve.rank import dedup, rank, reference_time, selection
from vault_pipeline.retrieve.trace import build_package
from vault_pipeline.retrieve.types import (
    MAX_VARIANTS,
    Candidate,
    FunnelConfig,
    FunnelRun,
    Hit,
    MultiVectorRetriever,
    Retriever,
    StoredVector,
)

VariantKind = Literal["concept", "methodology", "continuity", "authority"]
KIND_ORDER = ("original", "concept", "methodology", "continuity", "authority")
LANE_ORDER = ("vector", "text")
RRF_K = 60  # the constant of Cormack et al.'s reciprocal rank fusion
SEARCH_WORKERS = 5  # one full-text search per query (the original and up to four variants)


class Variant(BaseModel):
    """One targeted rewrite of the prompt, aimed at one neighbourhood of the vault."""

    kind: VariantKind
    text: str

    @field_validator("text")
    @classmethod
    def _non_empty(cls, value: str) -> str:
        value = " ".join(value.split())
        if not value:
            raise ValueError("a variant needs non-empty text")
        return value


class QueryPlan(BaseModel):
    """The decomposition: the prompt's subject domain (intent) and up to four variants."""

    intent: str
    variants: list[Variant] = Field(default_factory=list, max_length=MAX_VARIANTS)

    @field_validator("intent")
    @classmethod
    def _intent(cls, value: str) -> str:
        value = " ".join(value.split())
        if not value:
            raise ValueError("the intent (subject domain) must not be empty")
        return value


# --------------------------------------------------------------------------- public entry


def run_query(
    query: str,
    *,
    retriever: Retriever,
    embedder: Embedder,
    llm_plan: StructuredLLM,
    llm_gate: StructuredLLM,
    config: FunnelConfig | None = None,
    intent: str | None = None,
    reference_date: str | datetime | None = None,
) -> ContextPackage:
    """Run the whole funnel for ``query`` and return the cited, budgeted context package."""
    config = config or FunnelConfig()
    query = " ".join(query.split())
    if not query:
        raise ConfigError("empty query")
    user_intent = " ".join((intent or "").split()) or None
    plan, plan_error = _plan(query, user_intent, llm_plan, config)
    the_intent, source = _intent(query, user_intent, plan)
    queries = _queries(query, plan, config)
    fused, qvec = _retrieve(queries, retriever, embedder, config)
    # Step 2, retrieve wider: only the ``wide`` best fused candidates go on (the rest are traced).
    candidates = _with_original_similarity(fused[: config.wide], qvec, embedder)
    fused = candidates + fused[config.wide :]
    passed = {c.row.chunk_id for c in candidates if c.similarity >= config.floor}
    outcomes = _gate(candidates, passed, llm_gate, the_intent, query, config)
    reference = reference_time(candidates, reference_date)
    survivors = [c for c in candidates if c.row.chunk_id in passed and survives(outcomes[c.row.chunk_id])]
    ranked, collapsed = dedup(rank(survivors, reference, config))
    run = FunnelRun(
        query,
        the_intent,
        source,
        queries,
        fused,
        passed,
        outcomes,
        ranked,
        collapsed,
        reference,
        plan_error,
        {"plan": llm_plan.model, "gate": llm_gate.model, "embedder": embedder.name},
        config,
    )
    assembly = assemble(selection(ranked), budget=config.budget, window=config.window, max_fraction=config.max_fraction)
    return build_package(run, assembly)


# --------------------------------------------------------------------------- 1. decomposition


def _plan(
    query: str, intent: str | None, llm: StructuredLLM, config: FunnelConfig
) -> tuple[QueryPlan | None, str | None]:
    """One ``decompose`` call, needed for the variants or for an intent the user did not give."""
    if not (config.variants and config.max_variants > 0) and (intent or not config.gate):
        return None, None
    try:
        plan = llm.call(load_prompt("decompose"), {"query": query, "intent": intent or ""}, QueryPlan)
    except ModelError as exc:  # retrieval still runs on the original query alone
        return None, f"{exc.model}: {exc.reason}"
    return plan, None


def _intent(query: str, user_intent: str | None, plan: QueryPlan | None) -> tuple[str, str]:
    if user_intent:
        return user_intent, "user"
    if plan is not None:
        return plan.intent, "plan"
    return query, "query"


def _queries(query: str, plan: QueryPlan | None, config: FunnelConfig) -> list[tuple[str, str]]:
    """(kind, text) per query to run: the original first, then distinct variants."""
    queries = [("original", query)]
    if plan is None or not config.variants:
        return queries
    seen = {query.casefold()}
    for variant in plan.variants:
        if len(queries) > config.max_variants or variant.text.casefold() in seen:
            continue
        seen.add(variant.text.casefold())
        queries.append((variant.kind, variant.text))
    return queries


def _retrieve(
    queries: list[tuple[str, str]], retriever: Retriever, embedder: Embedder, config: FunnelConfig
) -> tuple[list[Candidate], np.ndarray]:
    """Both lanes of every query, fused; also returns the original query's vector.

    The full-text searches need no vector, so they start first, on the search threads, and run
    while this thread embeds the queries and runs the vector lane (one table query for every
    query vector when the retriever offers ``vector_search_many``). Their hits' cosines to the
    original query are filled in afterwards, for the candidates that go on.
    """
    pool = _search_pool()
    texts = [
        pool.submit(retriever.text_search, text, config.k, include_archived=config.include_archived)
        for _, text in queries
    ]
    vectors = l2_normalise(embedder.embed([text for _, text in queries]))
    if isinstance(retriever, MultiVectorRetriever):
        nearest = retriever.vector_search_many(vectors, config.k, include_archived=config.include_archived)
    else:
        nearest = [retriever.vector_search(v, config.k, include_archived=config.include_archived) for v in vectors]
    lists = []
    for (kind, _), hits, text in zip(queries, nearest, texts):
        lists += [(kind, "vector", list(hits)), (kind, "text", list(text.result()))]
    return fuse(lists), vectors[0]


@cache
def _search_pool() -> ThreadPoolExecutor:
    """The search threads, started once per process (a new pool per query cost more than a search)."""
    return ThreadPoolExecutor(max_workers=SEARCH_WORKERS, thread_name_prefix="vault-search")


def fuse(lists: Sequence[tuple[str, str, Sequence[Hit]]], k: int = RRF_K) -> list[Candidate]:
    """Reciprocal rank fusion over (kind, lane, hits) lists; one candidate per chunk id."""
    rows: dict[str, Hit] = {}
    rrf: dict[str, float] = {}
    lanes: dict[str, set[str]] = {}
    kinds: dict[str, set[str]] = {}
    original: dict[str, float] = {}
    for kind, lane, hits in lists:
        seen: set[str] = set()
        for position, hit in enumerate(hits, 1):
            cid = hit.chunk_id
            if cid in seen:
                continue
            seen.add(cid)
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


def _finite(value: Any) -> bool:
    try:
        return math.isfinite(float(value))
    except (TypeError, ValueError):
        return False


def _ordered(values: set[str], order: Sequence[str]) -> tuple[str, ...]:
    return tuple(sorted(values, key=lambda v: (order.index(v) if v in order else len(order), v)))


def _with_original_similarity(cands: list[Candidate], qvec: np.ndarray, embedder: Embedder) -> list[Candidate]:
    """Candidates found only by full text or by a variant have no cosine to the original query yet."""
    out = list(cands)
    missing = []
    for i, c in enumerate(cands):
        if not math.isnan(c.similarity):
            continue
        stored = c.row.vector if isinstance(c.row, StoredVector) else None
        if stored is not None:  # the stored (unit) vector gives the cosine without embedding again,
            # in float64 like the index's own vector lane, so both lanes report the same number.
            out[i] = replace(c, similarity=float(np.asarray(stored, np.float64) @ qvec.astype(np.float64)))
        else:
            missing.append(i)
    if missing:
        # The index embeds exactly ``row.text``, so this is the cosine its vector lane would report.
        vecs = l2_normalise(embedder.embed([cands[i].row.text for i in missing]))
        for i, vec in zip(missing, vecs):
            out[i] = replace(out[i], similarity=float(np.dot(vec, qvec)))
    return out


# --------------------------------------------------------------------------- 4. the gate


def _gate(
    candidates: list[Candidate], passed: set[str], llm: StructuredLLM, intent: str, query: str, config: FunnelConfig
) -> dict[str, GateOutcome]:
    """Gate outcome per chunk id; floor-dropped candidates and a disabled gate are ``Skipped``."""
    outcomes: dict[str, GateOutcome] = {}
    for c in candidates:
        if c.row.chunk_id not in passed:
            outcomes[c.row.chunk_id] = Skipped(f"similarity {c.similarity:.3f} below floor {config.floor:.2f}")
        elif not config.gate:
            outcomes[c.row.chunk_id] = Skipped("gate disabled")
    judged = [
        (c.row.chunk_id, c.row.path, c.row.heading or "", c.row.text) for c in candidates if c.row.chunk_id in passed
    ]
    if config.gate and judged:
        outcomes.update(
            gate_rows(
                judged,
                llm=llm,
                intent=intent,
                query=query,
                batch_size=config.gate_batch,
                timeout=config.gate_timeout,
                text_chars=config.gate_chars,
            )
        )
    return outcomes
