"""Funnel stage 5, consolidate: whole turns in place of their notes, and no superseded turn.

* ``whole_turns`` (small-to-big): a turn two or more of whose surviving notes cost, together, at
  least 1 / ``whole_turn_cost`` of the turn itself enters verbatim in their place (each note
  repeats the turn's date and speaker; the turn also keeps the words no note kept). Its notes
  then collapse into it (``rank.covered``). Only survivors' own turns in the sessions the hop
  read: no search or lookup of its own.
* ``drop_superseded``: a surviving verbatim turn that a superseded note cites is history; the note
  that superseded it says what holds now (the clean supersedes, it never deletes).
"""

from __future__ import annotations

from dataclasses import replace

from vault_pipeline.retrieve.blocks import block_content, cited_messages
from vault_pipeline.retrieve.expand import turn_rows
from vault_pipeline.retrieve.gate import Drop
from vault_pipeline.retrieve.items import is_statement
from vault_pipeline.retrieve.pool import Judged, Pool
from vault_pipeline.retrieve.reports import SupersededReport, WholeTurnsReport
from vault_pipeline.retrieve.state import Query
from vault_pipeline.retrieve.types import Candidate
from vault_pipeline.text import estimate_tokens

TurnKey = tuple[str, str]  # (conversation, message)


def whole_turns(q: Query, judged: Judged) -> Judged:
    """Put whole turns in place of their surviving notes where the turn costs little more."""
    config, pool = q.config, judged.pool
    if not (config.adaptive and config.whole_turns):
        return judged
    groups = _note_groups(pool)
    if not groups:
        return judged
    rows = pool.conversation_rows(q.tools.retriever, {k[0] for k in groups}, config.include_archived)
    turns = turn_rows(rows, set(groups))
    known = pool.known()
    new = []
    for key, notes in sorted(groups.items()):
        turn = turns.get(key)
        if turn is None or turn.chunk_id in known:
            continue
        cost = sum(estimate_tokens(pool.block(c)[1]) for c in notes)
        if estimate_tokens(block_content(turn)[0]) <= config.whole_turn_cost * cost:
            best = max(notes, key=lambda c: (round(c.similarity, 9), c.row.chunk_id))
            reason = f"whole turn: its {len(notes)} notes passed the floor and the gate ({cost} tokens together)"
            known_p = [p for c in notes if (p := pool.probability(c)) is not None]
            p = max(known_p) if known_p else None  # the turn is as relevant as its best note
            new.append((Candidate(turn, 0.0, ("turn",), (), best.similarity), reason, p))
            pool.expanded_from[turn.chunk_id] = best.row.note_id
    if new:
        # No judging of its own: the turn says what its surviving notes say, plus the rest of the turn.
        pool.admit(new)
        return replace(judged, walk=replace(judged.walk, whole_turns=WholeTurnsReport(len(new))))
    return judged


def _note_groups(pool: Pool) -> dict[TurnKey, list[Candidate]]:
    """Surviving atomic notes of one turn each, grouped by turn: the turns with two or more notes,
    in the sessions the hop read already, that no surviving verbatim turn shows yet."""
    survivors = pool.survivors()
    have = {
        (c.row.source_conversation, m)
        for c in survivors
        if c.row.type == "turn"
        for m in cited_messages(c.row.source_messages)
    }
    groups: dict[TurnKey, list[Candidate]] = {}
    for c in survivors:
        cited = cited_messages(c.row.source_messages)
        if c.row.type == "atomic" and c.row.source_conversation and len(cited) == 1:
            key = (c.row.source_conversation, cited[0])
            if key not in have:
                groups.setdefault(key, []).append(c)
    # One note never costs more than its turn; and a session the hop did not read is not read here.
    return {key: notes for key, notes in groups.items() if len(notes) >= 2 and pool.has_read(key[0])}


def drop_superseded(q: Query, judged: Judged) -> Judged:
    """Drop each surviving verbatim turn, or statement of a turn (the index's rows of a session's
    sentences), that a superseded note cites (known from the hop's read of its session, else one lookup)."""
    pool = judged.pool
    turns = [c for c in pool.survivors() if c.row.type == "turn" or is_statement(c.row)]
    if not turns:
        return judged
    gone = pool.superseded_messages(q.tools.retriever, {c.row.source_conversation for c in turns})
    dropped = 0
    for c in turns:
        keys = [(c.row.source_conversation, m) for m in cited_messages(c.row.source_messages)]
        by = [gone[k] for k in keys if k in gone]
        if by:
            pool.outcomes[c.row.chunk_id] = Drop(f"superseded: a note of this turn was superseded by {by[0]}")
            dropped += 1
    if dropped:
        return replace(judged, walk=replace(judged.walk, superseded=SupersededReport(dropped)))
    return judged
