"""The floor and the fit-gate, as every stage that takes candidates in applies them.

A candidate below the cosine floor against the original query is dropped (a noise backstop);
the fit-gate (``gate.py``) keeps or drops each one past it against the intent. The depth walk,
the feedback and the one hop all take their candidates in through ``judge``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from vault_pipeline.models.embed import Embedder, embed_rows
from vault_pipeline.retrieve.gate import GateClock, GateOutcome, Skipped, gate_rows, reads_signals
from vault_pipeline.retrieve.pool import Judged
from vault_pipeline.retrieve.signals import chat_of
from vault_pipeline.retrieve.state import Query
from vault_pipeline.retrieve.types import Candidate, Hit


def judge(q: Query, judged: Judged, cands: list[Candidate]) -> int:
    """Floor and gate ``cands`` (their cosine to the original query filled in) into the pool;
    returns how many passed the floor."""
    cands = with_original_similarity(cands, judged.lanes.qvec, q.tools.embedder)
    passed = {c.row.chunk_id for c in cands if c.similarity >= q.config.floor}
    judged.pool.passed |= passed
    judged.pool.add(cands, _gate(q, judged, cands, passed))
    return len(passed)


def _gate(q: Query, judged: Judged, cands: list[Candidate], passed: set[str]) -> dict[str, GateOutcome]:
    """Gate outcome per chunk id; floor-dropped candidates and a disabled gate are ``Skipped``."""
    config, pool = q.config, judged.pool
    outcomes: dict[str, GateOutcome] = {}
    for c in cands:
        if c.row.chunk_id not in passed:
            outcomes[c.row.chunk_id] = Skipped(f"similarity {c.similarity:.3f} below floor {config.floor:.2f}")
        elif not config.gate_enabled:
            outcomes[c.row.chunk_id] = Skipped("gate disabled")
    going = [c for c in cands if c.row.chunk_id in passed]
    if config.gate_enabled and going:
        # One deadline for the query's every gate call, from its first (``gate_timeout``).
        pool.clock = pool.clock or GateClock.starting(config.gate_timeout)
        outcomes.update(
            gate_rows(
                [(c.row.chunk_id, c.row.path, c.row.heading or "", c.row.text) for c in going],
                llm=q.tools.llm_gate,
                intent=judged.lanes.planned.intent,
                query=q.text,
                batch_size=config.gate_batch,
                timeout=config.gate_timeout,
                text_chars=config.gate_text_chars,
                clock=pool.clock,
                **(_signal_inputs(q, judged, going) if reads_signals(q.tools.llm_gate) else {}),
            )
        )
    return outcomes


def _signal_inputs(q: Query, judged: Judged, going: Sequence[Candidate]) -> dict[str, Any]:
    """What the offline gate's signals read that the funnel has already: the embedder, the other
    queries, the query vectors, each candidate's stored vector and the chats of the candidates."""
    pool = judged.pool
    return {
        "embedder": q.tools.embedder,
        "variants": [text for kind, text in judged.lanes.planned.queries if kind != "original"],
        "vectors": {c.row.chunk_id: vector for c in going if (vector := stored_vector(c.row)) is not None},
        "query_vectors": judged.lanes.vectors,
        "conversations": {c.row.chunk_id: chat_of(c.row.source_kind, c.row.source_conversation) for c in going},
        # The candidates that passed earlier steps (``judge`` takes this step's in after the gate).
        "context": [
            chat_of(c.row.source_kind, c.row.source_conversation)
            for c in pool.considered
            if c.row.chunk_id in pool.passed
        ],
    }


def stored_vector(row: Hit) -> np.ndarray | None:
    """The stored unit vector a hit carries (``index.Row`` does when asked for it), else None: an
    attribute read, as a runtime-checkable Protocol's ``isinstance`` costs microseconds a row."""
    return getattr(row, "vector", None)


def with_original_similarity(cands: list[Candidate], qvec: np.ndarray, embedder: Embedder) -> list[Candidate]:
    """Candidates found only by full text or by a variant have no cosine to the original query yet."""
    out = list(cands)
    missing = []
    for i, c in enumerate(cands):
        if not math.isnan(c.similarity):
            continue
        stored = stored_vector(c.row)
        if stored is not None:  # the stored (unit) vector gives the cosine without embedding again,
            # in float64 like the index's own vector lane, so both lanes report the same number.
            out[i] = replace(c, similarity=float(np.asarray(stored, np.float64) @ qvec.astype(np.float64)))
        else:
            missing.append(i)
    if missing:
        # The index embeds ``embedding_text(row.text)``, so this is the cosine its vector lane would report.
        vecs = embed_rows(embedder, [cands[i].row.text for i in missing])
        for i, vec in zip(missing, vecs):
            out[i] = replace(out[i], similarity=float(np.dot(vec, qvec)))
    return out
