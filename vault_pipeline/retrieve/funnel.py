"""The retrieval funnel (seed 004, "The retrieval side"): a query in, a ContextPackage out.

Steps, in the seed's order, each configurable in ``FunnelConfig`` and visible in
the package trace:

1. decompose the prompt into up to four variants (concept, methodology,
   continuity, authority); the original always runs too; the vector and full-text
   lanes of every query that is not a frame around an earlier one (``searched``) run
   (the full-text searches concurrently) and are fused by reciprocal rank fusion;
2. depth by budget: the fused candidates go on in widening steps (``wide``, then doubling)
   until the survivors of steps 3-4 carry the budget, the next ones all fall below the floor,
   the fused list runs out, or ``max_wide`` is reached (``_deepen``; the trace says which);
3. drop those below a cosine floor against the ORIGINAL query (a noise backstop);
4. the fit-gate (``gate.py``) keeps or drops each survivor against the intent;
   then associative recall (``expand.py``): pseudo-relevance feedback when few survive, and one
   hop from the strongest survivors (neighbouring turns, the next turn after a survivor that asks
   a question, hub members, the clean's ``related`` links, verbatim turns), through the same
   floor and gate; then whole turns in place of
   several notes of one turn when the turn costs no more (``_consolidate``);
5. rank the survivors, gate first: similarity x tier weight x recency;
6. collapse exact duplicates into the highest-provenance copy (steps 5-6: ``rank.py``);
7-8. the token-cap backstop and tiered budget assembly (``package.py``).

The funnel's types are in ``types.py``; ``trace.py`` writes its stats and per-candidate trace.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from collections.abc import Set as AbstractSet
from concurrent.futures import ThreadPoolExecutor
from dataclasses import is_dataclass, replace
from datetime import datetime
from functools import cache
from itertools import islice
from pathlib import PurePosixPath
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, Field, field_validator

from vault_pipeline.errors import ConfigError, ModelError
from vault_pipeline.models.embed import Embedder, l2_normalise
from vault_pipeline.models.prompts import load_prompt
from vault_pipeline.models.protocol import StructuredLLM
from vault_pipeline.retrieve.blocks import cited_messages, parse_atomic
from vault_pipeline.retrieve.expand import as_turn, asks, feedback_terms, neighbours, turn_excerpts, turn_rows
from vault_pipeline.retrieve.gate import Drop, GateOutcome, Keep, Skipped, gate_rows, reads_signals, survives
from vault_pipeline.retrieve.package import STRUCTURAL_TYPES, ContextPackage, assemble, first_level, pick_parts
from vault_pipeline.retrieve.rank import (
    block_content,
    covered,
    dedup,
    duplicate_key,
    rank,
    reference_time,
    selection,
    transcript_content,
)
from vault_pipeline.retrieve.signals import chat_of
from vault_pipeline.retrieve.trace import build_package
from vault_pipeline.retrieve.types import (
    MAX_VARIANTS,
    Candidate,
    ConversationReader,
    FunnelConfig,
    FunnelRun,
    Hit,
    HybridRetriever,
    RelatedRetriever,
    Retriever,
    SessionRetriever,
    SupersededLookup,
    WordLookup,
)
from vault_pipeline.text import (
    QUERY_STOPWORDS,
    STOPWORDS,
    content_stems,
    estimate_tokens,
    prompt_stopwords,
    query_runs,
    tokens,
    wikilinks,
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
    unsearched = {text for (_, text), run in zip(queries, searched([t for _, t in queries])) if not run}
    # The offline gate reads the intent's vector too: it is embedded in the same call as the queries.
    signals = config.gate and reads_signals(llm_gate)
    extra = [the_intent] if signals and the_intent not in {text for _, text in queries} else []
    fused, vectors = _retrieve(queries, retriever, embedder, config, unsearched, extra)
    absent = absent_words(query, fused, retriever)
    walk = _Walk(vectors[0], embedder, llm_gate, the_intent, query, config)
    walk.queries = list(queries)
    walk.query_vectors = dict(zip([text for _, text in queries] + extra, vectors))
    # Steps 2-4, retrieve wider by budget: widen until the survivors fill it (``_deepen``).
    depth = _deepen(walk, fused, config)
    # Associative recall: feedback terms for a prompt whose words found little, then one hop.
    expansion = _associate(walk, fused, query, retriever, embedder, config)
    if config.adaptive and config.whole_turns and isinstance(retriever, SessionRetriever):
        expansion.update(_consolidate(walk, retriever))
    if isinstance(retriever, SupersededLookup):
        expansion.update(_superseded(walk, retriever))
    went_on = {c.row.chunk_id for c in walk.considered}
    reference = reference_time(walk.considered, reference_date)
    # A topic hub is a list of links: its members went on in the one hop; it is no block itself.
    blocks = [c for c in walk.survivors() if c.row.type != "topic"] if config.adaptive else walk.survivors()
    ranked, collapsed = covered(*dedup(rank(blocks, reference, config)))
    run = FunnelRun(
        query,
        the_intent,
        source,
        queries + [("feedback", text) for text in expansion.get("feedback_query", [])],
        walk.considered + [c for c in fused if c.row.chunk_id not in went_on],
        went_on,
        walk.passed,
        walk.outcomes,
        ranked,
        collapsed,
        reference,
        plan_error,
        {"plan": llm_plan.model, "gate": llm_gate.model, "embedder": embedder.name},
        config,
        depth,
        expansion,
        walk.expanded_from,
        unsearched,
        absent,
    )
    assembly = assemble(
        selection(ranked, query), budget=config.budget, window=config.window, max_fraction=config.max_fraction
    )
    return build_package(run, assembly)


# --------------------------------------------------------------------------- 2-4. depth by budget


class _Walk:
    """The candidates that went on, and what the floor and the gate made of them."""

    def __init__(
        self, qvec: np.ndarray, embedder: Embedder, llm: StructuredLLM, intent: str, query: str, config: FunnelConfig
    ):
        self.qvec, self.embedder, self.llm, self.intent, self.query, self.config = (
            qvec,
            embedder,
            llm,
            intent,
            query,
            config,
        )
        self.queries: list[tuple[str, str]] = []  # (kind, text) of every query run
        self.query_vectors: dict[str, np.ndarray] = {}  # text -> unit vector, for the gate's signals
        self.considered: list[Candidate] = []
        self.passed: set[str] = set()
        self.outcomes: dict[str, GateOutcome] = {}
        self.expanded_from: dict[str, str] = {}
        self._blocks: dict[str, tuple[str, str]] = {}  # chunk id -> (exact key, block text): one rendering each
        self._rows: dict[str, list[Hit]] = {}  # conversation -> its chunks, read once per walk
        self._links: dict[tuple[str, str], str] = {}  # (conversation, message) -> superseded by
        self._linked: set[str] = set()  # the conversations whose superseded messages are in ``_links``

    def has_read(self, conversation: str) -> bool:
        """Whether this walk already read ``conversation``'s chunks."""
        return conversation in self._rows

    def conversation_rows(self, retriever: SessionRetriever, conversations: set[str]) -> list[Hit]:
        """Every chunk of ``conversations`` (one index lookup for those not read yet in this walk)."""
        missing = sorted(c for c in conversations if c not in self._rows)
        if missing:
            for c in missing:
                self._rows[c] = []
            archived = self.config.include_archived
            if isinstance(retriever, ConversationReader):  # the superseded messages come with the rows
                rows, links = retriever.conversation_read(missing, include_archived=archived)
                self._links.update(links)
                self._linked.update(missing)
            else:
                rows = retriever.conversation_rows(missing, include_archived=archived)
            for row in rows:
                self._rows.setdefault(row.source_conversation, []).append(row)
        return sorted((r for c in sorted(conversations) for r in self._rows[c]), key=lambda r: r.chunk_id)

    def superseded_messages(self, retriever: SupersededLookup, conversations: set[str]) -> dict[tuple[str, str], str]:
        """(conversation, message) -> superseded by, for ``conversations`` and any read before: one
        lookup for those whose rows this walk did not read."""
        missing = sorted(c for c in conversations if c not in self._linked)
        if missing:
            self._links.update(retriever.superseded_messages(missing))
            self._linked.update(missing)
        return self._links

    def judge(self, cands: list[Candidate]) -> int:
        """Floor and gate ``cands`` (their cosine to the original query filled in); returns how many passed the floor."""
        cands = _with_original_similarity(cands, self.qvec, self.embedder)
        passed = {c.row.chunk_id for c in cands if c.similarity >= self.config.floor}
        self.passed |= passed
        self.outcomes.update(_gate(cands, passed, self))
        self.considered += cands
        return len(passed)

    def admit(self, cands: list[tuple[Candidate, str]]) -> None:
        """Let ``cands`` in as judged already (each with the reason): a whole turn whose notes passed."""
        for c, reason in cands:
            self.passed.add(c.row.chunk_id)
            self.outcomes[c.row.chunk_id] = Keep(reason)
            self.considered.append(c)

    def survivors(self) -> list[Candidate]:
        """Candidates past the floor that the gate did not drop, in the order they went on."""
        return [c for c in self.considered if c.row.chunk_id in self.passed and survives(self.outcomes[c.row.chunk_id])]

    def tokens(self) -> int:
        """What the survivors would cost in the package (a structural chunk at its first level)."""
        texts = dict(self._block(c) for c in self.survivors() if c.row.type != "topic")  # a hub is no block
        return sum(estimate_tokens(t) for t in texts.values())

    def _block(self, c: Candidate) -> tuple[str, str]:
        """(exact key, block text at its first level) of a candidate, rendered once per walk."""
        found = self._blocks.get(c.row.chunk_id)
        if found is None:
            text = block_content(c.row)[0]
            if c.row.type in STRUCTURAL_TYPES:
                lead, parts = transcript_content(c.row, self.query)
                text = pick_parts(lead, parts, 0)[0] if parts else first_level(text)
            found = self._blocks[c.row.chunk_id] = (duplicate_key(c.row), text)
        return found


def _deepen(walk: _Walk, fused: list[Candidate], config: FunnelConfig) -> dict[str, Any]:
    """Widen through the fused list (``wide``, then doubling) and say how deep it went and why it stopped."""
    steps: list[int] = []
    depth, step, stopped = 0, config.wide, ""
    limit = max(config.max_wide, config.wide) if config.adaptive else config.wide
    while not stopped:
        take = fused[depth : min(depth + step, limit)]
        passed = walk.judge(take)
        depth += len(take)
        steps.append(depth)
        tokens = walk.tokens()
        if not config.adaptive:
            stopped = f"fixed depth: wide {config.wide}"
        elif tokens >= config.fill * config.budget:
            stopped = f"budget filled: survivors carry {tokens} tokens, the budget is {config.budget}"
        elif take and not passed:
            stopped = f"scores fell off: none of candidates {depth - len(take) + 1}-{depth} reached the floor"
        elif depth >= len(fused):
            stopped = f"candidates exhausted: all {len(fused)} fused candidates went on"
        elif depth >= limit:
            stopped = f"max_wide reached: {limit} candidates"
        step = depth
    return {"candidates": depth, "steps": steps, "stopped": stopped, "survivor_tokens": tokens}


# --------------------------------------------------------------------------- associative recall


def _associate(
    walk: _Walk,
    fused: list[Candidate],
    query: str,
    retriever: Retriever,
    embedder: Embedder,
    config: FunnelConfig,
) -> dict[str, Any]:
    """Pseudo-relevance feedback (when few survive), then the one-hop expansion; both traced."""
    out: dict[str, Any] = {}
    kept = _strongest(walk, config.beam)
    if config.adaptive and 0 < len(walk.survivors()) < config.feedback_below:
        terms = feedback_terms(query, [c.row for c in kept], config.feedback_terms)
        if terms:
            text = f"{query} {' '.join(terms)}"
            known = {c.row.chunk_id for c in walk.considered}
            more, vecs = _retrieve([("feedback", text)], retriever, embedder, config)
            walk.query_vectors[text] = vecs[0]
            new = [c for c in more if c.row.chunk_id not in known][: config.wide]
            walk.judge(new)
            out.update(feedback_terms=terms, feedback_query=[text], feedback_candidates=len(new))
            kept = _strongest(walk, config.beam)
    if config.adaptive and (config.beam or config.turns) and isinstance(retriever, SessionRetriever):
        out.update(_hop(walk, retriever, config))
    return out


def _hop(walk: _Walk, retriever: SessionRetriever, config: FunnelConfig) -> dict[str, Any]:
    """One hop from the strongest survivors: the ``beam`` the lanes rank highest seed their sessions'
    neighbouring turns and their hubs' and ``related`` members; the replies to the questions among
    the rest that hold one of the prompt's terms, and the strongest notes' own turns verbatim, follow."""
    ranked = _strongest(walk, len(walk.considered))
    strongest = ranked[: config.turns]
    kept = _fused_strongest(walk.survivors(), config.beam)
    seeds = [c.row for c in kept if c.row.type in ("atomic", "turn") and c.row.source_conversation]
    speakers = [c.row for c in strongest if c.row.type == "atomic" and c.row.source_conversation]
    beamed = {r.chunk_id for r in seeds}
    terms = {t for run in query_runs(walk.query) + query_runs(walk.intent, walk.query) for t in run}
    asking = (
        c.row
        for c in ranked
        if c.row.type in ("atomic", "turn")
        and c.row.source_conversation
        and c.row.chunk_id not in beamed
        and asks(c.row)
        and _shares_a_term(c.row, terms)
    )
    questions = list(islice(asking, config.replies))
    rows = walk.conversation_rows(retriever, {r.source_conversation for r in seeds + speakers + questions})
    found = neighbours(seeds, rows, config.radius) if config.radius else []
    found += neighbours(questions, rows, 1, ahead=True)
    hubs = [c.row for c in kept if c.row.type == "topic"]
    for hub in hubs:
        # A hub's links are its members; the ``wide`` nearest to the query go on (a fixed beam).
        members = retriever.rows_by_stem(
            sorted({link.target for link in wikilinks(hub.text)}), include_archived=config.include_archived
        )
        found += [(row, hub.note_id) for row in _nearest(members, walk.qvec, config.wide)]
    linked, related = _related(kept, walk, retriever, config)
    found += linked
    via_related = {row.chunk_id for row, _ in linked}
    known = {c.row.chunk_id for c in walk.considered}
    unique: dict[str, tuple[Hit, str]] = {}
    for row, seed in found:
        if row.chunk_id not in known:
            unique.setdefault(row.chunk_id, (row, seed))
    new = [Candidate(row, 0.0, ("neighbour",), (), math.nan) for row, _ in unique.values()]
    near = len(new)
    # The seeds' own turns, verbatim, when they carry what their notes lack (the seed's cosine).
    similarity = {c.row.note_id: c.similarity for c in strongest}
    taken = known | set(unique)  # a neighbouring turn found above is not excerpted twice
    turns = [(row, seed) for row, seed in turn_excerpts(speakers, rows) if row.chunk_id not in taken]
    # A turn has no stored vector; the gate's signals take its seed note's (the part of the turn the
    # query matched, whose cosine it already carries) instead of embedding it (~12 ms a query).
    stored = {c.row.note_id: _stored_vector(c.row) for c in strongest}
    turns = [(_with_vector(row, stored.get(seed)), seed) for row, seed in turns]
    new += [Candidate(row, 0.0, ("turn",), (), similarity[seed]) for row, seed in turns]
    unique.update({row.chunk_id: (row, seed) for row, seed in turns})
    walk.expanded_from.update({cid: seed for cid, (_, seed) in unique.items()})
    passed = walk.judge(new)
    survived = sum(1 for c in new if c.row.chunk_id in walk.passed and survives(walk.outcomes[c.row.chunk_id]))
    return {
        "seeds": list(dict.fromkeys(r.note_id for r in seeds + hubs + related)),
        "questions": len(questions),  # survivors beyond the beam asking a question: their replies joined
        "neighbours": near,  # neighbouring turns' notes, hub members and related notes
        "related": sum(1 for cid in unique if cid in via_related),  # of the neighbours, by ``related`` links
        "turns": len(turns),  # verbatim turns
        "floor": passed,  # of both, past the floor
        "kept": survived,  # of both, past the floor and the gate
    }


def _shares_a_term(row: Hit, terms: set[str]) -> bool:
    """Whether a question's own words hold one of the prompt's or the intent's content terms
    (stemmed): its reply joins the hop only then. A cosine alone ranks any Dutch question near a
    Dutch prompt, and the reply to "Wat zijn de bekende rhetorische trucs om een discussie te
    winnen?" brought a chat on rhetoric into a question on VAT."""
    return bool(terms & content_stems(parse_atomic(row.text).sentence if row.type == "atomic" else row.text))


def _stored_vector(row: Hit) -> np.ndarray | None:
    """The stored unit vector a hit carries (``index.Row`` does when asked for it), else None. An
    attribute read: a runtime-checkable Protocol's ``isinstance`` cost ~6 us a row (a few hundred
    rows a query)."""
    return getattr(row, "vector", None)


def _with_vector(row: Hit, vector: np.ndarray | None) -> Hit:
    """``row`` carrying ``vector`` when it can hold one (a dataclass row with a ``vector`` field)."""
    if vector is None or not hasattr(row, "vector") or not is_dataclass(row):
        return row
    return replace(row, vector=vector)


def _related(
    kept: list[Candidate], walk: _Walk, retriever: SessionRetriever, config: FunnelConfig
) -> tuple[list[tuple[Hit, str]], list[Hit]]:
    """The notes the nightly clean linked as ``related`` to the strongest survivors, credited to
    the seed: per seed the ``wide`` nearest the query (a fixed beam); and the seeds that had links."""
    if not isinstance(retriever, RelatedRetriever) or not kept:
        return [], []
    links = retriever.related_stems([c.row.path for c in kept])
    stems = sorted({stem for found in links.values() for stem in found})
    if not stems:
        return [], []
    members = retriever.rows_by_stem(stems, include_archived=config.include_archived)
    out: list[tuple[Hit, str]] = []
    seeds = []
    for c in kept:
        linked = set(links.get(c.row.path, []))
        mine = [r for r in members if PurePosixPath(r.path).stem in linked and r.note_id != c.row.note_id]
        if mine:
            seeds.append(c.row)
        out += [(row, c.row.note_id) for row in _nearest(mine, walk.qvec, config.wide)]
    return out, seeds


def _consolidate(walk: _Walk, retriever: SessionRetriever) -> dict[str, Any]:
    """Small-to-big: a turn two or more of whose surviving notes cost, together, at least
    1 / ``whole_turn_cost`` of the turn itself enters verbatim in their place (each note repeats the
    turn's date and speaker; the turn also keeps the words no note kept). Its notes then collapse
    into it (``rank.covered``). Only survivors' own turns in the sessions the hop read, no new search
    or lookup; traced."""
    survivors = walk.survivors()
    have = {
        (c.row.source_conversation, m)
        for c in survivors
        if c.row.type == "turn"
        for m in cited_messages(c.row.source_messages)
    }
    groups: dict[tuple[str, str], list[Candidate]] = {}
    for c in survivors:
        cited = cited_messages(c.row.source_messages)
        if c.row.type == "atomic" and c.row.source_conversation and len(cited) == 1:
            key = (c.row.source_conversation, cited[0])
            if key not in have:
                groups.setdefault(key, []).append(c)
    # One note never costs more than its turn; and only the sessions the hop already read are
    # looked at (no index lookup of its own: on the real export a lookup per session cost ~40 ms).
    groups = {key: notes for key, notes in groups.items() if len(notes) >= 2 and walk.has_read(key[0])}
    if not groups:
        return {}
    turns = turn_rows(walk.conversation_rows(retriever, {k[0] for k in groups}), set(groups))
    known = {c.row.chunk_id for c in walk.considered}
    new = []
    for key, notes in sorted(groups.items()):
        turn = turns.get(key)
        if turn is None or turn.chunk_id in known:
            continue
        cost = sum(estimate_tokens(walk._block(c)[1]) for c in notes)
        if estimate_tokens(block_content(turn)[0]) <= walk.config.whole_turn_cost * cost:
            best = max(notes, key=lambda c: (round(c.similarity, 9), c.row.chunk_id))
            reason = f"whole turn: its {len(notes)} notes passed the floor and the gate ({cost} tokens together)"
            new.append((Candidate(turn, 0.0, ("turn",), (), best.similarity), reason))
            walk.expanded_from[turn.chunk_id] = best.row.note_id
    if not new:
        return {}
    # No judging of its own: the turn says what its surviving notes say, plus the rest of the turn
    # (embedding each turn for the gate's signals cost ~50 ms a query on LoCoMo).
    walk.admit(new)
    return {"whole_turns": len(new), "whole_turns_kept": len(new)}


def _superseded(walk: _Walk, retriever: SupersededLookup) -> dict[str, Any]:
    """Drop a surviving verbatim turn that a superseded note cites: the turn is history, and the
    note that superseded it says what holds now (the clean supersedes, it never deletes). Known from
    the hop's read of the turn's session, else one lookup."""
    turns = [c for c in walk.survivors() if c.row.type == "turn"]
    if not turns:
        return {}
    gone = walk.superseded_messages(retriever, {c.row.source_conversation for c in turns})
    dropped = 0
    for c in turns:
        keys = [(c.row.source_conversation, m) for m in cited_messages(c.row.source_messages)]
        by = [gone[k] for k in keys if k in gone]
        if by:
            walk.outcomes[c.row.chunk_id] = Drop(f"superseded: a note of this turn was superseded by {by[0]}")
            dropped += 1
    return {"superseded_turns": dropped} if dropped else {}


def _nearest(rows: Sequence[Hit], qvec: np.ndarray, k: int) -> list[Hit]:
    """The ``k`` rows whose stored vectors are nearest the query (ties by chunk id)."""
    scored = [
        (
            float(np.asarray(vector, np.float64) @ qvec.astype(np.float64))
            if (vector := _stored_vector(r)) is not None
            else -1.0,
            r,
        )
        for r in rows
    ]
    return [r for _, r in sorted(scored, key=lambda p: (-round(p[0], 9), p[1].chunk_id))[:k]]


def _fused_strongest(survivors: Sequence[Candidate], beam: int) -> list[Candidate]:
    """The ``beam`` survivors the lanes rank highest (their RRF score over both lanes and every searched
    variant; ties by id). The hop's seeds: MiniLM's cosine alone ranks any Dutch sentence near a
    Dutch prompt ("Daar ben ik het niet mee eens." at 0.72 for a question about VAT), and the seed's
    chat would fill the package."""
    return sorted(survivors, key=lambda c: (-round(c.rrf, 9), *c.key))[:beam]


def _strongest(walk: _Walk, beam: int) -> list[Candidate]:
    """The ``beam`` survivors with the highest cosine to the query (ties by id)."""
    return sorted(walk.survivors(), key=lambda c: (-round(c.similarity, 9), *c.key))[:beam]


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
    queries: list[tuple[str, str]],
    retriever: Retriever,
    embedder: Embedder,
    config: FunnelConfig,
    unsearched: AbstractSet[str] = frozenset(),
    extra: Sequence[str] = (),
) -> tuple[list[Candidate], np.ndarray]:
    """Both lanes of every query but the ``unsearched`` ones (``searched``), fused; also returns
    every query's unit vector (the original first: the floor and the gate's signals read them all),
    then those of the ``extra`` texts, embedded in the same call and never searched.

    The index runs both lanes of the searched queries at once (``hybrid_search``); any other
    retriever's full-text searches start first, on the search threads, and run while this thread
    embeds the queries and runs the vector lane. Full-text hits' cosines to the original query are
    filled in afterwards, for the candidates that go on. A transcript message's own chunk comes
    back as that turn (``expand.as_turn``).
    """
    words = [text for _, text in queries] + list(extra)
    runs = [text not in unsearched for _, text in queries] + [False] * len(extra)  # extra texts: never searched
    words_run = [w for w, run in zip(words, runs) if run]
    embedded: list[np.ndarray] = []

    def embed_all(_: list[str]) -> np.ndarray:
        # One embedder call for every query (the gate needs the unsearched ones' vectors too).
        embedded.append(l2_normalise(embedder.embed(words)))
        return embedded[0][runs]

    if isinstance(retriever, HybridRetriever):  # the index: both lanes, one read of the hits' columns
        _, nearest, found = retriever.hybrid_search(
            words_run, embed_all, config.k, include_archived=config.include_archived
        )
    else:
        pool = _search_pool()
        pending = [
            pool.submit(retriever.text_search, text, config.k, include_archived=config.include_archived)
            for text in words_run
        ]
        nearest = [
            retriever.vector_search(v, config.k, include_archived=config.include_archived) for v in embed_all(words_run)
        ]
        found = [future.result() for future in pending]
    vectors = embedded[0] if embedded else l2_normalise(embedder.embed(words))
    lists = []
    for (kind, _), hits, text in zip([q for q, run in zip(queries, runs) if run], nearest, found):
        lists += [(kind, "vector", list(hits)), (kind, "text", list(text))]
    return [replace(c, row=as_turn(c.row)) for c in fuse(lists)], vectors


def absent_words(query: str, fused: Sequence[Candidate], retriever: Retriever) -> list[str]:
    """The prompt's content words that no note in the vault holds, in the prompt's order.

    A word found in a retrieved candidate's text (case-folded; inside a longer word counts) is
    known; each of the rest costs one full-text lookup (``WordLookup``), so a prompt whose words
    all came back in its candidates costs nothing. A package for such a prompt is the nearest the
    vault has, not notes about that word: the package says so (issue 12, questions the archive
    cannot answer: ``benchmarks/bench_absent.py``).
    """
    if not isinstance(retriever, WordLookup):
        return []
    own = prompt_stopwords(query)
    words = [
        w for w in dict.fromkeys(tokens(query)) if w not in STOPWORDS and w not in QUERY_STOPWORDS and w not in own
    ]
    texts = [c.row.text.casefold() for c in fused]
    missing = [w for w in words if not any(w in text for text in texts)]
    return retriever.unknown_words(missing) if missing else []


def searched(texts: Sequence[str]) -> list[bool]:
    """Which queries run lanes of their own: all but one that holds an earlier searched query's
    whole text inside more words. Such a variant is a frame around the same phrase (the offline
    planner's "facts and sources about <concept>"): its vector sits next to the phrase's and its
    extra words are the frame's, so its searches repeat the phrase's (on LoCoMo's tuning part
    searching them changed evidence and answer words by under a point, and cost three of five
    searches; README, "LoCoMo retrieval")."""
    runs: list[bool] = []
    done: list[list[str]] = []
    for text in texts:
        words = text.casefold().split()
        framed = any(len(words) > len(w) and _holds(words, w) for w in done)
        runs.append(not framed)
        if not framed:
            done.append(words)
    return runs


def _holds(words: list[str], part: list[str]) -> bool:
    """Whether ``part`` occurs in ``words`` as a run of whole words."""
    n = len(part)
    return n > 0 and any(words[i : i + n] == part for i in range(len(words) - n + 1))


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
        stored = _stored_vector(c.row)
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


def _gate(candidates: list[Candidate], passed: set[str], walk: _Walk) -> dict[str, GateOutcome]:
    """Gate outcome per chunk id; floor-dropped candidates and a disabled gate are ``Skipped``.

    The gate gets the retrieval signals' inputs the funnel already has: the embedder, the other
    queries, the query vectors and each candidate's stored vector.
    """
    config = walk.config
    outcomes: dict[str, GateOutcome] = {}
    for c in candidates:
        if c.row.chunk_id not in passed:
            outcomes[c.row.chunk_id] = Skipped(f"similarity {c.similarity:.3f} below floor {config.floor:.2f}")
        elif not config.gate:
            outcomes[c.row.chunk_id] = Skipped("gate disabled")
    going = [c for c in candidates if c.row.chunk_id in passed]
    judged = [(c.row.chunk_id, c.row.path, c.row.heading or "", c.row.text) for c in going]
    vectors = {c.row.chunk_id: vector for c in going if (vector := _stored_vector(c.row)) is not None}
    if config.gate and judged:
        outcomes.update(
            gate_rows(
                judged,
                llm=walk.llm,
                intent=walk.intent,
                query=walk.query,
                batch_size=config.gate_batch,
                timeout=config.gate_timeout,
                text_chars=config.gate_chars,
                embedder=walk.embedder,
                variants=[text for kind, text in walk.queries if kind != "original"],
                vectors=vectors,
                query_vectors=walk.query_vectors,
                conversations={c.row.chunk_id: chat_of(c.row.source_kind, c.row.source_conversation) for c in going},
                # The candidates that passed earlier steps (``judge`` adds this step's after the gate).
                context=[
                    chat_of(c.row.source_kind, c.row.source_conversation)
                    for c in walk.considered
                    if c.row.chunk_id in walk.passed
                ],
            )
        )
    return outcomes
