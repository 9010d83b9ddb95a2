"""The funnel's own types: its configuration, what it reads from the index, what it decides.

Every other module of ``retrieve/`` reads these; this module imports only the gate's outcome
types, the embedders' calibration and the settings. ``Retriever`` is everything the funnel asks
of the index: ``index.Index`` implements it, and the test fake (``tests/fakes.py``) does too.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import numpy as np
from pydantic import BaseModel, Field, field_validator

from vault_pipeline.config import Settings, funnel_values
from vault_pipeline.errors import ConfigError
from vault_pipeline.models.embed import MINILM_CALIBRATION, Embedder, calibration_of
from vault_pipeline.retrieve.metering import DEFAULT_TOKENIZER, TOKENIZERS, tokenizer_for

MAX_VARIANTS = 4
# Hits per lane and query when the depth walks by budget: ten lists of 20 give the walk 60-120
# fused candidates (docs/decisions/0031-funnel-knobs.md).
DEEP_LIST = 20


@dataclass(frozen=True)
class FunnelConfig:
    """Every knob of the funnel. Those a user may tune come from ``config.Settings`` (their defaults
    are the schema's); the rest are the funnel's own, measured in docs/decisions/0031-funnel-knobs.md.
    The floor's default is the offline MiniLM calibration."""

    variants: bool = Settings.variants
    max_variants: int = MAX_VARIANTS
    wide: int = Settings.wide  # the first widening step: candidates that go on to the floor and gate first
    per_list: int | None = None  # hits per lane and query; None: ``wide``, or DEEP_LIST when adaptive
    # Depth by budget: widen (doubling) until the gate's survivors fill the budget, the next
    # candidates all fall below the floor, or ``max_candidates`` candidates went on. False: ``wide`` only.
    adaptive: bool = True
    max_candidates: int = Settings.max_candidates
    fill: float = 1.0  # the walk stops once the survivors carry fill x budget tokens (room for the rank)
    # Associative recall (one hop, deterministic): the neighbouring turns of the sessions of the
    # ``beam`` survivors the lanes rank highest (``radius`` turns either side) join, through the same
    # floor and gate.
    beam: int = 4
    radius: int = 2
    # The ``turns`` strongest survivors' own turns enter verbatim when they carry what their notes lack.
    turns: int = 10
    # Adjacency pairs: the ``replies`` strongest survivors that ask a question (beyond the beam) and
    # hold one of the prompt's or the intent's content terms bring the next turn of their session,
    # the one that answers them; 0 turns it off.
    replies: int = 10
    # Small-to-big: a turn two or more of whose notes survive replaces them when it costs at most
    # ``whole_turn_cost`` times their tokens together (the rest of the turn rides along cheaply).
    whole_turns: bool = True
    whole_turn_cost: float = 1.5
    # Pseudo-relevance feedback: when fewer than ``feedback_below`` candidates survive, the kept
    # notes' most frequent content words (up to ``feedback_terms``) widen the query once.
    feedback_below: int = 3
    feedback_terms: int = 5
    floor: float = MINILM_CALIBRATION.floor
    # Depth follows the evidence: a survivor whose calibrated relevance (the fitted gate's
    # probability) is below ``stop`` is no block; None: the fitted gate's own threshold.
    stop: float | None = None
    gate_enabled: bool = Settings.gate_enabled
    gate_batch: int = Settings.gate_batch  # candidates per gate call
    gate_timeout: float = Settings.gate_timeout  # seconds for the whole gate stage; late batches fail open
    gate_text_chars: int = Settings.gate_text_chars  # candidate text shown to the gate model
    recency_half_life_days: float = Settings.recency_half_life_days
    # Recency is a small weight that breaks ties without overriding relevance: a chat chunk's
    # score can lose at most this share however old it is.
    recency_weight: float = Settings.recency_weight
    budget: int = Settings.budget
    window: int = Settings.window
    window_share: float = Settings.window_share  # the rest of the window stays free for the model's answer
    include_archived: bool = False
    # The package goes back over MCP: the structured result's entries count against the budget too.
    structured: bool = False
    # What the budget and a package's ``tokens`` count by (``metering.TOKENIZERS``); ``from_settings``
    # takes the extraction model's family.
    tokenizer: str = DEFAULT_TOKENIZER

    def __post_init__(self) -> None:
        checks = [
            (0 <= self.max_variants <= MAX_VARIANTS, f"max_variants must be 0-{MAX_VARIANTS}"),
            (self.wide >= 1, "wide must be at least 1"),
            (
                self.max_candidates >= 1
                and min(self.beam, self.radius, self.turns, self.replies) >= 0
                and self.whole_turn_cost > 0,
                "max_candidates, beam, radius, turns, replies and whole_turn_cost out of range",
            ),
            (self.fill > 0, "fill must be positive"),
            (self.stop is None or 0 <= self.stop <= 1, "stop must be within 0-1"),
            (self.feedback_below >= 0 and self.feedback_terms >= 0, "feedback settings must not be negative"),
            (self.gate_batch >= 1, "gate_batch must be at least 1"),
            (self.gate_timeout > 0, "gate_timeout must be positive"),
            (self.recency_half_life_days > 0, "recency_half_life_days must be positive"),
            (0 <= self.recency_weight <= 1, "recency_weight must be within 0-1"),
            (self.budget >= 1 and self.window >= 1, "budget and window must be positive"),
            (0 < self.window_share <= 1, "window_share must be within (0, 1]"),
            (self.tokenizer in TOKENIZERS, f"tokenizer must be one of {', '.join(TOKENIZERS)}"),
        ]
        for ok, message in checks:
            if not ok:
                raise ConfigError(f"funnel config: {message}")

    @classmethod
    def from_settings(cls, settings: Settings, embedder: Embedder | None = None, **overrides: Any) -> FunnelConfig:
        """The config from ``config.Settings`` ([retrieval] in vault.toml); overrides win.

        The floor is the one vault.toml (or ``VAULT_FLOOR``) sets; unset, it is ``embedder``'s
        calibration (without an embedder, the MiniLM default).
        """
        values = funnel_values(settings) | {"tokenizer": tokenizer_for(settings.extract_model)}
        if settings.floor is not None:
            values["floor"] = settings.floor
        elif embedder is not None:
            values["floor"] = calibration_of(embedder).floor
        return cls(**{**values, **overrides})

    @property
    def k(self) -> int:
        """Hits requested per lane and query."""
        if self.per_list:
            return self.per_list
        return max(self.wide, DEEP_LIST) if self.adaptive else self.wide


# --------------------------------------------------------------------------- what the index gives


# The index columns the funnel reads: ``Hit``'s fields, and ``speaker`` for an atomic note's block
# (``blocks.block_content``). ``pipeline.query`` opens the index with these only: a LanceDB read costs
# per column.
QUERY_COLUMNS = (
    "chunk_id",
    "note_id",
    "path",
    "type",
    "tier",
    "speaker",
    "created",
    "source_kind",
    "source_conversation",
    "source_messages",
    "heading",
    "text",
    "source_position",
)


class Hit(Protocol):
    """The row shape the funnel reads (``index.Row`` satisfies it); read-only, as a frozen row is."""

    @property
    def chunk_id(self) -> str: ...

    @property
    def note_id(self) -> str: ...

    @property
    def path(self) -> str: ...

    @property
    def type(self) -> str: ...

    @property
    def tier(self) -> str: ...

    @property
    def created(self) -> str: ...

    @property
    def source_kind(self) -> str: ...

    @property
    def source_conversation(self) -> str: ...

    @property
    def source_messages(self) -> str: ...

    @property
    def heading(self) -> str: ...

    @property
    def text(self) -> str: ...

    @property
    def source_position(self) -> int: ...

    @property
    def similarity(self) -> float: ...

    @property
    def lane(self) -> str: ...


Lists = tuple[Sequence[Sequence[Hit]], Sequence[Sequence[Hit]]]  # (vector hits, full-text hits) per query


class PendingSearch(Protocol):
    """Both lanes of several queries, started: the full-text lane runs while the funnel embeds."""

    def finish(self, vectors: np.ndarray) -> Lists:
        """Run the vector lane with the queries' unit vectors (one row a query) and return both lanes."""
        ...

    def cancel(self) -> None:
        """Give up: the searches still queued need not run."""
        ...


class Retriever(Protocol):
    """Everything the funnel reads from the index (``index.Index`` implements it)."""

    def start_search(self, texts: Sequence[str], k: int, *, include_archived: bool = False) -> PendingSearch:
        """Start the ``k`` best of both lanes for each query text (full text starts now)."""
        ...

    def read_conversations(
        self, conversations: Sequence[str], *, include_archived: bool = False
    ) -> tuple[Sequence[Hit], Mapping[tuple[str, str], str]]:
        """Every chunk of ``conversations``, with stored vectors, sorted by chunk id; and (conversation,
        message) -> the link to the note that superseded a note citing that message."""
        ...

    def superseded_messages(self, conversations: Sequence[str]) -> Mapping[tuple[str, str], str]:
        """The second half of ``read_conversations`` alone."""
        ...

    def rows_by_stem(self, stems: Sequence[str], *, include_archived: bool = False) -> Sequence[Hit]:
        """Every chunk of the notes with these file names (a topic hub's links), with stored vectors."""
        ...

    def related_stems(self, paths: Sequence[str]) -> Mapping[str, list[str]]:
        """Vault-relative note path -> the file names (without ``.md``) its ``related`` property links to."""
        ...

    def unknown_words(self, words: Sequence[str]) -> list[str]:
        """Those of ``words`` that no chunk's text holds."""
        ...


# --------------------------------------------------------------------------- the plan


VariantKind = Literal["concept", "methodology", "continuity", "authority"]


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


# --------------------------------------------------------------------------- what the funnel decides


@dataclass(frozen=True)
class Candidate:
    """One fused candidate: its row, RRF score, who found it, and cosine to the original query."""

    row: Hit
    rrf: float
    lanes: tuple[str, ...]
    variants: tuple[str, ...]
    similarity: float

    @property
    def key(self) -> tuple[str, str]:
        """Identity used for tie-breaks: note id, then chunk id."""
        return (self.row.note_id, self.row.chunk_id)


@dataclass(frozen=True)
class Scored:
    """A gate survivor with its provenance score."""

    candidate: Candidate
    score: float
    recency: float
