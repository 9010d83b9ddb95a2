"""The retrieval funnel: a query in, a ContextPackage out, through a list of stages.

Each stage is a function of the ``Query`` (``state.py``: the prompt, the knobs, the tools, never
written) and the typed result of an earlier stage, returning its own (``STAGES``, in order):

1. ``plan``: ``Query -> Planned``, the intent and up to four variants of the prompt (``plan.py``);
2. ``retrieve``: ``Planned -> Lanes``, the vector and full-text lanes of every query, fused;
   ``find_absent``: ``Lanes -> Absent``, the prompt's words that no note holds (``lanes.py``);
3. ``deepen``: ``Lanes -> Judged``, the fused candidates go on in widening steps through the cosine
   floor and the fit-gate until the survivors fill the budget (``deepen.py``, ``judge.py``,
   ``gate.py``; the ``Judged`` and its ``Pool`` in ``pool.py``);
4. ``feedback`` and ``hop``: ``Judged -> Judged``, associative recall, through the same floor and
   gate (``hop.py``);
5. ``whole_turns`` and ``drop_superseded``: ``Judged -> Judged``, whole turns in place of several
   of their notes, and no turn a superseded note cites (``consolidate.py``);
6. ``rank_survivors``: ``Judged -> Ranked``, the survivors that clear the evidence threshold, by
   similarity x tier weight x recency, then exact duplicates and notes a verbatim turn shows
   collapse (``rank.py``); ``judge_found``: ``Ranked, Absent -> Verdict``, whether the vault holds
   anything on the prompt at all (``evidence.py``);
7. ``assemble_package``: ``Verdict, Absent -> ContextPackage``, the token-cap backstop and the
   tiered budget (``package.py``), with the stats and the per-candidate trace (``trace.py``).

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
from vault_pipeline.retrieve.evidence import CLOSEST_TOKENS, Verdict, judge_found
from vault_pipeline.retrieve.gate import FailOpen
from vault_pipeline.retrieve.hop import feedback, hop
from vault_pipeline.retrieve.lanes import Absent, find_absent, retrieve
from vault_pipeline.retrieve.markdown import markdown_head, notices
from vault_pipeline.retrieve.metering import token_counter
from vault_pipeline.retrieve.package import Assembly, ContextPackage, assemble, hard_cap
from vault_pipeline.retrieve.plan import plan
from vault_pipeline.retrieve.rank import rank_survivors, selection
from vault_pipeline.retrieve.reports import degraded_line
from vault_pipeline.retrieve.state import Query, Tools
from vault_pipeline.retrieve.trace import build_package
from vault_pipeline.retrieve.types import FunnelConfig, Retriever


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
    text = " ".join(query.split())
    if not text:
        raise ConfigError("empty query")
    q = Query(
        text=text,
        config=config or FunnelConfig(),
        tools=Tools(retriever, embedder, llm_plan, llm_gate),
        user_intent=" ".join((intent or "").split()) or None,
        reference_date=reference_date,
    )
    # Each stage gets the query and the results it declares, nothing else (``STAGES``).
    planned = plan(q)
    lanes = retrieve(q, planned)
    absent = find_absent(q, lanes)
    judged = deepen(q, lanes)
    judged = feedback(q, judged)
    judged = hop(q, judged)
    judged = whole_turns(q, judged)
    judged = drop_superseded(q, judged)
    ranked = rank_survivors(q, judged)
    verdict = judge_found(q, ranked, absent)
    return assemble_package(q, verdict, absent)


def assemble_package(q: Query, verdict: Verdict, absent: Absent) -> ContextPackage:
    """Fit the ranked evidence into the budget, counted as the Markdown returns it (title, notices,
    blocks and references), and account for every candidate. Evidence none of whose blocks fits
    is no package: it is not ``found``, and says the budget that would hold a block."""
    config, ranked = q.config, verdict.ranked
    failed = [o for o in ranked.judged.pool.outcomes.values() if isinstance(o, FailOpen)]
    degraded = degraded_line(len(failed), failed[0].error if failed else None, ranked.judged.lanes.planned.error)
    lines = notices(found=verdict.found, closest=verdict.closest, degraded=degraded, absent_words=absent.words)
    chosen = selection(ranked.ranked, q.text)
    counter = token_counter(config.tokenizer)
    cap = hard_cap(config.window, config.window_share)

    def fit(budget: int) -> Assembly:
        return assemble(
            chosen,
            budget=budget,
            window=config.window,
            window_share=config.window_share,
            head=markdown_head(q.text, lines, min(budget, cap)),
            structured=config.structured,
            counter=counter,
        )

    budget = min(config.budget, CLOSEST_TOKENS) if verdict.closest else config.budget
    assembly = fit(budget)
    needed = 0
    if verdict.found and not assembly.blocks and assembly.dropped:
        needed = _budget_needed(fit, budget, cap)
    return build_package(q, verdict, absent, assembly, needed)


# The stages in the order ``run_query`` runs them: each takes the ``Query`` and the results of
# earlier stages its signature names (``tests/retrieve/test_stages.py`` holds both to that).
STAGES: tuple[Callable[..., object], ...] = (
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
    assemble_package,
)


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
