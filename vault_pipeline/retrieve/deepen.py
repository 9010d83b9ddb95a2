"""Funnel stage 3, deepen: retrieve wider by budget, through the floor and the gate.

The fused candidates go on in widening steps (``wide``, then doubling) until the evidence (the
survivors that clear the evidence threshold, ``Pool.evidence``) carries the budget, a step brings
no new evidence or all its candidates fall below the floor, the fused list runs out, or
``max_candidates`` candidates went on. With ``adaptive`` off, ``wide`` candidates go on and no more.
"""

from __future__ import annotations

from dataclasses import replace

from vault_pipeline.retrieve.judge import judge
from vault_pipeline.retrieve.lanes import Lanes
from vault_pipeline.retrieve.pool import Judged, Pool
from vault_pipeline.retrieve.reports import DepthReport
from vault_pipeline.retrieve.state import Query, evidence_threshold
from vault_pipeline.retrieve.types import FunnelConfig


def deepen(q: Query, lanes: Lanes) -> Judged:
    """Widen through the fused list and report how deep it went and why it stopped."""
    config, fused = q.config, lanes.fused
    judged = Judged(lanes, Pool(q.text, evidence_threshold(config, q.tools.llm_gate)))
    pool = judged.pool
    steps: list[int] = []
    depth, step, stopped, tokens = 0, config.wide, "", 0
    limit = max(config.max_candidates, config.wide) if config.adaptive else config.wide
    while not stopped:
        take = list(fused[depth : min(depth + step, limit)])
        before = len(pool.evidence())
        passed = judge(q, judged, take)
        depth += len(take)
        steps.append(depth)
        tokens = pool.tokens()
        stopped = _stop(config, tokens, len(take), passed, depth, len(fused), limit)
        if not stopped and len(steps) > 1 and len(pool.evidence()) == before:
            stopped = (
                f"evidence fell off: none of candidates {depth - len(take) + 1}-{depth} cleared the evidence threshold"
            )
        step = depth
    return replace(judged, walk=replace(judged.walk, depth=DepthReport(depth, tuple(steps), stopped, tokens)))


def _stop(config: FunnelConfig, tokens: int, taken: int, passed: int, depth: int, fused: int, limit: int) -> str:
    """Why the walk stops after this step ("" : it goes on)."""
    if not config.adaptive:
        return f"fixed depth: wide {config.wide}"
    if tokens >= config.fill * config.budget:
        return f"budget filled: the evidence carries {tokens} tokens, the budget is {config.budget}"
    if taken and not passed:
        return f"scores fell off: none of candidates {depth - taken + 1}-{depth} reached the floor"
    if depth >= fused:
        return f"candidates exhausted: all {fused} fused candidates went on"
    if depth >= limit:
        return f"max_candidates reached: {limit} candidates"
    return ""
