"""Funnel steps 5 and 6: the provenance rank of the gate's survivors, then exact-duplicate collapse.

Rank is gate first (only survivors are ranked), then similarity x tier weight x recency, where
recency decays only conversational tiers. Dedup keeps the highest-provenance copy of each text.
``selection`` hands the result to ``package.assemble`` as package items.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import PurePosixPath

from vault_pipeline.errors import ConfigError
from vault_pipeline.retrieve.blocks import (
    atomic_text,
    cited_messages,
    header,
    parse_atomic,
    structural_lead,
    structural_text,
    transcript_parts,
)
from vault_pipeline.retrieve.package import Part, Selected
from vault_pipeline.retrieve.types import Candidate, FunnelConfig, Hit, Scored
from vault_pipeline.text import exact_key
from vault_pipeline.vault.format import block_id
from vault_pipeline.vault.note import TIER_WEIGHTS

CONVERSATIONAL_TIERS = frozenset({"chat"})  # recency decays only these: a kept note or a document does not age
TRANSCRIPT_TYPES = frozenset({"session", "thread"})  # chunks made of a conversation's turns


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


def duplicate_key(row: Hit) -> str:
    """What makes two chunks one for the package: their text, and for an atomic note its sentence
    (the same sentence in two conversations, or pasted twice, is one block) with the person its
    ``Context:`` line names (the same words from two named people are two facts)."""
    if row.type == "atomic":
        parsed = parse_atomic(row.text)
        if parsed.sentence:
            return (
                f"{exact_key(parsed.who)}\n{exact_key(parsed.sentence)}" if parsed.who else exact_key(parsed.sentence)
            )
    return exact_key(row.text)


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


def transcript_content(row: Hit, query: str = "") -> tuple[str, tuple[Part, ...]]:
    """(lead, turns as parts) of a session or thread chunk, as ``block_content`` renders it;
    ("", ()) for any other row."""
    if row.type not in TRANSCRIPT_TYPES or not row.source_conversation:
        return "", ()
    messages = cited_messages(row.source_messages)
    return structural_lead(row.heading or "", row.created), transcript_parts(
        row.text, row.heading or "", messages, query
    )


def block_content(row: Hit, query: str = "") -> tuple[str, tuple[str, ...], tuple[str, ...]]:
    """(block text, cited message ids, source links) of a row: atomic notes as one dated line (with
    what a user added that matches ``query``), session and thread chunks without their markup,
    citing the turns they hold; others as stored."""
    messages = tuple(cited_messages(row.source_messages))
    if row.type == "atomic":
        text, links = atomic_text(row.text, row.created, getattr(row, "speaker", ""), query)
        return text, messages, links
    if row.type == "turn":  # a verbatim turn: "Speaker: text"
        who, _, said = row.text.partition(": ")
        links = tuple(f"{PurePosixPath(row.path).stem}#^{block_id(m)}" for m in messages)
        return f"{header(row.created, who)} {said}", messages, links
    if row.type in TRANSCRIPT_TYPES and row.source_conversation:
        text, held = structural_text(row.text, row.heading or "", row.created, messages)
        return text, held, ()
    return row.text, messages, ()
