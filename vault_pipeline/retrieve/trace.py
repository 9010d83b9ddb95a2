"""The funnel's account of itself: the package's stats and one trace entry per candidate.

``build_package`` turns a finished ``FunnelRun`` and its budget ``Assembly`` into the
``ContextPackage``; the trace is what ``vault query --explain`` shows: every fused candidate's
lanes, similarity, floor, gate verdict, rank, duplicate collapse and budget cut.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from vault_pipeline.retrieve.gate import Drop, FailOpen, Keep, label, reason_of, reasoning_of
from vault_pipeline.retrieve.package import Assembly, ContextPackage
from vault_pipeline.retrieve.signals import chat_of
from vault_pipeline.retrieve.types import Candidate, FunnelRun, Scored


def build_package(run: FunnelRun, assembly: Assembly) -> ContextPackage:
    """The package from a finished funnel run: blocks, stats, and one trace entry per candidate."""
    ranks = {s.candidate.row.chunk_id: (i, s) for i, s in enumerate(run.ranked, 1)}
    trace = tuple(_trace_entry(run, assembly, ranks, c, c.row.chunk_id in run.considered) for c in run.fused)
    return ContextPackage(run.query, run.intent, assembly.blocks, assembly.tokens, _stats(run, assembly), trace)


def _stats(run: FunnelRun, assembly: Assembly) -> dict[str, Any]:
    outcomes = list(run.outcomes.values())
    fail_open = sum(isinstance(o, FailOpen) for o in outcomes)
    return {
        "retrieved": len(run.fused),
        "candidates": len(run.considered),
        "after_floor": len(run.floor_passed),
        "gate_enabled": run.config.gate,
        "gate_kept": sum(isinstance(o, Keep) for o in outcomes),
        "gate_dropped": sum(isinstance(o, Drop) for o in outcomes),
        "gate_fail_open": fail_open,
        "plan_error": run.plan_error,
        # A package the gate could not check, or built without its variants, says so.
        "degraded": bool(fail_open or run.plan_error),
        "deduped": len(run.collapsed),
        "selected": len(run.ranked),
        "cap_fired": assembly.cap_fired,
        "cap": assembly.cap,
        "tokens": assembly.tokens,
        "budget": assembly.budget,
        "window": run.config.window,
        "dropped_for_budget": list(assembly.dropped),
        "truncated": sum(b.truncated for b in assembly.blocks),
        "variants": [
            {"kind": kind, "text": text, "searched": text not in run.unsearched} for kind, text in run.queries
        ],
        "intent_source": run.intent_source,
        "floor": run.config.floor,
        "wide": run.config.wide,
        # Depth by budget: how many candidates went on, in which steps, and why the walk stopped.
        "depth": dict(run.depth),
        # Associative recall: feedback terms and the one hop's seeds and neighbours.
        "expansion": dict(run.expansion),
        # The prompt's words that no note holds: the package is the nearest the vault has.
        "absent_words": list(run.absent_words),
        "reference_date": run.reference.isoformat() if run.reference else None,
        "models": dict(run.models),
    }


def _trace_entry(
    run: FunnelRun, assembly: Assembly, ranks: Mapping[str, tuple[int, Scored]], c: Candidate, in_wide: bool
) -> dict[str, Any]:
    """One candidate's path through the funnel (``--explain``)."""
    cid = c.row.chunk_id
    position, scored = ranks.get(cid, (None, None))
    outcome = run.outcomes.get(cid)
    done = assembly.outcomes.get(cid)
    entry: dict[str, Any] = {
        "id": c.row.note_id,
        "chunk_id": cid,
        "path": c.row.path,
        "tier": c.row.tier,
        "type": c.row.type,
        "lanes": list(c.lanes),
        "variants": list(c.variants),
        "rrf": c.rrf,
        "similarity": c.similarity,
        "wide": in_wide,
        "floor": None,
        "gate": "skipped",
        "reason": "",
        "reasoning": "",
        "score": scored.score if scored else None,
        "recency": scored.recency if scored else None,
        "rank": position,
        "collapsed_into": None,
        "level": done.level if done else None,
        "budget": done.cut if done else None,
        "cap": bool(done and done.by_cap),
        "expanded_from": run.expanded_from.get(cid),
        # The chat it came from (labels for ``gate-calibrate`` copy it: the gate's session signals).
        "conversation": chat_of(c.row.source_kind, c.row.source_conversation) or None,
    }
    if not in_wide:
        entry["reason"] = f"beyond the depth reached ({len(run.considered)} candidates: {run.depth.get('stopped', '')})"
        return entry
    entry["floor"] = "pass" if cid in run.floor_passed else "drop"
    if outcome is not None:
        entry.update(gate=label(outcome), reason=reason_of(outcome), reasoning=reasoning_of(outcome))
    if c.row.type == "topic" and run.config.adaptive and position is None and cid in run.floor_passed:
        entry["reason"] = f"{entry['reason']}; a topic hub: its members went on, its links are no block".lstrip("; ")
    if cid in run.collapsed:
        winner = next(x for x in run.fused if x.row.chunk_id == run.collapsed[cid])
        entry["collapsed_into"] = winner.row.note_id
        entry["reason"] = f"{entry['reason']}; exact duplicate collapsed into {winner.row.note_id}".lstrip("; ")
    return entry
