"""The funnel's own types: its configuration, what it reads from the index, what it decides.

Every other module of ``retrieve/`` reads these; this module imports only the gate's outcome
types (``gate.py`` needs nothing of the funnel), the embedders' calibration and the settings.
The order inside ``retrieve/``: gate <- types <- package <- rank, trace <- funnel; calibrate
reads gate, types and metering. No module imports a later one, not even for type hints.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol, runtime_checkable

import numpy as np

from vault_pipeline.config import Settings
from vault_pipeline.errors import ConfigError
from vault_pipeline.models.embed import MINILM_CALIBRATION, Embedder, calibration_of
from vault_pipeline.retrieve.gate import GateOutcome

MAX_VARIANTS = 4


@dataclass(frozen=True)
class FunnelConfig:
    """Every knob of the funnel; the defaults are the offline MiniLM calibration."""

    variants: bool = True
    max_variants: int = MAX_VARIANTS
    wide: int = 15
    per_list: int | None = None  # hits per lane and query; None means ``wide``
    floor: float = MINILM_CALIBRATION.floor
    gate: bool = True
    gate_batch: int = 10  # candidates per gate call (LlamaIndex's LLMRerank judges 10 per call)
    gate_timeout: float = 30.0  # seconds for the whole gate stage; late batches fail open
    gate_chars: int = 1200  # candidate text shown to the small gate model
    half_life_days: float = 30.0
    # Seed 001: recency is a small weight that breaks ties without overriding relevance;
    # a chat chunk's score can lose at most this share however old it is.
    recency_weight: float = 0.15
    budget: int = 2000
    window: int = 8000
    max_fraction: float = 0.78  # a quarter of the window stays free for the model's answer
    include_archived: bool = False

    def __post_init__(self) -> None:
        checks = [
            (0 <= self.max_variants <= MAX_VARIANTS, f"max_variants must be 0-{MAX_VARIANTS}"),
            (self.wide >= 1, "wide must be at least 1"),
            (self.gate_batch >= 1, "gate_batch must be at least 1"),
            (self.gate_timeout > 0, "gate_timeout must be positive"),
            (self.half_life_days > 0, "half_life_days must be positive"),
            (0 <= self.recency_weight <= 1, "recency_weight must be within 0-1"),
            (self.budget >= 1 and self.window >= 1, "budget and window must be positive"),
            (0 < self.max_fraction <= 1, "max_fraction must be within (0, 1]"),
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
        values: dict[str, Any] = {
            "wide": settings.wide,
            "budget": settings.budget,
            "window": settings.window,
            "variants": settings.variants,
            "gate": settings.gate_enabled,
        }
        if settings.floor is not None:
            values["floor"] = settings.floor
        elif embedder is not None:
            values["floor"] = calibration_of(embedder).floor
        return cls(**{**values, **overrides})

    @property
    def k(self) -> int:
        """Hits requested per lane and query."""
        return self.per_list or self.wide


# --------------------------------------------------------------------------- what the index gives


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
    def source_conversation(self) -> str: ...

    @property
    def source_messages(self) -> str: ...

    @property
    def heading(self) -> str: ...

    @property
    def text(self) -> str: ...

    @property
    def similarity(self) -> float: ...

    @property
    def lane(self) -> str: ...


@runtime_checkable
class StoredVector(Protocol):
    """A hit that may carry its stored unit vector (``index.Row`` does when asked for it)."""

    vector: np.ndarray | None


class Retriever(Protocol):
    """The two index lanes the funnel needs (``index.Index`` satisfies it)."""

    def vector_search(self, vector: np.ndarray, k: int, *, include_archived: bool = False) -> Sequence[Hit]:
        """Nearest chunks to a query vector."""
        ...

    def text_search(
        self, query: str, k: int, *, include_archived: bool = False, vector: np.ndarray | None = None
    ) -> Sequence[Hit]:
        """Full-text matches; ``vector`` lets the index fill in each hit's cosine similarity."""
        ...


@runtime_checkable
class MultiVectorRetriever(Protocol):
    """A retriever that answers several query vectors in one table query; the funnel then asks once."""

    def vector_search_many(
        self, vectors: np.ndarray, k: int, *, include_archived: bool = False
    ) -> Sequence[Sequence[Hit]]:
        """One list of nearest chunks per row of ``vectors``."""
        ...


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


@dataclass
class FunnelRun:
    """Everything the funnel decided, handed to ``trace.build_package`` for stats and trace."""

    query: str
    intent: str
    intent_source: str
    queries: list[tuple[str, str]]
    fused: list[Candidate]  # every fused candidate; the first ``config.wide`` went on
    floor_passed: set[str]
    outcomes: dict[str, GateOutcome]
    ranked: list[Scored]
    collapsed: dict[str, str]
    reference: datetime | None
    plan_error: str | None
    models: dict[str, str]
    config: FunnelConfig
