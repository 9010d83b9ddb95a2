"""Funnel stage 1, plan: the prompt's intent and the queries to run.

One ``decompose`` call gives the subject domain (the intent the gate judges against, unless the
user gave one) and up to four variants (concept, methodology, continuity, authority); the
original always runs too. A variant that only frames an earlier query's whole text runs no lanes
of its own (``searched``). A failed plan is no failed query: retrieval runs on the prompt alone,
and the package says it is degraded.
"""

from __future__ import annotations

from collections.abc import Sequence

from vault_pipeline.errors import ModelError
from vault_pipeline.models.prompts import load_prompt
from vault_pipeline.retrieve.state import FunnelState
from vault_pipeline.retrieve.types import QueryPlan


def plan(state: FunnelState) -> FunnelState:
    """Decompose the prompt (when the variants or the intent need it) and list the queries to run."""
    if _needs_plan(state):
        try:
            state.plan = state.tools.llm_plan.call(
                load_prompt("decompose"), {"query": state.query, "intent": state.user_intent or ""}, QueryPlan
            )
        except ModelError as exc:  # retrieval still runs on the original query alone
            state.plan_error = f"{exc.model}: {exc.reason}"
    state.intent, state.intent_source = _intent(state)
    state.queries = _queries(state)
    texts = [text for _, text in state.queries]
    state.unsearched = {text for text, run in zip(texts, searched(texts)) if not run}
    return state


def _needs_plan(state: FunnelState) -> bool:
    """Whether a ``decompose`` call is needed: for the variants, or for an intent the user did not give."""
    config = state.config
    return bool(config.variants and config.max_variants > 0) or not (state.user_intent or not config.gate_enabled)


def _intent(state: FunnelState) -> tuple[str, str]:
    """(intent, where it came from): the user's, else the plan's, else the prompt itself."""
    if state.user_intent:
        return state.user_intent, "user"
    if state.plan is not None:
        return state.plan.intent, "plan"
    return state.query, "query"


def _queries(state: FunnelState) -> list[tuple[str, str]]:
    """(kind, text) per query to run: the original first, then distinct variants."""
    queries = [("original", state.query)]
    if state.plan is None or not state.config.variants:
        return queries
    seen = {state.query.casefold()}
    for variant in state.plan.variants:
        if len(queries) > state.config.max_variants or variant.text.casefold() in seen:
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
