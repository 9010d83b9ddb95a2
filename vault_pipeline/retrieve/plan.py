"""Funnel stage 1, plan: the prompt's intent and the queries to run.

One ``decompose`` call gives the subject domain (the intent the gate judges against, unless the
user gave one) and up to four variants (concept, methodology, continuity, authority); the
original always runs too. A variant that only frames an earlier query's whole text runs no lanes
of its own (``searched``). A failed plan is no failed query: retrieval runs on the prompt alone,
and the package says it is degraded.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from vault_pipeline.errors import ModelError
from vault_pipeline.models.prompts import load_prompt
from vault_pipeline.retrieve.state import Query
from vault_pipeline.retrieve.types import QueryPlan


@dataclass(frozen=True)
class Planned:
    """The plan's result: the intent the gate judges against and the queries to run."""

    plan: QueryPlan | None  # None: no plan was needed, or it failed
    error: str | None  # why the plan failed ("model: reason"); the package says it is degraded
    intent: str
    intent_source: str  # "user" | "plan" | "query"
    queries: tuple[tuple[str, str], ...]  # (kind, text), the original first
    unsearched: frozenset[str]  # query texts that run no lanes of their own


def plan(q: Query) -> Planned:
    """Decompose the prompt (when the variants or the intent need it) and list the queries to run."""
    decomposed, error = None, None
    if _needs_plan(q):
        try:
            decomposed = q.tools.llm_plan.call(
                load_prompt("decompose"), {"query": q.text, "intent": q.user_intent or ""}, QueryPlan
            )
        except ModelError as exc:  # retrieval still runs on the original query alone
            error = f"{exc.model}: {exc.reason}"
    intent, source = _intent(q, decomposed)
    queries = _queries(q, decomposed)
    texts = [text for _, text in queries]
    unsearched = frozenset(text for text, run in zip(texts, searched(texts)) if not run)
    return Planned(decomposed, error, intent, source, tuple(queries), unsearched)


def _needs_plan(q: Query) -> bool:
    """Whether a ``decompose`` call is needed: for the variants, or for an intent the user did not give."""
    config = q.config
    return bool(config.variants and config.max_variants > 0) or not (q.user_intent or not config.gate_enabled)


def _intent(q: Query, decomposed: QueryPlan | None) -> tuple[str, str]:
    """(intent, where it came from): the user's, else the plan's, else the prompt itself."""
    if q.user_intent:
        return q.user_intent, "user"
    if decomposed is not None:
        return decomposed.intent, "plan"
    return q.text, "query"


def _queries(q: Query, decomposed: QueryPlan | None) -> list[tuple[str, str]]:
    """(kind, text) per query to run: the original first, then distinct variants."""
    queries = [("original", q.text)]
    if decomposed is None or not q.config.variants:
        return queries
    seen = {q.text.casefold()}
    for variant in decomposed.variants:
        if len(queries) > q.config.max_variants or variant.text.casefold() in seen:
            continue
        seen.add(variant.text.casefold())
        queries.append((variant.kind, variant.text))
    return queries


def searched(texts: Sequence[str]) -> list[bool]:
    """Which queries run lanes of their own: all but one that holds an earlier searched query's
    whole text inside more words. Such a variant is a frame around the same phrase (the offline
    planner's "facts and sources about <concept>"): its vector sits next to the phrase's and its
    extra words are the frame's, so its searches would repeat the phrase's
    (docs/decisions/0031-funnel-knobs.md)."""
    runs: list[bool] = []
    done: list[list[str]] = []
    for text in texts:
        words = text.casefold().split()
        framed = any(len(words) > len(w) and _holds(words, w) for w in done)
        runs.append(not framed)
        if not framed:
            done.append(words)
    return runs


def _holds(words: list[str], part: list[str]) -> bool:
    """Whether ``part`` occurs in ``words`` as a run of whole words."""
    n = len(part)
    return n > 0 and any(words[i : i + n] == part for i in range(len(words) - n + 1))
