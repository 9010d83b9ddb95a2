"""What every stage of the funnel shares: the query, its knobs and the collaborators.

Each stage is a function of the ``Query`` and the typed result of the stages before it, returning
its own (``funnel.STAGES``); nothing else passes between them. ``Query`` is never written.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from vault_pipeline.models.embed import Embedder
from vault_pipeline.models.protocol import StructuredLLM
from vault_pipeline.retrieve.gate import gate_of
from vault_pipeline.retrieve.types import FunnelConfig, Retriever


@dataclass(frozen=True)
class Tools:
    """The funnel's collaborators: the index, the embedder, the planning and the gate models."""

    retriever: Retriever
    embedder: Embedder
    llm_plan: StructuredLLM
    llm_gate: StructuredLLM


@dataclass(frozen=True)
class Query:
    """One query as every stage reads it: the prompt (whitespace folded), the knobs, the tools, and
    what the caller gave beside the prompt."""

    text: str
    config: FunnelConfig
    tools: Tools
    user_intent: str | None = None  # the intent the user gave (None: the plan's, else the prompt)
    reference_date: str | datetime | None = None  # recency's "now" (None: the newest candidate's date)


def evidence_threshold(config: FunnelConfig, gate: StructuredLLM) -> float | None:
    """The probability a block needs to enter a package: the config's, else the offline gate's own
    (``Gate.stop``); None when no calibrated probability exists (the gate off, or a model gate,
    whose keep is its judgement)."""
    stop = gate_of(gate).stop if config.gate_enabled else None
    if stop is None:
        return None
    return config.stop if config.stop is not None else stop
