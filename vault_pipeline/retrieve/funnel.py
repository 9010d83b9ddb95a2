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
6. collapse exact duplicates into the highest-provenance copy;
7-8. the token-cap backstop and tiered budget assembly (``package.py``).
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from functools import cache
from typing import Any, Literal, Protocol

import numpy as np
from pydantic import BaseModel, Field, field_validator

from vault_pipeline.models.embed import Embedder, l2_normalise
from vault_pipeline.errors import ConfigError, ModelError
from vault_pipeline.retrieve.gate import GateOutcome, Skipped, gate_rows, survives
from vault_pipeline.models.llm import StructuredLLM, load_prompt
from vault_pipeline.vault.note import TIER_WEIGHTS
from vault_pipeline.retrieve.package import ContextPackage, assemble, build_package, selection

VariantKind = Literal["concept", "methodology", "continuity", "authority"]
KIND_ORDER = ("original", "concept", "methodology", "continuity", "authority")
LANE_ORDER = ("vector", "text")
RRF_K = 60  # the constant of Cormack et al.'s reciprocal rank fusion
MAX_VARIANTS = 4
CONVERSATIONAL_TIERS = frozenset({"chat"})  # the seed: recency decays only conversational tiers
SEARCH_WORKERS = 5  # one full-text search per query (the original and up to four variants)

# The similarity floor is a per-embedder calibration, not a constant. Seed 004's 0.40 was
# measured on another embedder; with all-MiniLM-L6-v2, short atomic notes that were relevant
# scored as low as 0.01-0.22 against an associative query, so its default is 0.20 (a noise
# backstop only; the fit-gate is the real defence). Unknown embedders get the same 0.20.
FLOOR_BY_EMBEDDER = {"minilm-l6-v2-int8": 0.20}
DEFAULT_FLOOR = 0.20


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


@dataclass(frozen=True)
class FunnelConfig:
    """Every knob of the funnel; the defaults are the offline MiniLM calibration."""

    variants: bool = True
    max_variants: int = MAX_VARIANTS
    wide: int = 15
    per_list: int | None = None  # hits per lane and query; None means ``wide``
    floor: float = DEFAULT_FLOOR
    gate: bool = True
    gate_batch: int = 10  # candidates per gate call (LlamaIndex's LLMRerank judges 10 per call)
    gate_timeout: float = 30.0  # seconds for the whole gate stage; late batches fail open
    gate_chars: int = 1200  # candidate text shown to the small gate model
    half_life_days: float = 30.0
    # Seed 001: recency is a small weight that breaks ties without overriding relevance;
    # a chat chunk's score can lose at most this share however old it is.
    recency_weight: float = 0.15
    budget: int = 2000
    window: int = 8000
    max_fraction: float = 0.78  # a quarter of the window stays free for the model's answer
    include_archived: bool = False

    def __post_init__(self) -> None:
        checks = [(0 <= self.max_variants <= MAX_VARIANTS, f"max_variants must be 0-{MAX_VARIANTS}"),
                  (self.wide >= 1, "wide must be at least 1"),
                  (self.gate_batch >= 1, "gate_batch must be at least 1"),
                  (self.gate_timeout > 0, "gate_timeout must be positive"),
                  (self.half_life_days > 0, "half_life_days must be positive"),
                  (0 <= self.recency_weight <= 1, "recency_weight must be within 0-1"),
                  (self.budget >= 1 and self.window >= 1, "budget and window must be positive"),
                  (0 < self.max_fraction <= 1, "max_fraction must be within (0, 1]")]
        for ok, message in checks:
            if not ok:
                raise ConfigError(f"funnel config: {message}")

    @classmethod
    def for_embedder(cls, embedder_name: str, **overrides: Any) -> FunnelConfig:
        """The config with the floor calibrated for ``embedder_name`` (overrides win)."""
        overrides.setdefault("floor", FLOOR_BY_EMBEDDER.get(embedder_name, DEFAULT_FLOOR))
        return cls(**overrides)

    @classmethod
    def from_settings(cls, settings: Any, **overrides: Any) -> FunnelConfig:
        """The config from ``config.Settings`` ([retrieval] in vault.toml); overrides win."""
        values = {"wide": settings.wide, "floor": settings.floor, "budget": settings.budget,
                  "window": settings.window, "variants": settings.variants, "gate": settings.gate_enabled}
        return cls(**{**values, **overrides})

    @property
    def k(self) -> int:
        """Hits requested per lane and query."""
        return self.per_list or self.wide


class Hit(Protocol):
    """The row shape the funnel reads (``index.Row`` satisfies it)."""

    chunk_id: str
    note_id: str
    path: str
    type: str
    tier: str
    created: str
    source_conversation: str
    source_messages: str
    heading: str
    text: str
    similarity: float
    lane: str


class Retriever(Protocol):
    """The two index lanes the funnel needs (``index.Index`` satisfies it).

    A retriever may also offer ``vector_search_many(vectors, k, *, include_archived)``,
    one list of hits per vector; the funnel then asks for every query vector at once.
    """

    def vector_search(self, vector: np.ndarray, k: int, *, include_archived: bool = False) -> Sequence[Hit]:
        """Nearest chunks to a query vector."""
        ...

    def text_search(self, query: str, k: int, *, include_archived: bool = False,
                    vector: np.ndarray | None = None) -> Sequence[Hit]:
        """Full-text matches; ``vector`` lets the index fill in each hit's cosine similarity."""
        ...


@dataclass(frozen=True)
class Candidate:
    """One fused candidate: its row, RRF score, who found it, and cosine to the original query."""

    row: Hit
    rrf: float
    lanes: tuple[str, ...]
    variants: tuple[str, ...]
    similarity: float

    @property
    def key(self) -> tuple[str, str]:
        """Identity used for tie-breaks: note id, then chunk id."""
        return (self.row.note_id, self.row.chunk_id)


@dataclass(frozen=True)
class Scored:
    """A gate survivor with its provenance score."""

    candidate: Candidate
    score: float
    recency: float


@dataclass
class FunnelRun:
    """Everything the funnel decided, handed to ``package.build_package`` for stats and trace."""

    query: str
    intent: str
    intent_source: str
    queries: list[tuple[str, str]]
    fused: list[Candidate]  # every fused candidate; the first ``config.wide`` went on
    floor_passed: set[str]
    outcomes: dict[str, GateOutcome]
    ranked: list[Scored]
    collapsed: dict[str, str]
    reference: datetime | None
    plan_error: str | None
    models: dict[str, str]
    config: FunnelConfig


# --------------------------------------------------------------------------- public entry


def run_query(query: str, *, retriever: Retriever, embedder: Embedder, llm_plan: StructuredLLM,
              llm_gate: StructuredLLM, config: FunnelConfig | None = None, intent: str | None = None,
              reference_date: str | datetime | None = None) -> ContextPackage:
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
    candidates = _with_original_similarity(fused[:config.wide], qvec, embedder)
    fused = candidates + fused[config.wide:]
    passed = {c.row.chunk_id for c in candidates if c.similarity >= config.floor}
    outcomes = _gate(candidates, passed, llm_gate, the_intent, query, config)
    reference = _reference(candidates, reference_date)
    survivors = [c for c in candidates if c.row.chunk_id in passed and survives(outcomes[c.row.chunk_id])]
    ranked, collapsed = dedup(rank(survivors, reference, config))
    run = FunnelRun(query, the_intent, source, queries, fused, passed, outcomes, ranked,
                    collapsed, reference, plan_error,
                    {"plan": llm_plan.model, "gate": llm_gate.model, "embedder": embedder.name}, config)
    assembly = assemble(selection(ranked), budget=config.budget, window=config.window,
                        max_fraction=config.max_fraction)
    return build_package(run, assembly)


# --------------------------------------------------------------------------- 1. decomposition


def _plan(query: str, intent: str | None, llm: StructuredLLM,
          config: FunnelConfig) -> tuple[QueryPlan | None, str | None]:
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


def _retrieve(queries: list[tuple[str, str]], retriever: Retriever, embedder: Embedder,
              config: FunnelConfig) -> tuple[list[Candidate], np.ndarray]:
    """Both lanes of every query, fused; also returns the original query's vector.

    The full-text searches need no vector, so they start first, on the search threads, and run
    while this thread embeds the queries and runs the vector lane (one table query for every
    query vector when the retriever offers ``vector_search_many``). Their hits' cosines to the
    original query are filled in afterwards, for the candidates that go on.
    """
    pool = _search_pool()
    texts = [pool.submit(retriever.text_search, text, config.k, include_archived=config.include_archived)
             for _, text in queries]
    vectors = l2_normalise(embedder.embed([text for _, text in queries]))
    many = getattr(retriever, "vector_search_many", None)
    if many is not None:
        nearest = many(vectors, config.k, include_archived=config.include_archived)
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
    out = [Candidate(rows[c], rrf[c], _ordered(lanes[c], LANE_ORDER), _ordered(kinds[c], KIND_ORDER),
                     original.get(c, math.nan)) for c in rows]
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
        stored = getattr(c.row, "vector", None)
        if not math.isnan(c.similarity):
            continue
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


def _gate(candidates: list[Candidate], passed: set[str], llm: StructuredLLM, intent: str, query: str,
          config: FunnelConfig) -> dict[str, GateOutcome]:
    """Gate outcome per chunk id; floor-dropped candidates and a disabled gate are ``Skipped``."""
    outcomes: dict[str, GateOutcome] = {}
    for c in candidates:
        if c.row.chunk_id not in passed:
            outcomes[c.row.chunk_id] = Skipped(f"similarity {c.similarity:.3f} below floor {config.floor:.2f}")
        elif not config.gate:
            outcomes[c.row.chunk_id] = Skipped("gate disabled")
    judged = [(c.row.chunk_id, c.row.path, c.row.heading or "", c.row.text)
              for c in candidates if c.row.chunk_id in passed]
    if config.gate and judged:
        outcomes.update(gate_rows(judged, llm=llm, intent=intent, query=query, batch_size=config.gate_batch,
                                  timeout=config.gate_timeout, text_chars=config.gate_chars))
    return outcomes


# --------------------------------------------------------------------------- 5. provenance rank


def parse_created(value: str) -> datetime | None:
    """An ISO date or datetime as an aware UTC datetime; None when absent or unreadable."""
    try:
        stamp = datetime.fromisoformat(str(value).strip().replace("Z", "+00:00"))
    except ValueError:
        return None
    return stamp if stamp.tzinfo else stamp.replace(tzinfo=timezone.utc)


def _reference(candidates: list[Candidate], given: str | datetime | None) -> datetime | None:
    """Recency's "now": the caller's date, else the newest ``created`` among the candidates (never the clock)."""
    if isinstance(given, datetime):
        return given if given.tzinfo else given.replace(tzinfo=timezone.utc)
    if given:
        stamp = parse_created(given)
        if stamp is None:
            raise ConfigError(f"reference date {given!r} is not an ISO date")
        return stamp
    stamps = [s for s in (parse_created(c.row.created) for c in candidates if c.row.created) if s]
    return max(stamps) if stamps else None


def recency(tier: str, created: str, reference: datetime | None, config: FunnelConfig) -> float:
    """1.0 for non-conversational tiers; a bounded exponential half-life decay for chat."""
    if tier not in CONVERSATIONAL_TIERS or reference is None:
        return 1.0
    stamp = parse_created(created)
    if stamp is None:
        return 1.0
    age_days = max(0.0, (reference - stamp).total_seconds() / 86400.0)
    decay = 0.5 ** (age_days / config.half_life_days)
    return (1.0 - config.recency_weight) + config.recency_weight * decay


def rank(survivors: Sequence[Candidate], reference: datetime | None, config: FunnelConfig) -> list[Scored]:
    """Gate-first provenance rank: similarity x tier weight x recency; score desc, then id asc."""
    scored = []
    for c in survivors:
        rec = recency(c.row.tier, c.row.created, reference, config)
        scored.append(Scored(c, c.similarity * TIER_WEIGHTS.get(c.row.tier, 0.0) * rec, rec))
    return sorted(scored, key=lambda s: (-round(s.score, 9), *s.candidate.key))


# --------------------------------------------------------------------------- 6. dedup


def normalise_text(text: str) -> str:
    """Duplicate identity: NFKC, case-folded, whitespace collapsed, outer punctuation trimmed."""
    text = unicodedata.normalize("NFKC", text).casefold()
    return re.sub(r"\s+", " ", text).strip().strip(".!?;:,")


def dedup(ranked: list[Scored]) -> tuple[list[Scored], dict[str, str]]:
    """Collapse exact duplicates into the highest-provenance copy; returns (kept, loser -> winner chunk id)."""
    groups: dict[str, list[tuple[int, Scored]]] = {}
    for position, s in enumerate(ranked):
        groups.setdefault(normalise_text(s.candidate.row.text), []).append((position, s))
    collapsed: dict[str, str] = {}
    for group in groups.values():
        # Provenance first (tier weight), then the rank order the list already has.
        _, winner = min(group, key=lambda p: (-TIER_WEIGHTS.get(p[1].candidate.row.tier, 0.0), p[0]))
        for _, s in group:
            if s is not winner:
                collapsed[s.candidate.row.chunk_id] = winner.candidate.row.chunk_id
    return [s for s in ranked if s.candidate.row.chunk_id not in collapsed], collapsed
