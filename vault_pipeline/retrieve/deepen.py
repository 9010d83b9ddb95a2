"""Funnel stage 3, deepen: retrieve wider by budget, through the floor and the gate.

The fused candidates go on in widening steps (``wide``, then doubling) until the evidence (the
survivors that clear the evidence threshold, ``Pool.evidence``) carries the budget, a step brings
no new evidence or all its candidates fall below the floor, the fused list runs out, or
``max_candidates`` candidates went on. With ``adaptive`` off, ``wide`` candidates go on and no more.
"""

from __future__ import annotations

from vault_pipeline.retrieve.judge import judge
from vault_pipeline.retrieve.reports import DepthReport
from vault_pipeline.retrieve.state import FunnelState
from vault_pipeline.retrieve.types import FunnelConfig


def deepen(state: FunnelState) -> FunnelState:
    """Widen through the fused list and report how deep it went and why it stopped."""
    config, fused = state.config, state.fused
    steps: list[int] = []
    depth, step, stopped, tokens = 0, config.wide, "", 0
    limit = max(config.max_candidates, config.wide) if config.adaptive else config.wide
    while not stopped:
        take = fused[depth : min(depth + step, limit)]
        before = len(state.pool.evidence())
        passed = judge(state, take)
        depth += len(take)
        steps.append(depth)
        tokens = state.pool.tokens()
        stopped = _stop(config, tokens, len(take), passed, depth, len(fused), limit)
        if not stopped and len(steps) > 1 and len(state.pool.evidence()) == before:
            stopped = (
                f"evidence fell off: none of candidates {depth - len(take) + 1}-{depth} cleared the evidence threshold"
            )
        step = depth
    state.trace.append(DepthReport(depth, tuple(steps), stopped, tokens))
    return state


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
