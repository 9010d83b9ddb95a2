"""Funnel steps 5 and 6: the provenance rank of the gate's survivors, then exact-duplicate collapse.

Rank is gate first (only survivors are ranked), then similarity x tier weight x recency, where
recency decays only conversational tiers. Dedup keeps the highest-provenance copy of each text.
``rank_survivors`` is the stage (``Judged -> Ranked``); ``selection`` hands its result to
``package.assemble`` as package items, their text from ``blocks.py``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from vault_pipeline.errors import ConfigError
from vault_pipeline.retrieve.blocks import block_content, cited_messages, duplicate_key, transcript_content
from vault_pipeline.retrieve.items import Selected
from vault_pipeline.retrieve.pool import Judged
from vault_pipeline.retrieve.state import Query
from vault_pipeline.retrieve.types import Candidate, FunnelConfig, Scored
from vault_pipeline.vault.note import TIER_WEIGHTS

CONVERSATIONAL_TIERS = frozenset({"chat"})  # recency decays only these: a kept note or a document does not age


# --------------------------------------------------------------------------- 5. provenance rank


def parse_created(value: str) -> datetime | None:
    """An ISO date or datetime as an aware UTC datetime; None when absent or unreadable."""
    try:
        stamp = datetime.fromisoformat(str(value).strip().replace("Z", "+00:00"))
    except ValueError:
        return None
    return stamp if stamp.tzinfo else stamp.replace(tzinfo=UTC)


def reference_time(candidates: Sequence[Candidate], given: str | datetime | None) -> datetime | None:
    """Recency's "now": the caller's date, else the newest ``created`` among the candidates (never the clock)."""
    if isinstance(given, datetime):
        return given if given.tzinfo else given.replace(tzinfo=UTC)
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
    decay = 0.5 ** (age_days / config.recency_half_life_days)
    return (1.0 - config.recency_weight) + config.recency_weight * decay


def rank(survivors: Sequence[Candidate], reference: datetime | None, config: FunnelConfig) -> list[Scored]:
    """Gate-first provenance rank: similarity x tier weight x recency; score desc, then id asc."""
    scored = []
    for c in survivors:
        rec = recency(c.row.tier, c.row.created, reference, config)
        scored.append(Scored(c, c.similarity * TIER_WEIGHTS.get(c.row.tier, 0.0) * rec, rec))
    return sorted(scored, key=lambda s: (-round(s.score, 9), *s.candidate.key))


# --------------------------------------------------------------------------- 6. dedup


def dedup(ranked: list[Scored]) -> tuple[list[Scored], dict[str, str]]:
    """Collapse exact duplicates into the highest-provenance copy; returns (kept, loser -> winner chunk id)."""
    groups: dict[str, list[tuple[int, Scored]]] = {}
    for position, s in enumerate(ranked):
        groups.setdefault(duplicate_key(s.candidate.row), []).append((position, s))
    collapsed: dict[str, str] = {}
    for group in groups.values():
        # Provenance first (tier weight), then the rank order the list already has.
        _, winner = min(group, key=lambda p: (-TIER_WEIGHTS.get(p[1].candidate.row.tier, 0.0), p[0]))
        for _, s in group:
            if s is not winner:
                collapsed[s.candidate.row.chunk_id] = winner.candidate.row.chunk_id
    return [s for s in ranked if s.candidate.row.chunk_id not in collapsed], collapsed


def covered(ranked: list[Scored], collapsed: dict[str, str]) -> tuple[list[Scored], dict[str, str]]:
    """Atomic notes whose every cited turn is in the package verbatim (a ``turn`` excerpt) collapse into it."""
    turns = {
        (s.candidate.row.source_conversation, m): s.candidate.row.chunk_id
        for s in ranked
        if s.candidate.row.type == "turn"
        for m in cited_messages(s.candidate.row.source_messages)
    }
    collapsed = dict(collapsed)
    for s in ranked:
        row = s.candidate.row
        keys = [(row.source_conversation, m) for m in cited_messages(row.source_messages)]
        if row.type == "atomic" and keys and all(k in turns for k in keys):
            collapsed[row.chunk_id] = turns[keys[0]]
    return [s for s in ranked if s.candidate.row.chunk_id not in collapsed], collapsed


# --------------------------------------------------------------------------- the stage


@dataclass(frozen=True)
class Ranked:
    """The rank's result: the evidence ranked and deduplicated, and what it left out."""

    judged: Judged
    reference: datetime | None  # recency's "now"
    ranked: tuple[Scored, ...]  # rank 1 first
    collapsed: Mapping[str, str]  # loser chunk id -> the chunk id it collapsed into
    below: tuple[Candidate, ...]  # survivors that are no evidence: no block


def rank_survivors(q: Query, judged: Judged) -> Ranked:
    """Rank the survivors that clear the evidence threshold, gate first, and collapse exact duplicates
    and notes a verbatim turn shows. Those below the threshold are no block (``Ranked.below``)."""
    pool = judged.pool
    reference = reference_time(pool.considered, q.reference_date)
    survivors = pool.evidence()
    below = tuple(c for c in pool.survivors() if not pool.is_evidence(c))
    if q.config.adaptive:  # a topic hub is a list of links: its members went on in the hop; it is no block
        survivors = [c for c in survivors if c.row.type != "topic"]
    ranked, collapsed = covered(*dedup(rank(survivors, reference, q.config)))
    return Ranked(judged, reference, tuple(ranked), collapsed, below)


# --------------------------------------------------------------------------- to the package


def selection(ranked: Sequence[Scored], query: str = "") -> list[Selected]:
    """The ranked, deduplicated survivors as package items (rank 1 first), each block self-contained;
    a transcript chunk carries its turns as parts, weighed against ``query`` for a cut."""
    out = []
    for position, s in enumerate(ranked, 1):
        row = s.candidate.row
        text, messages, links = block_content(row, query)
        lead, parts = transcript_content(row, query)
        out.append(
            Selected(
                row.chunk_id,
                row.note_id,
                row.path,
                row.tier,
                row.type,
                s.score,
                position,
                text,
                row.heading or "",
                row.source_conversation or "",
                messages,
                links,
                lead,
                parts,
                row.source_position if row.type == "atomic" else 0,
            )
        )
    return out
