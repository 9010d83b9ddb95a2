"""The fit-gate (funnel step 4): a small model judges each candidate against the intent.

This is the funnel's precision stage: neither similarity nor provenance can
exclude a vocabulary-rich off-topic engram, so a separate keep/drop judgement
runs before provenance ranking. Candidates go to the model in batches (ten per
call, as LlamaIndex's LLMRerank does), the calls run concurrently, and the answer
schema puts ``reasoning`` before the verdict.

The gate fails open: a batch whose call raises, never validates, or misses the
deadline keeps all its candidates, each marked ``FailOpen``; the caller counts
them and flags the package degraded. Blanking the context on a gate error would be
worse than an unchecked package.

One query's gate calls share one deadline (``GateClock``, ``gate_timeout`` seconds from the
first call): the model's requests are cut to it, and once it passed, or once the model proved
out of reach (no connection, a refused key, an unknown model), the query's later gate calls fail
open at once with the same cause. A model's calls run on daemon threads
(``models.workers``), so a call still waiting on a server never holds the process open.

The offline gate (``models/offline/relevance.py``) judges by retrieval signals, not by reading:
for it alone ``gate_rows`` first computes each candidate's signals (``signals.gate_signals``:
cosines to the prompt, the intent and the variants, term overlap, phrase matches, closeness to
the pool's strongest candidates, the session signals) and hands them over with the candidate. A
model gate reads the title, heading and text, so no signals are computed for it. The offline
gate's fitted weights are the backend's own (``OfflineBackend(relevance=...)``).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from functools import cache
from typing import Any, Literal, assert_never

import numpy as np
from pydantic import BaseModel, ValidationInfo, model_validator

from vault_pipeline.errors import NEVER_VALIDATED, ModelError
from vault_pipeline.models.embed import Embedder
from vault_pipeline.models.offline.relevance import DEFAULT, RelevanceModel
from vault_pipeline.models.prompts import load_prompt
from vault_pipeline.models.protocol import OFFLINE_MODEL, BatchKey, StructuredLLM, check_one_per_key, deadline
from vault_pipeline.models.workers import DaemonPool
from vault_pipeline.retrieve.signals import gate_signals, title_of

MAX_WORKERS = 8


class GateVerdict(BaseModel):
    """One candidate's judgement; reasoning comes before the verdict on purpose."""

    key: BatchKey
    reasoning: str
    verdict: Literal["keep", "drop"]
    reason: str


class GateVerdicts(BaseModel):
    """A batch's answer: exactly one verdict per candidate key given in the validation context."""

    verdicts: list[GateVerdict]

    @model_validator(mode="after")
    def _one_per_key(self, info: ValidationInfo) -> GateVerdicts:
        check_one_per_key([item.key for item in self.verdicts], info.context, "verdict")
        return self


@dataclass(frozen=True)
class GateItem:
    """What the gate sees of one candidate."""

    key: str
    title: str
    heading: str
    text: str
    signals: Mapping[str, float] | None = None  # retrieval signals (``gate_signals``), when computed


@dataclass(frozen=True)
class Keep:
    """The gate judged the candidate on-topic."""

    reason: str
    reasoning: str = ""
    probability: float | None = None  # the fitted gate's calibrated relevance (None: a model gate's verdict)


@dataclass(frozen=True)
class Drop:
    """The gate judged the candidate off-topic."""

    reason: str
    reasoning: str = ""
    probability: float | None = None


@dataclass(frozen=True)
class FailOpen:
    """The gate could not judge (error or timeout); the candidate is kept unchecked."""

    error: str


@dataclass(frozen=True)
class Skipped:
    """The gate did not run for this candidate (gate off, or dropped earlier by the floor)."""

    reason: str


GateOutcome = Keep | Drop | FailOpen | Skipped


@dataclass
class GateClock:
    """One query's gate: the deadline all its calls share, and why the model is out of reach, once it is."""

    deadline: float  # time.monotonic()
    timeout: float  # the seconds it was set from, for the fail-open message
    down: str | None = None  # the cause every later call fails open with

    @classmethod
    def starting(cls, timeout: float) -> GateClock:
        """A clock whose deadline is ``timeout`` seconds from now."""
        return cls(time.monotonic() + timeout, timeout)

    def stopped(self) -> str | None:
        """Why no more calls are made: the model is out of reach, or the deadline passed (None: go on)."""
        if self.down is None and time.monotonic() >= self.deadline:
            self.down = f"no answer within {self.timeout:g}s"
        return self.down


def label(outcome: GateOutcome) -> str:
    """The trace word for an outcome: keep, drop, fail-open or skipped."""
    match outcome:
        case Keep():
            return "keep"
        case Drop():
            return "drop"
        case FailOpen():
            return "fail-open"
        case Skipped():
            return "skipped"
        case _:
            assert_never(outcome)


def survives(outcome: GateOutcome) -> bool:
    """True unless the gate positively dropped the candidate (fail-open keeps)."""
    match outcome:
        case Keep() | FailOpen() | Skipped():
            return True
        case Drop():
            return False
        case _:
            assert_never(outcome)


def reason_of(outcome: GateOutcome) -> str:
    """The one-line reason shown in the trace."""
    match outcome:
        case Keep(reason=r) | Drop(reason=r) | Skipped(reason=r):
            return r
        case FailOpen(error=e):
            return f"gate failed open: {e}"
        case _:
            assert_never(outcome)


def reasoning_of(outcome: GateOutcome) -> str:
    """The model's reasoning behind a verdict (empty when the gate did not judge)."""
    match outcome:
        case Keep(reasoning=r) | Drop(reasoning=r):
            return r
        case FailOpen() | Skipped():
            return ""
        case _:
            assert_never(outcome)


def probability_of(outcome: GateOutcome) -> float | None:
    """The calibrated relevance behind a verdict: the fitted offline gate's probability; None for a
    model's verdict, a failed-open or a skipped candidate."""
    match outcome:
        case Keep(probability=p) | Drop(probability=p):
            return p
        case FailOpen() | Skipped():
            return None
        case _:
            assert_never(outcome)


def _outcome(verdict: GateVerdict) -> GateOutcome:
    match verdict.verdict:
        case "keep":
            return Keep(verdict.reason, verdict.reasoning)
        case "drop":
            return Drop(verdict.reason, verdict.reasoning)
        case _ as unreachable:
            assert_never(unreachable)


def reads_signals(llm: StructuredLLM) -> bool:
    """Whether a gate judges by the retrieval signals: the offline backend's fitted model does; a
    model reads the candidates' text."""
    return llm.model == OFFLINE_MODEL


def run_gate(
    items: Sequence[GateItem],
    *,
    llm: StructuredLLM,
    intent: str,
    query: str,
    batch_size: int,
    timeout: float,
    clock: GateClock | None = None,
) -> dict[str, GateOutcome]:
    """Judge ``items`` in concurrent batches; every key gets an outcome, failing open per batch.

    ``clock``: the query's gate deadline and state, shared by its calls (None: ``timeout`` from now)."""
    batches = [list(items[i : i + batch_size]) for i in range(0, len(items), max(1, batch_size))]
    if not batches:
        return {}
    clock = clock or GateClock.starting(timeout)
    stopped = clock.stopped()
    if stopped is not None:
        return {key: outcome for batch in batches for key, outcome in _fail_open(batch, stopped).items()}
    prompt = load_prompt("gate")
    # A model's call (a local server's too) may hang past the deadline: such calls run on daemon
    # threads of their own, so a hung call neither delays a later query nor holds the process open.
    # The offline gate computes and never hangs: it shares one pool.
    pool: DaemonPool | ThreadPoolExecutor = (
        _gate_pool() if reads_signals(llm) else DaemonPool(min(len(batches), MAX_WORKERS), name="vault-gate")
    )
    futures = [pool.submit(_judge, llm, prompt, intent, query, batch, clock.deadline) for batch in batches]
    try:
        outcomes: dict[str, GateOutcome] = {}
        for batch, future in zip(batches, futures):
            outcomes.update(_collect(batch, future, clock))
        return outcomes
    finally:
        # Batches still queued past the deadline need not run; a call already running keeps its
        # thread until its request's timeout (cut to the deadline) ends it, and nobody waits for it.
        for future in futures:
            future.cancel()
        if isinstance(pool, DaemonPool):
            pool.shutdown()


@cache
def _gate_pool() -> ThreadPoolExecutor:
    """The offline gate's threads, started once per process (a pool per query started ~4 threads a query)."""
    return ThreadPoolExecutor(max_workers=MAX_WORKERS, thread_name_prefix="vault-offline-gate")


def gate_rows(
    rows: Sequence[tuple[str, str, str, str]],
    *,
    llm: StructuredLLM,
    intent: str,
    query: str,
    batch_size: int,
    timeout: float,
    text_chars: int,
    clock: GateClock | None = None,
    embedder: Embedder | None = None,
    variants: Sequence[str] = (),
    vectors: Mapping[str, np.ndarray] | None = None,
    query_vectors: Mapping[str, np.ndarray] | None = None,
    conversations: Mapping[str, str] | None = None,
    context: Sequence[str] = (),
) -> dict[str, GateOutcome]:
    """Gate (chunk_id, path, heading, text) rows; returns an outcome per chunk id.

    For a gate that reads them (``reads_signals``), ``embedder`` turns on the retrieval signals
    (``variants``: the other queries the funnel ran; ``vectors``: stored unit vectors by chunk id,
    saving a re-embedding; ``query_vectors``: text -> unit vector of the prompt and variants the
    funnel embedded already; ``conversations``: chunk id -> the chat it came from, and
    ``context``: the chats of the candidates that passed earlier steps, for the session signals).
    """
    ids = {f"c{i:02d}": row[0] for i, row in enumerate(rows, 1)}  # short keys a small model echoes well
    signals = (
        gate_signals(
            rows,
            query=query,
            intent=intent,
            embedder=embedder,
            variants=variants,
            vectors=vectors,
            query_vectors=query_vectors,
            conversations=conversations,
            context=context,
        )
        if embedder is not None and rows and reads_signals(llm)
        else {}
    )
    items = [
        GateItem(key, title_of(path), heading, _short(text, text_chars), signals.get(cid))
        for key, (cid, path, heading, text) in zip(ids, rows)
    ]
    outcomes = run_gate(items, llm=llm, intent=intent, query=query, batch_size=batch_size, timeout=timeout, clock=clock)
    if signals:  # the fitted gate's probability rides with its verdict: the package's depth follows it
        model = relevance_of(llm)
        outcomes = {key: _with_probability(o, model.probability(signals[ids[key]])) for key, o in outcomes.items()}
    return {ids[key]: outcome for key, outcome in outcomes.items()}


def relevance_of(llm: StructuredLLM) -> RelevanceModel:
    """The fitted relevance model an offline gate judges with: the vault's own, else the shipped one."""
    model = getattr(llm, "relevance", None)
    return model if isinstance(model, RelevanceModel) else DEFAULT


def _with_probability(outcome: GateOutcome, p: float) -> GateOutcome:
    match outcome:
        case Keep() | Drop():
            return replace(outcome, probability=round(p, 6))
        case FailOpen() | Skipped():
            return outcome
        case _:
            assert_never(outcome)


def _short(text: str, limit: int) -> str:
    """The candidate text a small gate model reads: whitespace collapsed, cut at a word."""
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    cut = text.rfind(" ", 0, limit)
    return text[: cut if cut > limit // 2 else limit] + " …"


def _judge(
    llm: StructuredLLM, prompt: Any, intent: str, query: str, batch: list[GateItem], until: float
) -> GateVerdicts:
    variables = {"intent": intent, "query": query, "candidates": [_as_variable(i) for i in batch]}
    with deadline(until):  # the model's requests end by the query's gate deadline
        return llm.call(prompt, variables, GateVerdicts, context={"keys": [i.key for i in batch]})


def _as_variable(item: GateItem) -> dict[str, Any]:
    out: dict[str, Any] = {"key": item.key, "title": item.title, "heading": item.heading, "text": item.text}
    if item.signals is not None:
        out["signals"] = dict(item.signals)
    return out


def _collect(batch: list[GateItem], future: Future, clock: GateClock) -> Mapping[str, GateOutcome]:
    try:
        answer = future.result(timeout=max(0.0, clock.deadline - time.monotonic()))
    except TimeoutError:
        return _fail_open(batch, clock.stopped() or f"no answer within {clock.timeout:g}s")
    except ModelError as exc:
        cause = f"{exc.model}: {exc.reason}"
        if exc.reason != NEVER_VALIDATED and clock.down is None:
            clock.down = cause  # out of reach (connection, key, model name): the query asks no more
        return _fail_open(batch, cause)
    except Exception as exc:  # fail open on anything: an unchecked context beats a blank one
        return _fail_open(batch, f"{type(exc).__name__}: {exc}")
    verdicts = {v.key: _outcome(v) for v in answer.verdicts}
    # A backend that skips the validation context could still omit a key: fail that one open.
    return {item.key: verdicts.get(item.key, FailOpen("no verdict returned for this candidate")) for item in batch}


def _fail_open(batch: list[GateItem], error: str) -> dict[str, GateOutcome]:
    return {item.key: FailOpen(error[:300]) for item in batch}
