"""Funnel stage 4, associate: pseudo-relevance feedback, then one hop from the strongest survivors.

* ``feedback``: when few candidates survive, the kept notes' most frequent content words widen
  the prompt once (``expand.feedback_terms``).
* ``hop``: the ``beam`` survivors the lanes rank highest seed their sessions' neighbouring turns
  (``radius`` either side), their topic hubs' members and the notes the nightly clean linked to
  them as ``related``; the survivors beyond the beam that ask a question holding one of the
  prompt's terms bring the turn that answers them; the ``turns`` strongest notes' own turns enter
  verbatim when they carry what their notes lack.

Everything found goes through the same floor and gate (``judge``). The hop is bounded and
deterministic: ties break by id, and nothing found in the hop seeds another.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, is_dataclass, replace
from itertools import islice
from pathlib import PurePosixPath
from typing import Any, TypeVar

import numpy as np

from vault_pipeline.retrieve.blocks import parse_atomic
from vault_pipeline.retrieve.expand import asks, feedback_terms, neighbours, turn_excerpts
from vault_pipeline.retrieve.items import is_statement
from vault_pipeline.retrieve.judge import judge, stored_vector
from vault_pipeline.retrieve.lanes import lookup_pool, names, search_lanes
from vault_pipeline.retrieve.pool import Judged
from vault_pipeline.retrieve.reports import FeedbackReport, HopReport
from vault_pipeline.retrieve.state import Query
from vault_pipeline.retrieve.types import Candidate, Hit
from vault_pipeline.text import content_stems, query_runs, wikilinks
from vault_pipeline.vault.note import person_stem

Found = list[tuple[Hit, str]]  # (row, the seed note id it was found from)
T = TypeVar("T")


def feedback(q: Query, judged: Judged) -> Judged:
    """Widen the prompt once with the kept notes' frequent words when fewer than ``feedback_below`` survive."""
    config, pool = q.config, judged.pool
    if not (config.adaptive and 0 < len(pool.survivors()) < config.feedback_below):
        return judged
    kept = strongest(pool.survivors(), config.beam)
    terms = feedback_terms(q.text, [c.row for c in kept], config.feedback_terms)
    if not terms:
        return judged
    text = f"{q.text} {' '.join(terms)}"
    known = pool.known()
    more, vectors = search_lanes([("feedback", text)], q.tools, config)
    lanes = replace(judged.lanes, vectors={**judged.lanes.vectors, text: vectors[0]})
    judged = replace(judged, lanes=lanes)
    new = [c for c in more if c.row.chunk_id not in known][: config.wide]
    judge(q, judged, new)
    return replace(judged, walk=replace(judged.walk, feedback=FeedbackReport(tuple(terms), text, len(new))))


@dataclass(frozen=True)
class _Seeds:
    """Where the hop starts: the beam by fused rank, the strongest notes by cosine, the questions."""

    kept: list[Candidate]  # the ``beam`` survivors the lanes rank highest
    strongest: list[Candidate]  # the ``turns`` survivors nearest the prompt
    seeds: list[Hit]  # of the beam, the notes and turns of a session
    speakers: list[Hit]  # of the strongest, the atomic notes of a session: their turns may enter verbatim
    questions: list[Hit]  # survivors beyond the beam that ask a question on the prompt's terms


def hop(q: Query, judged: Judged) -> Judged:
    """One hop from the strongest survivors, through the floor and the gate."""
    config, pool = q.config, judged.pool
    if not (config.adaptive and (config.beam or config.turns)):
        return judged
    start = _seeds(q, judged)
    conversations = {r.source_conversation for r in start.seeds + start.speakers + start.questions}
    hubs = [c.row for c in start.kept if c.row.type == "topic"] + _people_named(q, judged)
    rows, linked, related, members = _read_around(q, judged, start, hubs, conversations)
    known = pool.known()
    near = _first_found(_neighbours(start, rows, config.radius) + members + linked, known)
    turns = _verbatim_turns(start, rows, known | set(near))  # a turn found above is not excerpted twice
    similarity = {c.row.note_id: c.similarity for c in start.strongest}
    new = [Candidate(row, 0.0, ("neighbour",), (), math.nan) for row, _ in near.values()]
    new += [Candidate(row, 0.0, ("turn",), (), similarity[seed]) for row, seed in turns]
    pool.expanded_from.update({row.chunk_id: seed for row, seed in [*near.values(), *turns]})
    passed = judge(q, judged, new)
    via_related = {row.chunk_id for row, _ in linked}
    report = HopReport(
        seeds=tuple(dict.fromkeys(r.note_id for r in start.seeds + hubs + related)),
        questions=len(start.questions),
        neighbours=len(near),
        related=sum(1 for c in new if c.row.chunk_id in via_related),
        turns=len(turns),
        floor=passed,
        kept=pool.survived(new),
    )
    return replace(judged, walk=replace(judged.walk, hop=report))


def _read_around(
    q: Query, judged: Judged, start: _Seeds, hubs: list[Hit], conversations: set[str]
) -> tuple[list[Hit], Found, list[Hit], Found]:
    """(every chunk of the seeds' sessions, the notes related to the seeds, the seeds that have such
    notes, the hubs' members). The links are read on the lookup threads while the sessions are read
    here: none of the three reads needs another."""
    related_read = _beside(_related, q, judged, start.kept) if start.kept else None
    members_read = _beside(_hub_members, q, judged, hubs) if hubs else None
    # ``drop_superseded`` asks which messages of the surviving turns' and statements' sessions were
    # superseded: for the sessions not read here the lookup starts now (survivors only grow till then).
    pool, retriever = judged.pool, q.tools.retriever
    pool.start_superseded(retriever, _turn_sessions(pool.survivors()) - conversations, _beside)
    rows = pool.conversation_rows(retriever, conversations, q.config.include_archived)
    linked, related = related_read.result() if related_read else ([], [])
    return rows, linked, related, members_read.result() if members_read else []


def _turn_sessions(survivors: Sequence[Candidate]) -> set[str]:
    """The sessions of the surviving verbatim turns and statements (``consolidate.drop_superseded``'s)."""
    return {
        c.row.source_conversation
        for c in survivors
        if (c.row.type == "turn" or is_statement(c.row)) and c.row.source_conversation
    }


def _beside(read: Callable[..., T], *args: Any) -> Future[T]:
    """``read(*args)`` started on a lookup thread."""
    return lookup_pool().submit(read, *args)


def _seeds(q: Query, judged: Judged) -> _Seeds:
    config, survivors = q.config, judged.pool.survivors()
    ranked = strongest(survivors, len(judged.pool.considered))
    best = ranked[: config.turns]
    kept = fused_strongest(survivors, config.beam)
    seeds = [c.row for c in kept if c.row.type in ("atomic", "turn") and c.row.source_conversation]
    speakers = [c.row for c in best if c.row.type == "atomic" and c.row.source_conversation]
    beamed = {r.chunk_id for r in seeds}
    terms = {t for run in query_runs(q.text) + query_runs(judged.lanes.planned.intent, q.text) for t in run}
    asking = (c.row for c in ranked if c.row.chunk_id not in beamed and _asks_on_topic(c.row, terms))
    return _Seeds(kept, best, seeds, speakers, list(islice(asking, config.replies)))


def _asks_on_topic(row: Hit, terms: set[str]) -> bool:
    """A note or turn of a session that asks a question holding one of the prompt's terms."""
    return row.type in ("atomic", "turn") and bool(row.source_conversation) and asks(row) and _shares_a_term(row, terms)


def _neighbours(start: _Seeds, rows: Sequence[Hit], radius: int) -> Found:
    """The seeds' neighbouring turns' notes (``radius`` either side), and the replies to the questions."""
    found = neighbours(start.seeds, rows, radius) if radius else []
    return found + neighbours(start.questions, rows, 1, ahead=True)


def _first_found(found: Found, known: set[str]) -> dict[str, tuple[Hit, str]]:
    """Chunk id -> (row, seed) of the rows not taken yet, each credited to the first seed that found it."""
    unique: dict[str, tuple[Hit, str]] = {}
    for row, seed in found:
        if row.chunk_id not in known:
            unique.setdefault(row.chunk_id, (row, seed))
    return unique


# A page linking more sessions than this names someone in most of the archive (a LoCoMo speaker,
# the user): it says nothing about which conversations matter and costs a read of them all
# (docs/decisions/0072-people-pages.md).
PERSON_SESSIONS = 8


def _people_named(q: Query, judged: Judged) -> list[Hit]:
    """The pages of the people the prompt names (``ingest/people.py``) among the fused candidates
    (a page holds its person's name, so the full-text lane finds it: no lookup of its own), when
    a page links at most ``PERSON_SESSIONS`` sessions: a question about a person draws on the
    conversations they take part in, as a topic hub's members."""
    stems = {person_stem(name) for name in names(q.text)}
    if not stems:
        return []
    pages = [c.row for c in judged.lanes.fused if c.row.type == "topic" and PurePosixPath(c.row.path).stem in stems]
    links: dict[str, set[str]] = {}
    for row in pages:  # a long page is several chunks: count its links over all of them
        links.setdefault(row.note_id, set()).update(link.target for link in wikilinks(row.text))
    return [row for row in pages if len(links[row.note_id]) <= PERSON_SESSIONS]


def _hub_members(q: Query, judged: Judged, hubs: Sequence[Hit]) -> Found:
    """A topic hub's links are its members; the ``wide`` nearest to the query go on (a fixed beam)."""
    found: Found = []
    for hub in hubs:
        members = q.tools.retriever.rows_by_stem(
            sorted({link.target for link in wikilinks(hub.text)}), include_archived=q.config.include_archived
        )
        found += [(row, hub.note_id) for row in _nearest(members, judged.lanes.qvec, q.config.wide)]
    return found


def _related(q: Query, judged: Judged, kept: list[Candidate]) -> tuple[Found, list[Hit]]:
    """The notes the nightly clean linked as ``related`` to the strongest survivors, credited to
    the seed: per seed the ``wide`` nearest the query (a fixed beam); and the seeds that had links."""
    if not kept:
        return [], []
    retriever = q.tools.retriever
    links = retriever.related_stems([c.row.path for c in kept])
    stems = sorted({stem for found in links.values() for stem in found})
    if not stems:
        return [], []
    members = retriever.rows_by_stem(stems, include_archived=q.config.include_archived)
    out: Found = []
    seeds = []
    for c in kept:
        linked = set(links.get(c.row.path, []))
        mine = [r for r in members if PurePosixPath(r.path).stem in linked and r.note_id != c.row.note_id]
        if mine:
            seeds.append(c.row)
        out += [(row, c.row.note_id) for row in _nearest(mine, judged.lanes.qvec, q.config.wide)]
    return out, seeds


def _verbatim_turns(start: _Seeds, rows: Sequence[Hit], taken: set[str]) -> Found:
    """The strongest notes' own turns, verbatim, when they carry what their notes lack. A turn has
    no stored vector: the gate's signals take its seed note's (the part of the turn the query
    matched, whose cosine it already carries) instead of embedding it again."""
    turns = [(row, seed) for row, seed in turn_excerpts(start.speakers, rows) if row.chunk_id not in taken]
    stored = {c.row.note_id: stored_vector(c.row) for c in start.strongest}
    return [(_with_vector(row, stored.get(seed)), seed) for row, seed in turns]


def _shares_a_term(row: Hit, terms: set[str]) -> bool:
    """Whether a question's own words hold one of the prompt's or the intent's content terms
    (stemmed): its reply joins the hop only then, as a cosine alone ranks any question in the
    prompt's language near the prompt."""
    return bool(terms & content_stems(parse_atomic(row.text).sentence if row.type == "atomic" else row.text))


def _with_vector(row: Hit, vector: np.ndarray | None) -> Hit:
    """``row`` carrying ``vector`` when it can hold one (a dataclass row with a ``vector`` field)."""
    if vector is None or not hasattr(row, "vector") or not is_dataclass(row):
        return row
    return replace(row, vector=vector)


def _nearest(rows: Sequence[Hit], qvec: np.ndarray, k: int) -> list[Hit]:
    """The ``k`` rows whose stored vectors are nearest the query (ties by chunk id)."""
    scored = [
        (
            float(np.asarray(vector, np.float64) @ qvec.astype(np.float64))
            if (vector := stored_vector(r)) is not None
            else -1.0,
            r,
        )
        for r in rows
    ]
    return [r for _, r in sorted(scored, key=lambda p: (-round(p[0], 9), p[1].chunk_id))[:k]]


def fused_strongest(survivors: Sequence[Candidate], beam: int) -> list[Candidate]:
    """The ``beam`` survivors the lanes rank highest (their RRF score over both lanes and every
    searched variant; ties by id): the hop's seeds. A cosine alone ranks any sentence in the
    prompt's language near the prompt, and the seed's chat would fill the package."""
    return sorted(survivors, key=lambda c: (-round(c.rrf, 9), *c.key))[:beam]


def strongest(survivors: Sequence[Candidate], n: int) -> list[Candidate]:
    """The ``n`` survivors with the highest cosine to the query (ties by id)."""
    return sorted(survivors, key=lambda c: (-round(c.similarity, 9), *c.key))[:n]
