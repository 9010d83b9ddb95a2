"""The retrieval funnel: a query in, a ContextPackage out, through a list of stages.

Each stage is a function ``(FunnelState) -> FunnelState`` (``state.Stage``) that reads what the
earlier ones left, adds its part and appends its report to the state's trace:

1. ``plan``: the intent and up to four variants of the prompt (``plan.py``);
2. ``retrieve``: the vector and full-text lanes of every query, fused (``lanes.py``);
   ``find_absent``: the prompt's words that no note holds;
3. ``deepen``: the fused candidates go on in widening steps through the cosine floor and the
   fit-gate until the survivors fill the budget (``deepen.py``, ``judge.py``, ``gate.py``);
4. ``feedback`` and ``hop``: associative recall, through the same floor and gate (``hop.py``);
5. ``whole_turns`` and ``drop_superseded``: whole turns in place of several of their notes, and
   no turn a superseded note cites (``consolidate.py``);
6. ``rank_survivors``: the survivors that clear the evidence threshold, by similarity x tier
   weight x recency, then exact duplicates and notes a verbatim turn shows collapse (``rank.py``);
   ``judge_found``: whether the vault holds anything on the prompt at all (``evidence.py``);
7. assembly: the token-cap backstop and the tiered budget (``package.py``), with the stats and
   the per-candidate trace (``trace.py``).

Each knob is in ``FunnelConfig``; the ones a user may tune are in ``vault.toml``.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from vault_pipeline.errors import ConfigError
from vault_pipeline.models.embed import Embedder
from vault_pipeline.models.protocol import StructuredLLM
from vault_pipeline.retrieve.consolidate import drop_superseded, whole_turns
from vault_pipeline.retrieve.deepen import deepen
from vault_pipeline.retrieve.evidence import CLOSEST_TOKENS, judge_found
from vault_pipeline.retrieve.gate import FailOpen
from vault_pipeline.retrieve.hop import feedback, hop
from vault_pipeline.retrieve.lanes import find_absent, retrieve
from vault_pipeline.retrieve.markdown import markdown_head, notices
from vault_pipeline.retrieve.metering import token_counter
from vault_pipeline.retrieve.package import Assembly, ContextPackage, assemble, hard_cap
from vault_pipeline.retrieve.plan import plan
from vault_pipeline.retrieve.rank import covered, dedup, rank, reference_time, selection
from vault_pipeline.retrieve.reports import degraded_line
from vault_pipeline.retrieve.state import FunnelState, Stage, Tools
from vault_pipeline.retrieve.trace import build_package
from vault_pipeline.retrieve.types import FunnelConfig, Retriever


def rank_survivors(state: FunnelState) -> FunnelState:
    """Rank the survivors that clear the evidence threshold, gate first, and collapse exact duplicates
    and notes a verbatim turn shows. Those below the threshold are no block (``state.below``)."""
    state.reference = reference_time(state.pool.considered, state.reference_date)
    survivors = state.pool.evidence()
    state.below = [c for c in state.pool.survivors() if not state.pool.is_evidence(c)]
    if state.config.adaptive:  # a topic hub is a list of links: its members went on in the hop; it is no block
        survivors = [c for c in survivors if c.row.type != "topic"]
    state.ranked, state.collapsed = covered(*dedup(rank(survivors, state.reference, state.config)))
    return state


STAGES: tuple[Stage, ...] = (
    plan,
    retrieve,
    find_absent,
    deepen,
    feedback,
    hop,
    whole_turns,
    drop_superseded,
    rank_survivors,
    judge_found,
)


def run_query(
    query: str,
    *,
    retriever: Retriever,
    embedder: Embedder,
    llm_plan: StructuredLLM,
    llm_gate: StructuredLLM,
    config: FunnelConfig | None = None,
    intent: str | None = None,
    reference_date: str | datetime | None = None,
) -> ContextPackage:
    """Run the whole funnel for ``query`` and return the cited, budgeted context package."""
    query = " ".join(query.split())
    if not query:
        raise ConfigError("empty query")
    state = FunnelState(
        query=query,
        config=config or FunnelConfig(),
        tools=Tools(retriever, embedder, llm_plan, llm_gate),
        user_intent=" ".join((intent or "").split()) or None,
        reference_date=reference_date,
    )
    for stage in STAGES:
        state = stage(state)
    return assemble_package(state)


def assemble_package(state: FunnelState) -> ContextPackage:
    """Fit the ranked evidence into the budget, counted as the Markdown returns it (title, notices,
    blocks and references), and account for every candidate. Evidence none of whose blocks fits
    is no package: it is not ``found``, and says the budget that would hold a block."""
    config = state.config
    failed = [o for o in state.pool.outcomes.values() if isinstance(o, FailOpen)]
    degraded = degraded_line(len(failed), failed[0].error if failed else None, state.plan_error)
    lines = notices(found=state.found, closest=state.closest, degraded=degraded, absent_words=state.absent_words)
    chosen = selection(state.ranked, state.query)
    counter = token_counter(config.tokenizer)
    cap = hard_cap(config.window, config.window_share)

    def fit(budget: int) -> Assembly:
        return assemble(
            chosen,
            budget=budget,
            window=config.window,
            window_share=config.window_share,
            head=markdown_head(state.query, lines, min(budget, cap)),
            structured=config.structured,
            counter=counter,
        )

    budget = min(config.budget, CLOSEST_TOKENS) if state.closest else config.budget
    assembly = fit(budget)
    needed = 0
    if state.found and not assembly.blocks and assembly.dropped:
        needed = _budget_needed(fit, budget, cap)
    return build_package(state, assembly, needed)


def _budget_needed(fit: Callable[[int], Assembly], budget: int, cap: int) -> int:
    """The smallest budget above ``budget`` whose package holds a block (0: none up to ``cap``, the
    model window's share, which binds whatever the budget)."""
    if budget >= cap:
        return 0
    low, high = budget, min(max(2 * budget, budget + 1), cap)
    while not fit(high).blocks:
        if high >= cap:
            return 0
        low, high = high, min(2 * high, cap)
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (low, middle) if fit(middle).blocks else (middle, high)
    return high
