"""What the funnel reports about itself: each stage's report, the package's stats, the trace.

A stage puts its report in its result (``Walk``, carried by ``pool.Judged``); ``trace.build_package``
turns the finished run into ``FunnelStats`` (``package.stats``) and one ``CandidateTrace`` per
candidate (``package.trace``, what ``vault query --explain`` shows). Each has ``to_dict()``,
which is the JSON shape ``vault query --json`` prints and users' scripts read: change a field
here and that shape changes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class DepthReport:
    """How deep the walk went (candidates taken to the floor and gate, in steps) and why it stopped."""

    candidates: int
    steps: tuple[int, ...]
    stopped: str
    survivor_tokens: int

    def to_dict(self) -> dict[str, Any]:
        """The JSON shape of ``stats.depth``."""
        return {
            "candidates": self.candidates,
            "steps": list(self.steps),
            "stopped": self.stopped,
            "survivor_tokens": self.survivor_tokens,
        }


@dataclass(frozen=True)
class FeedbackReport:
    """Pseudo-relevance feedback: the terms that widened the prompt once, and what they brought."""

    terms: tuple[str, ...]
    query: str
    candidates: int

    def to_dict(self) -> dict[str, Any]:
        """Its keys of ``stats.expansion``."""
        return {
            "feedback_terms": list(self.terms),
            "feedback_query": [self.query],
            "feedback_candidates": self.candidates,
        }


@dataclass(frozen=True)
class HopReport:
    """The one hop from the strongest survivors."""

    seeds: tuple[str, ...]  # the note ids it started from
    questions: int  # survivors beyond the beam asking a question: their replies joined
    neighbours: int  # neighbouring turns' notes, hub members and related notes
    related: int  # of the neighbours, found by ``related`` links
    turns: int  # verbatim turns
    floor: int  # of both, past the floor
    kept: int  # of both, past the floor and the gate

    def to_dict(self) -> dict[str, Any]:
        """Its keys of ``stats.expansion``."""
        return {
            "seeds": list(self.seeds),
            "questions": self.questions,
            "neighbours": self.neighbours,
            "related": self.related,
            "turns": self.turns,
            "floor": self.floor,
            "kept": self.kept,
        }


@dataclass(frozen=True)
class WholeTurnsReport:
    """Whole turns that entered in place of two or more of their surviving notes."""

    turns: int

    def to_dict(self) -> dict[str, Any]:
        """Its keys of ``stats.expansion`` (a whole turn is admitted as judged: all are kept)."""
        return {"whole_turns": self.turns, "whole_turns_kept": self.turns}


@dataclass(frozen=True)
class SupersededReport:
    """Verbatim turns dropped because a note citing them was superseded."""

    turns: int

    def to_dict(self) -> dict[str, Any]:
        """Its key of ``stats.expansion``."""
        return {"superseded_turns": self.turns}


@dataclass(frozen=True)
class FoundReport:
    """Whether the vault holds anything on the prompt: the found model's probability, its threshold
    and the features it weighed."""

    probability: float
    threshold: float
    features: Mapping[str, float]
    sure: float = 0.0
    closest: bool = False  # not found, but the closest few blocks come, marked

    def to_dict(self) -> dict[str, Any]:
        """The JSON shape of ``stats.evidence``."""
        return {
            "probability": self.probability,
            "threshold": self.threshold,
            "sure": self.sure,
            "closest": self.closest,
            "features": dict(self.features),
        }


@dataclass(frozen=True)
class Walk:
    """The walk's reports, one field per stage that reports: its depth, what associative recall and
    the consolidation added, the found judgement (each stage sets its own in the result it returns)."""

    depth: DepthReport | None = None
    feedback: FeedbackReport | None = None
    hop: HopReport | None = None
    whole_turns: WholeTurnsReport | None = None
    superseded: SupersededReport | None = None
    found: FoundReport | None = None

    def expansion(self) -> dict[str, Any]:
        """The JSON shape of ``stats.expansion``: the feedback's, the hop's and the turns' keys."""
        out: dict[str, Any] = {}
        for report in (self.feedback, self.hop, self.whole_turns, self.superseded):
            if report is not None:
                out.update(report.to_dict())
        return out


@dataclass(frozen=True)
class QueryRun:
    """One query the funnel ran: the prompt, a variant or the feedback query."""

    kind: str
    text: str
    searched: bool  # False: a frame around an earlier query, no lanes of its own

    def to_dict(self) -> dict[str, Any]:
        """One entry of ``stats.variants``."""
        return {"kind": self.kind, "text": self.text, "searched": self.searched}


@dataclass(frozen=True)
class FunnelStats:
    """What a package says about how it was built (``package.stats``)."""

    retrieved: int  # fused candidates (and the expansion's)
    candidates: int  # of those, taken to the floor and gate
    after_floor: int
    gate_enabled: bool
    gate_kept: int
    gate_dropped: int
    gate_fail_open: int
    plan_error: str | None
    deduped: int
    selected: int
    cap_fired: bool
    cap: int
    tokens: int
    budget: int
    window: int
    dropped_for_budget: tuple[Mapping[str, Any], ...]
    truncated: int
    variants: tuple[QueryRun, ...]
    intent_source: str
    floor: float
    wide: int
    walk: Walk
    absent_words: tuple[str, ...]  # the prompt's words that no note holds: the package is the nearest the vault has
    reference_date: str | None
    models: Mapping[str, str] = field(default_factory=dict)
    gate_error: str | None = None  # why the gate failed open (the first cause), when it did
    found: bool = True  # something cleared the evidence threshold
    evidence_threshold: float | None = None  # the calibrated relevance a block needed (None: no threshold)
    below_evidence: int = 0  # survivors of the gate under that threshold: no block
    budget_needed: int = 0  # evidence found, no block fits the budget (``found`` false): the budget that holds one
    # (0 also when the model window's share binds)

    @property
    def degraded(self) -> bool:
        """A package the gate could not check, or built without its variants, says so."""
        return bool(self.gate_fail_open or self.plan_error)

    def degraded_line(self) -> str:
        """What failed open, and why, in one line (the Markdown's warning and `vault query`'s error line)."""
        return degraded_line(self.gate_fail_open, self.gate_error, self.plan_error)

    def to_dict(self) -> dict[str, Any]:
        """The JSON shape of ``stats``."""
        return {
            "retrieved": self.retrieved,
            "candidates": self.candidates,
            "after_floor": self.after_floor,
            "gate_enabled": self.gate_enabled,
            "gate_kept": self.gate_kept,
            "gate_dropped": self.gate_dropped,
            "gate_fail_open": self.gate_fail_open,
            "gate_error": self.gate_error,
            "plan_error": self.plan_error,
            "degraded": self.degraded,
            "deduped": self.deduped,
            "selected": self.selected,
            "cap_fired": self.cap_fired,
            "cap": self.cap,
            "tokens": self.tokens,
            "budget": self.budget,
            "window": self.window,
            "dropped_for_budget": [dict(d) for d in self.dropped_for_budget],
            "truncated": self.truncated,
            "variants": [v.to_dict() for v in self.variants],
            "intent_source": self.intent_source,
            "floor": self.floor,
            "wide": self.wide,
            "depth": self.walk.depth.to_dict() if self.walk.depth else {},
            "expansion": self.walk.expansion(),
            "absent_words": list(self.absent_words),
            "reference_date": self.reference_date,
            "models": dict(self.models),
            "found": self.found,
            "evidence_threshold": self.evidence_threshold,
            "below_evidence": self.below_evidence,
            "budget_needed": self.budget_needed,
            "evidence": self.walk.found.to_dict() if self.walk.found else {},
        }

    def walk_line(self) -> str:
        """One line for ``--explain``: the queries searched, how deep the funnel went and why it
        stopped, what the feedback, the one hop and the whole turns added, the words no note holds."""
        framed = [v.kind for v in self.variants if not v.searched]
        line = f"queries: {len(self.variants) - len(framed)} of {len(self.variants)} searched"
        if framed:
            line += f" ({', '.join(framed)}: a frame around an earlier query)"
        depth = self.walk.depth
        if depth is not None:
            line += f"; depth: {depth.candidates} candidates in steps {list(depth.steps)}; {depth.stopped}"
        return line + "".join(_expansion_parts(self.walk)) + _absent_part(self.absent_words)


def _expansion_parts(walk: Walk) -> list[str]:
    parts = []
    if walk.feedback is not None and walk.feedback.terms:
        parts.append(f"; feedback terms: {', '.join(walk.feedback.terms)}")
    if walk.expansion():  # the hop's figures (0 when it found nothing) whenever recall added anything
        hop = walk.hop or HopReport((), 0, 0, 0, 0, 0, 0)
        parts.append(
            f"; one hop from {len(hop.seeds)} seeds: {hop.neighbours} neighbours ({hop.related} by related links), "
            f"{hop.turns} verbatim turns, {hop.kept} kept"
        )
    if walk.whole_turns is not None and walk.whole_turns.turns:
        turns = walk.whole_turns.turns
        parts.append(f"; {turns} whole turns in place of their notes, {turns} kept")
    return parts


def _absent_part(words: Sequence[str]) -> str:
    return f"; no note holds: {', '.join(words)}" if words else ""


@dataclass(frozen=True)
class CandidateTrace:
    """One candidate's path through the funnel: lanes, similarity, floor, gate, rank, budget."""

    id: str
    chunk_id: str
    path: str
    tier: str
    type: str
    lanes: tuple[str, ...]
    variants: tuple[str, ...]
    rrf: float
    similarity: float
    wide: bool  # taken to the floor and gate (False: beyond the depth the walk reached)
    floor: str | None = None  # "pass" | "drop"; None when not taken
    gate: str = "skipped"  # keep | drop | fail-open | skipped
    reason: str = ""
    reasoning: str = ""
    score: float | None = None
    recency: float | None = None
    rank: int | None = None
    collapsed_into: str | None = None
    level: str | None = None
    budget: str | None = None  # what assembly did: full | truncated | dropped
    cap: bool = False
    expanded_from: str | None = None  # the seed note a hop or feedback candidate came from
    conversation: str | None = None  # the chat it came from (labels for ``gate-calibrate`` copy it)
    probability: float | None = None  # the fitted gate's calibrated relevance (None: not known)

    def to_dict(self) -> dict[str, Any]:
        """One entry of the JSON trace."""
        return {
            "id": self.id,
            "chunk_id": self.chunk_id,
            "path": self.path,
            "tier": self.tier,
            "type": self.type,
            "lanes": list(self.lanes),
            "variants": list(self.variants),
            "rrf": self.rrf,
            "similarity": self.similarity,
            "wide": self.wide,
            "floor": self.floor,
            "gate": self.gate,
            "reason": self.reason,
            "reasoning": self.reasoning,
            "score": self.score,
            "recency": self.recency,
            "rank": self.rank,
            "collapsed_into": self.collapsed_into,
            "level": self.level,
            "budget": self.budget,
            "cap": self.cap,
            "expanded_from": self.expanded_from,
            "conversation": self.conversation,
            "probability": self.probability,
        }


def degraded_line(gate_fail_open: int, gate_error: str | None, plan_error: str | None) -> str:
    """What failed open, and why, in one line ("" when nothing did)."""
    parts = []
    if gate_fail_open:
        cause = f" ({gate_error})" if gate_error else ""
        parts.append(f"the fit-gate failed open{cause}: {gate_fail_open} candidate(s) kept unchecked")
    if plan_error:
        parts.append(f"decomposition failed ({plan_error}): the prompt alone was searched")
    return "; ".join(parts) + "; relevance was not fully checked." if parts else ""
