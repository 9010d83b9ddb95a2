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

Who judges is a ``Gate`` (``gate_of``): the model gate asks the configured model in batches as
above; the offline backend's gate is a logistic model over retrieval signals (``SignalGate``: the
vault's ``gate.json`` weights from ``vault gate-calibrate --fit``, else the shipped ones), for
which ``gate_rows`` first computes each candidate's signals (``signals.gate_signals``); or, when
the backend is built with ``relevance_model=True``, the relevance model this project trained
(``models/offline/crossencoder.py``, ``EncoderGate``), which reads the prompt and each
candidate's text (docs/decisions/0110-relevance-model.md: not yet the default). An offline gate's
probability is computed once, in its ``judge``, and rides on the verdict; the depth stop
(``Gate.stop``) and the found model (``Gate.found``) read it. Offline verdicts carry no reasoning
text: a number and its threshold are the reason.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Literal, Protocol, assert_never, cast

import numpy as np
from pydantic import BaseModel, ValidationInfo, model_validator

from vault_pipeline.errors import NEVER_VALIDATED, ModelError
from vault_pipeline.models.embed import Embedder
from vault_pipeline.models.offline import offline_relevance
from vault_pipeline.models.offline.crossencoder import ENCODER, CrossEncoderModel, EncoderSettings, shipped
from vault_pipeline.models.offline.relevance import DEFAULT, FOUND, FoundModel, RelevanceModel
from vault_pipeline.models.prompts import load_prompt
from vault_pipeline.models.protocol import BatchKey, StructuredLLM, check_one_per_key, deadline
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


class Gate(Protocol):
    """What judges candidates against the prompt: one outcome per item key, failing open on error.

    ``reads_signals``: ``gate_rows`` computes the retrieval signals for it; ``stop``: the calibrated
    probability a survivor needs to become a block, and ``found``: the model of whether anything
    was found (both None for a gate whose verdicts carry no calibrated probability)."""

    @property
    def name(self) -> str: ...

    @property
    def reads_signals(self) -> bool: ...

    @property
    def stop(self) -> float | None: ...

    @property
    def found(self) -> FoundModel | None: ...

    def judge(
        self, items: Sequence[GateItem], *, intent: str, query: str, batch_size: int, clock: GateClock
    ) -> dict[str, GateOutcome]: ...


@dataclass(frozen=True)
class ModelGate:
    """A model reads each batch of candidates and answers keep or drop with its reasoning."""

    llm: StructuredLLM
    reads_signals: bool = False

    @property
    def name(self) -> str:
        return self.llm.model

    @property
    def stop(self) -> float | None:
        return None

    @property
    def found(self) -> FoundModel | None:
        return None

    def judge(
        self, items: Sequence[GateItem], *, intent: str, query: str, batch_size: int, clock: GateClock
    ) -> dict[str, GateOutcome]:
        batches = [list(items[i : i + batch_size]) for i in range(0, len(items), max(1, batch_size))]
        prompt = load_prompt("gate")
        # A model's call (a local server's too) may hang past the deadline: such calls run on daemon
        # threads of their own, so a hung call neither delays a later query nor holds the process open.
        pool = DaemonPool(min(len(batches), MAX_WORKERS), name="vault-gate")
        futures = [pool.submit(_judge, self.llm, prompt, intent, query, batch, clock.deadline) for batch in batches]
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
            pool.shutdown()


def _verdict(key: str, p: float, threshold: float, what: str) -> GateOutcome:
    keep = p >= threshold
    reason = f"relevance {p:.2f} {'>=' if keep else '<'} {threshold:.2f} ({what})"
    return Keep(reason, probability=round(p, 6)) if keep else Drop(reason, probability=round(p, 6))


@dataclass(frozen=True)
class EncoderGate:
    """The offline gate: the trained relevance model reads (prompt, candidate text) pairs, all of a
    step's candidates in one batched call, and its calibrated probability is the verdict's."""

    encoder: CrossEncoderModel
    settings: EncoderSettings = ENCODER
    reads_signals: bool = False

    @property
    def name(self) -> str:
        return self.encoder.name

    @property
    def stop(self) -> float | None:
        return self.settings.stop

    @property
    def found(self) -> FoundModel | None:
        return self.settings.found

    def judge(
        self, items: Sequence[GateItem], *, intent: str, query: str, batch_size: int, clock: GateClock
    ) -> dict[str, GateOutcome]:
        try:
            probabilities = self.encoder.probabilities([query] * len(items), [passage_of(i) for i in items])
        except Exception as exc:  # fail open on anything: an unchecked context beats a blank one
            return _fail_open(list(items), f"{type(exc).__name__}: {exc}")
        threshold = self.settings.threshold
        return {i.key: _verdict(i.key, float(p), threshold, "relevance model") for i, p in zip(items, probabilities)}


@dataclass(frozen=True)
class SignalGate:
    """A vault's own fitted gate (``gate.json``): logistic weights over the retrieval signals."""

    model: RelevanceModel
    reads_signals: bool = True

    @property
    def name(self) -> str:
        return f"signals ({self.model.source or 'fitted'})"

    @property
    def stop(self) -> float | None:
        return self.model.evidence

    @property
    def found(self) -> FoundModel | None:
        return self.model.found or FOUND

    def judge(
        self, items: Sequence[GateItem], *, intent: str, query: str, batch_size: int, clock: GateClock
    ) -> dict[str, GateOutcome]:
        out: dict[str, GateOutcome] = {}
        for item in items:
            if item.signals is None:  # nothing to judge by: do not pretend to judge
                out[item.key] = Keep("no retrieval signals; kept unjudged")
                continue
            p = self.model.probability(item.signals)
            cosines = f"cosine to intent {item.signals.get('cos_intent', 0.0):.2f}, to prompt {item.signals.get('cos_query', 0.0):.2f}"
            out[item.key] = _verdict(item.key, p, self.model.threshold, cosines)
        return out


def gate_of(llm: StructuredLLM) -> Gate:
    """The gate a backend judges with: the offline backend's is the signal model (the vault's fitted
    weights, else the shipped ones), or the trained relevance model when it was built with it; any
    other backend is a model gate."""
    local, relevance, encoder = offline_relevance(llm)
    if not local:
        return ModelGate(llm)
    if encoder and relevance is None:
        return EncoderGate(shipped())
    return SignalGate(relevance or DEFAULT)


def reads_signals(llm: StructuredLLM) -> bool:
    """Whether ``llm``'s gate judges by the retrieval signals (the funnel then embeds the intent too)."""
    return gate_of(llm).reads_signals


SOURCE_LINK = re.compile(r"(?:^|\s)Source:\s*\[\[[^\]]*\]\]")


def passage_of(item: GateItem) -> str:
    """What the relevance model reads of a candidate: its text without the Source link (the gate's
    text arrives with its whitespace collapsed, so the link is cut where it stands)."""
    text = " ".join(SOURCE_LINK.sub(" ", item.text).split())
    return text or item.heading or item.title


def run_gate(
    items: Sequence[GateItem],
    *,
    llm: StructuredLLM | Gate,
    intent: str,
    query: str,
    batch_size: int,
    timeout: float,
    clock: GateClock | None = None,
) -> dict[str, GateOutcome]:
    """Judge ``items`` with ``llm``'s gate (``gate_of``; or a ``Gate`` given); every key gets an
    outcome, failing open per batch.

    ``clock``: the query's gate deadline and state, shared by its calls (None: ``timeout`` from now)."""
    if not items:
        return {}
    gate: Gate = llm if isinstance(llm, ModelGate | EncoderGate | SignalGate) else gate_of(cast(StructuredLLM, llm))
    clock = clock or GateClock.starting(timeout)
    stopped = clock.stopped()
    if stopped is not None:
        return _fail_open(list(items), stopped)
    return gate.judge(items, intent=intent, query=query, batch_size=batch_size, clock=clock)


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
    gate = gate_of(llm)
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
        if embedder is not None and rows and gate.reads_signals
        else {}
    )
    items = [
        GateItem(key, title_of(path), heading, _short(text, text_chars), signals.get(cid))
        for key, (cid, path, heading, text) in zip(ids, rows)
    ]
    outcomes = run_gate(
        items, llm=gate, intent=intent, query=query, batch_size=batch_size, timeout=timeout, clock=clock
    )
    return {ids[key]: outcome for key, outcome in outcomes.items()}


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
