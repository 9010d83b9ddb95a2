"""The funnel's account of itself: the package's stats and one trace entry per candidate.

``build_package`` turns the found ``Verdict`` (and through it the rank, the walk and the lanes)
and its budget ``Assembly`` into the ``ContextPackage``; the trace is what ``vault query --explain`` shows: every fused candidate's
lanes, similarity, floor, gate verdict, rank, duplicate collapse and budget cut.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from vault_pipeline.retrieve.evidence import Verdict
from vault_pipeline.retrieve.gate import Drop, FailOpen, Keep, label, probability_of, reason_of, reasoning_of
from vault_pipeline.retrieve.lanes import Absent
from vault_pipeline.retrieve.metering import token_counter
from vault_pipeline.retrieve.package import Assembly, ContextPackage
from vault_pipeline.retrieve.reports import CandidateTrace, FunnelStats, QueryRun, Walk
from vault_pipeline.retrieve.signals import chat_of
from vault_pipeline.retrieve.state import Query
from vault_pipeline.retrieve.types import Candidate


def build_package(
    q: Query, verdict: Verdict, absent: Absent, assembly: Assembly, budget_needed: int = 0
) -> ContextPackage:
    """The package from a finished funnel run: blocks, stats, and one trace entry per candidate;
    ``budget_needed``: the budget that would hold a block, when this one holds none of the evidence."""
    pool, lanes = verdict.ranked.judged.pool, verdict.ranked.judged.lanes
    went_on = pool.known()
    # Every candidate: those taken to the floor and gate in the order they went on, then the rest.
    fused = pool.considered + [c for c in lanes.fused if c.row.chunk_id not in went_on]
    walk = replace(verdict.ranked.judged.walk, found=verdict.report)
    stats = replace(_stats(q, verdict, absent, assembly, walk, len(fused)), budget_needed=budget_needed)
    beyond = f"beyond the depth reached ({len(went_on)} candidates: {walk.depth.stopped if walk.depth else ''})"
    entries = _Entries(q, verdict, assembly, went_on, beyond, {c.row.chunk_id: c.row.note_id for c in fused})
    # A package without blocks holds no evidence: never "found", whatever cleared the threshold.
    found = verdict.found and bool(assembly.blocks)
    counter = token_counter(q.config.tokenizer)
    return ContextPackage.counted(
        q.text, lanes.planned.intent, assembly.blocks, stats, tuple(map(entries.of, fused)), found, counter
    )


def _stats(q: Query, verdict: Verdict, absent: Absent, assembly: Assembly, walk: Walk, retrieved: int) -> FunnelStats:
    ranked, pool, planned = verdict.ranked, verdict.ranked.judged.pool, verdict.ranked.judged.lanes.planned
    outcomes = list(pool.outcomes.values())
    queries = [*planned.queries, ("feedback", walk.feedback.query)] if walk.feedback else list(planned.queries)
    tools = q.tools
    return FunnelStats(
        retrieved=retrieved,
        candidates=len(pool.considered),
        after_floor=len(pool.passed),
        gate_enabled=q.config.gate_enabled,
        gate_kept=sum(isinstance(o, Keep) for o in outcomes),
        gate_dropped=sum(isinstance(o, Drop) for o in outcomes),
        gate_fail_open=sum(isinstance(o, FailOpen) for o in outcomes),
        plan_error=planned.error,
        deduped=len(ranked.collapsed),
        selected=len(ranked.ranked),
        cap_fired=assembly.cap_fired,
        cap=assembly.cap,
        tokens=assembly.tokens,
        budget=assembly.budget,
        window=q.config.window,
        dropped_for_budget=assembly.dropped,
        truncated=sum(b.truncated for b in assembly.blocks),
        variants=tuple(QueryRun(kind, text, text not in planned.unsearched) for kind, text in queries),
        intent_source=planned.intent_source,
        floor=q.config.floor,
        wide=q.config.wide,
        walk=walk,
        absent_words=tuple(absent.words),
        found=verdict.found,
        evidence_threshold=pool.stop,
        below_evidence=len(ranked.below),
        reference_date=ranked.reference.isoformat() if ranked.reference else None,
        models={"plan": tools.llm_plan.model, "gate": tools.llm_gate.model, "embedder": tools.embedder.name},
        gate_error=next((o.error for o in outcomes if isinstance(o, FailOpen)), None),
    )


class _Entries:
    """Each candidate's trace entry, built in one step from what the run decided about it: the row and
    who found it; its rank and what the budget did to its block; for a candidate taken to the floor
    and gate, their verdicts and a hub's, a duplicate's or a non-evidence note."""

    def __init__(
        self, q: Query, verdict: Verdict, assembly: Assembly, went_on: set[str], beyond: str, notes: dict[str, str]
    ):
        self.q, self.assembly, self.went_on, self.beyond, self.notes = q, assembly, went_on, beyond, notes
        self.pool, self.collapsed = verdict.ranked.judged.pool, verdict.ranked.collapsed
        self.ranks = {s.candidate.row.chunk_id: (i, s) for i, s in enumerate(verdict.ranked.ranked, 1)}
        self.below = {c.row.chunk_id for c in verdict.ranked.below}
        self.unfound = {c.row.chunk_id for c in verdict.unfound}

    def of(self, c: Candidate) -> CandidateTrace:
        row = c.row
        cid = row.chunk_id
        ranked = self.ranks.get(cid)
        done = self.assembly.outcomes.get(cid)
        placed: dict[str, Any] = {
            "score": ranked[1].score if ranked else None,
            "recency": ranked[1].recency if ranked else None,
            "rank": ranked[0] if ranked else None,
            "level": done.level if done else None,
            "budget": done.cut if done else None,
            "cap": bool(done and done.by_cap),
            "expanded_from": self.pool.expanded_from.get(cid),
            # The chat it came from (labels for ``gate-calibrate`` copy it: the gate's session signals).
            "conversation": chat_of(row.source_kind, row.source_conversation) or None,
        }
        if cid not in self.went_on:
            placed["reason"] = self.beyond
        else:
            placed |= self._judged(c, placed["rank"])
        return CandidateTrace(
            id=row.note_id,
            chunk_id=cid,
            path=row.path,
            tier=row.tier,
            type=row.type,
            lanes=c.lanes,
            variants=c.variants,
            rrf=c.rrf,
            similarity=c.similarity,
            wide=cid in self.went_on,
            **placed,
        )

    def _judged(self, c: Candidate, rank: int | None) -> dict[str, Any]:
        """A candidate taken to the floor and gate: their verdicts, a hub's and a duplicate's note,
        and why a survivor is no block."""
        pool, cid = self.pool, c.row.chunk_id
        passed = cid in pool.passed
        out: dict[str, Any] = {"floor": "pass" if passed else "drop"}
        reason = ""
        outcome = pool.outcomes.get(cid)
        if outcome is not None:
            reason = reason_of(outcome)
            out |= {"gate": label(outcome), "reasoning": reasoning_of(outcome), "probability": probability_of(outcome)}
        if c.row.type == "topic" and self.q.config.adaptive and rank is None and passed:
            reason = _also(reason, "a topic hub: its members went on, its links are no block")
        if cid in self.collapsed:
            winner = self.notes[self.collapsed[cid]]
            out["collapsed_into"] = winner
            reason = _also(reason, f"exact duplicate collapsed into {winner}")
        if cid in self.below:
            reason = _also(reason, f"relevance below the evidence threshold {pool.stop:.2f}: no block")
        elif cid in self.unfound:
            reason = _also(reason, "nothing in the vault is clearly about the prompt: no block")
        return out | {"reason": reason}


def _also(reason: str, more: str) -> str:
    """``more`` after the reason there is."""
    return f"{reason}; {more}".lstrip("; ")
