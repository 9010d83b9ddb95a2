"""The judged candidates: the pool the floor and the gate fill, and what the walk reports of itself.

``deepen`` makes the ``Judged`` from the ``Lanes``; ``feedback``, ``hop``, ``whole_turns`` and
``drop_superseded`` each take it and return it, their report added (``Walk``); ``rank_survivors``
reads it. A ``Judged`` is frozen; its ``Pool`` is the one accumulator these stages share: the
candidates taken to the floor and gate, in the order they went on, what those made of them, and
what the walk read from the index, so no stage reads or renders twice.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field

from vault_pipeline.retrieve.blocks import (
    STRUCTURAL_TYPES,
    block_content,
    duplicate_key,
    first_level,
    pick_parts,
    transcript_content,
)
from vault_pipeline.retrieve.gate import GateClock, GateOutcome, Keep, probability_of, survives
from vault_pipeline.retrieve.lanes import Lanes
from vault_pipeline.retrieve.reports import Walk
from vault_pipeline.retrieve.types import Candidate, Hit, Retriever
from vault_pipeline.text import estimate_tokens

# How a stage starts a lookup beside its own work (``lanes.lookup_pool().submit``).
Starter = Callable[..., Future]


class Pool:
    """The candidates taken to the floor and gate, and what the floor and the gate made of them.

    It also remembers what the walk read from the index (each conversation's chunks, their
    superseded messages) and each candidate's block text, so no stage reads or renders twice.
    """

    def __init__(self, query: str, stop: float | None = None):
        self.query = query
        self.stop = stop  # the evidence threshold (None: every survivor counts as evidence)
        self.considered: list[Candidate] = []  # in the order they went on
        self.passed: set[str] = set()  # chunk ids past the floor
        self.outcomes: dict[str, GateOutcome] = {}
        self.expanded_from: dict[str, str] = {}  # a hop or whole-turn candidate -> its seed note id
        self.clock: GateClock | None = None  # the query's gate deadline, from its first gate call
        self._blocks: dict[str, tuple[str, str]] = {}  # chunk id -> (exact key, block text)
        self._rows: dict[str, list[Hit]] = {}  # conversation -> its chunks
        self._links: dict[tuple[str, str], str] = {}  # (conversation, message) -> superseded by
        self._linked: set[str] = set()  # the conversations whose superseded messages are in ``_links``
        self._linking: list[tuple[list[str], Future[Mapping[tuple[str, str], str]]]] = []  # lookups running

    def known(self) -> set[str]:
        """The chunk ids taken so far."""
        return {c.row.chunk_id for c in self.considered}

    def add(self, cands: Sequence[Candidate], outcomes: dict[str, GateOutcome]) -> None:
        """Take ``cands`` in, judged (their floor already in ``passed``)."""
        self.outcomes.update(outcomes)
        self.considered += cands

    def admit(self, cands: Iterable[tuple[Candidate, str, float | None]]) -> None:
        """Let ``cands`` in as judged already (each with the reason and probability): a whole turn
        whose notes passed."""
        for c, reason, p in cands:
            self.passed.add(c.row.chunk_id)
            self.outcomes[c.row.chunk_id] = Keep(reason, probability=p)
            self.considered.append(c)

    def survivors(self) -> list[Candidate]:
        """Candidates past the floor that the gate did not drop, in the order they went on."""
        return [c for c in self.considered if c.row.chunk_id in self.passed and survives(self.outcomes[c.row.chunk_id])]

    def probability(self, c: Candidate) -> float | None:
        """The gate's calibrated relevance of a candidate taken in (None: not known, a model's verdict)."""
        outcome = self.outcomes.get(c.row.chunk_id)
        return None if outcome is None else probability_of(outcome)

    def is_evidence(self, c: Candidate) -> bool:
        """Whether a survivor clears the evidence threshold (one with no probability does)."""
        p = self.probability(c)
        return self.stop is None or p is None or p >= self.stop

    def evidence(self) -> list[Candidate]:
        """The survivors that clear the evidence threshold: what the package may carry."""
        return [c for c in self.survivors() if self.is_evidence(c)]

    def survived(self, cands: Iterable[Candidate]) -> int:
        """How many of ``cands`` (taken already) passed the floor and the gate."""
        return sum(1 for c in cands if c.row.chunk_id in self.passed and survives(self.outcomes[c.row.chunk_id]))

    def tokens(self) -> int:
        """What the evidence would cost in the package (a structural chunk at its first level)."""
        texts = dict(self.block(c) for c in self.evidence() if c.row.type != "topic")  # a hub is no block
        return sum(estimate_tokens(t) for t in texts.values())

    def block(self, c: Candidate) -> tuple[str, str]:
        """(exact key, block text at its first level) of a candidate, rendered once per query."""
        found = self._blocks.get(c.row.chunk_id)
        if found is None:
            text = block_content(c.row, self.query)[0]
            if c.row.type in STRUCTURAL_TYPES:
                lead, parts = transcript_content(c.row, self.query)
                text = pick_parts(lead, parts, 0)[0] if parts else first_level(text)
            found = self._blocks[c.row.chunk_id] = (duplicate_key(c.row), text)
        return found

    def has_read(self, conversation: str) -> bool:
        """Whether this query already read ``conversation``'s chunks."""
        return conversation in self._rows

    def conversation_rows(self, retriever: Retriever, conversations: set[str], include_archived: bool) -> list[Hit]:
        """Every chunk of ``conversations`` (one index read for those not read yet), by chunk id."""
        missing = sorted(c for c in conversations if c not in self._rows)
        if missing:
            for c in missing:
                self._rows[c] = []
            rows, links = retriever.read_conversations(missing, include_archived=include_archived)
            self._links.update(links)  # the superseded messages come with the rows
            self._linked.update(missing)
            for row in rows:
                self._rows.setdefault(row.source_conversation, []).append(row)
        return sorted((r for c in sorted(conversations) for r in self._rows[c]), key=lambda r: r.chunk_id)

    def start_superseded(self, retriever: Retriever, conversations: set[str], start: Starter) -> None:
        """Start the lookup of ``conversations``' superseded messages (those not known or being read)
        with ``start``, for a later ``superseded_messages`` to take."""
        running = {c for convs, _ in self._linking for c in convs}
        missing = sorted(c for c in conversations if c not in self._linked and c not in running)
        if missing:
            self._linking.append((missing, start(retriever.superseded_messages, missing)))

    def superseded_messages(self, retriever: Retriever, conversations: set[str]) -> dict[tuple[str, str], str]:
        """(conversation, message) -> superseded by, for ``conversations`` and any read before: one
        lookup for those whose rows this query did not read (and no lookup started for)."""
        for convs, lookup in self._linking:  # a conversation's links are the same from either read
            self._links.update(lookup.result())
            self._linked.update(convs)
        self._linking = []
        missing = sorted(c for c in conversations if c not in self._linked)
        if missing:
            self._links.update(retriever.superseded_messages(missing))
            self._linked.update(missing)
        return self._links


@dataclass(frozen=True)
class Judged:
    """What the judging stages hand on: the retrieval they walked, the pool, and their reports."""

    lanes: Lanes
    pool: Pool
    walk: Walk = field(default_factory=Walk)
