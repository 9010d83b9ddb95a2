"""The funnel's account of itself: the package's stats and one trace entry per candidate.

``build_package`` turns a finished ``FunnelState`` and its budget ``Assembly`` into the
``ContextPackage``; the trace is what ``vault query --explain`` shows: every fused candidate's
lanes, similarity, floor, gate verdict, rank, duplicate collapse and budget cut.
"""

from __future__ import annotations

from dataclasses import replace

from vault_pipeline.retrieve.gate import Drop, FailOpen, Keep, label, probability_of, reason_of, reasoning_of
from vault_pipeline.retrieve.metering import token_counter
from vault_pipeline.retrieve.package import Assembly, ContextPackage
from vault_pipeline.retrieve.reports import CandidateTrace, FunnelStats, QueryRun, Walk
from vault_pipeline.retrieve.signals import chat_of
from vault_pipeline.retrieve.state import FunnelState
from vault_pipeline.retrieve.types import Candidate, Scored


def build_package(state: FunnelState, assembly: Assembly, budget_needed: int = 0) -> ContextPackage:
    """The package from a finished funnel run: blocks, stats, and one trace entry per candidate;
    ``budget_needed``: the budget that would hold a block, when this one holds none of the evidence."""
    went_on = state.pool.known()
    # Every candidate: those taken to the floor and gate in the order they went on, then the rest.
    fused = state.pool.considered + [c for c in state.fused if c.row.chunk_id not in went_on]
    walk = Walk.of(state.trace)
    stats = replace(_stats(state, assembly, walk, len(fused)), budget_needed=budget_needed)
    ranks = {s.candidate.row.chunk_id: (i, s) for i, s in enumerate(state.ranked, 1)}
    beyond = f"beyond the depth reached ({len(went_on)} candidates: {walk.depth.stopped if walk.depth else ''})"
    below = {c.row.chunk_id for c in state.below}
    unfound = {c.row.chunk_id for c in state.unfound}
    entries = []
    for c in fused:
        entry = _placed(_entry(c, state), ranks.get(c.row.chunk_id), assembly)
        if c.row.chunk_id not in went_on:
            entries.append(replace(entry, reason=beyond))
            continue
        entry = _judged(entry, c, state, fused)
        if c.row.chunk_id in below:
            entry = _also(entry, f"relevance below the evidence threshold {state.pool.stop:.2f}: no block")
        elif c.row.chunk_id in unfound:
            entry = _also(entry, "nothing in the vault is clearly about the prompt: no block")
        entries.append(entry)
    counter = token_counter(state.config.tokenizer)
    # A package without blocks holds no evidence: never "found", whatever cleared the threshold.
    found = state.found and bool(assembly.blocks)
    package = ContextPackage(state.query, state.intent, assembly.blocks, 0, stats, tuple(entries), found, counter.name)
    tokens = counter.count(package.to_markdown())  # the package as returned, references included
    return replace(package, tokens=tokens, stats=replace(stats, tokens=tokens))


def _stats(state: FunnelState, assembly: Assembly, walk: Walk, retrieved: int) -> FunnelStats:
    outcomes = list(state.pool.outcomes.values())
    queries = [*state.queries, ("feedback", walk.feedback.query)] if walk.feedback else state.queries
    tools = state.tools
    return FunnelStats(
        retrieved=retrieved,
        candidates=len(state.pool.considered),
        after_floor=len(state.pool.passed),
        gate_enabled=state.config.gate_enabled,
        gate_kept=sum(isinstance(o, Keep) for o in outcomes),
        gate_dropped=sum(isinstance(o, Drop) for o in outcomes),
        gate_fail_open=sum(isinstance(o, FailOpen) for o in outcomes),
        plan_error=state.plan_error,
        deduped=len(state.collapsed),
        selected=len(state.ranked),
        cap_fired=assembly.cap_fired,
        cap=assembly.cap,
        tokens=assembly.tokens,
        budget=assembly.budget,
        window=state.config.window,
        dropped_for_budget=assembly.dropped,
        truncated=sum(b.truncated for b in assembly.blocks),
        variants=tuple(QueryRun(kind, text, text not in state.unsearched) for kind, text in queries),
        intent_source=state.intent_source,
        floor=state.config.floor,
        wide=state.config.wide,
        walk=walk,
        absent_words=tuple(state.absent_words),
        found=state.found,
        evidence_threshold=state.pool.stop,
        below_evidence=len(state.below),
        reference_date=state.reference.isoformat() if state.reference else None,
        models={"plan": tools.llm_plan.model, "gate": tools.llm_gate.model, "embedder": tools.embedder.name},
        gate_error=next((o.error for o in outcomes if isinstance(o, FailOpen)), None),
    )


def _entry(c: Candidate, state: FunnelState) -> CandidateTrace:
    """What any candidate's entry says: the row, who found it, and where it came from."""
    row = c.row
    return CandidateTrace(
        id=row.note_id,
        chunk_id=row.chunk_id,
        path=row.path,
        tier=row.tier,
        type=row.type,
        lanes=c.lanes,
        variants=c.variants,
        rrf=c.rrf,
        similarity=c.similarity,
        wide=False,
        expanded_from=state.pool.expanded_from.get(row.chunk_id),
        # The chat it came from (labels for ``gate-calibrate`` copy it: the gate's session signals).
        conversation=chat_of(row.source_kind, row.source_conversation) or None,
    )


def _placed(entry: CandidateTrace, ranked: tuple[int, Scored] | None, assembly: Assembly) -> CandidateTrace:
    """The entry with its rank and score, and what the budget assembly did to its block."""
    done = assembly.outcomes.get(entry.chunk_id)
    return replace(
        entry,
        score=ranked[1].score if ranked else None,
        recency=ranked[1].recency if ranked else None,
        rank=ranked[0] if ranked else None,
        level=done.level if done else None,
        budget=done.cut if done else None,
        cap=bool(done and done.by_cap),
    )


def _judged(entry: CandidateTrace, c: Candidate, state: FunnelState, fused: list[Candidate]) -> CandidateTrace:
    """A candidate taken to the floor and gate: their verdicts, a hub's and a duplicate's note."""
    cid = c.row.chunk_id
    passed = cid in state.pool.passed
    entry = replace(entry, wide=True, floor="pass" if passed else "drop")
    outcome = state.pool.outcomes.get(cid)
    if outcome is not None:
        entry = replace(
            entry,
            gate=label(outcome),
            reason=reason_of(outcome),
            reasoning=reasoning_of(outcome),
            probability=probability_of(outcome),
        )
    if c.row.type == "topic" and state.config.adaptive and entry.rank is None and passed:
        entry = _also(entry, "a topic hub: its members went on, its links are no block")
    if cid in state.collapsed:
        winner = next(x for x in fused if x.row.chunk_id == state.collapsed[cid])
        entry = _also(
            replace(entry, collapsed_into=winner.row.note_id), f"exact duplicate collapsed into {winner.row.note_id}"
        )
    return entry


def _also(entry: CandidateTrace, reason: str) -> CandidateTrace:
    """The entry with ``reason`` after the reason it has."""
    return replace(entry, reason=f"{entry.reason}; {reason}".lstrip("; "))
