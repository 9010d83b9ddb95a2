"""Gate calibration: measure the fit-gate and the similarity floor on labelled candidates.

The fit-gate is only as good as the intent it judges against, and the similarity
floor is a per-embedder number. Both are measured here on a labelled file (one
JSON object per line: a query, its intent at two altitudes, a candidate note and
a relevant/off-topic label, see ``vault_example/calibration/README.md``):

* the gate runs through ``gate.gate_rows``, the function the funnel calls, with
  the funnel's batch size, deadline and text cut, once per altitude: the subject
  domain and a too-narrow article angle. Fail-open outcomes count as kept, as in
  the funnel, and are counted;
* every candidate's cosine to its query (the floor compares against the original
  query) gives a floor sweep and a suggested floor for the embedder, reported next
  to the floor the funnel applies now (vault.toml's, else the embedder's calibration).

The gate gets the retrieval signals the funnel gives it (``signals.gate_signals``, its query's
labelled candidates as the pool, the offline decomposition's variants), so the offline gate
judges here exactly as in the funnel, with the weights its backend was built with (a vault's
fitted weights) or its shipped default. Fitting and cross-validating the offline gate is ``gatefit.py``.

Metrics are deterministic for a deterministic backend; only latency varies.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from vault_pipeline.errors import ConfigError, ParseError
from vault_pipeline.models.embed import Embedder, calibration_of, embed_rows, l2_normalise
from vault_pipeline.models.offline import offline_relevance
from vault_pipeline.models.offline.retrieval import decompose
from vault_pipeline.models.protocol import StructuredLLM
from vault_pipeline.retrieve.gate import FailOpen, gate_rows, label, reason_of, survives
from vault_pipeline.retrieve.metering import MeteredLLM, TokenTap
from vault_pipeline.retrieve.types import FunnelConfig

Altitude = Literal["domain", "narrow"]
ALTITUDES: tuple[Altitude, ...] = ("domain", "narrow")
LABELS = ("relevant", "off-topic")
DEFAULT_FLOORS = tuple(round(0.20 + 0.05 * i, 2) for i in range(11))  # 0.20 .. 0.70
TARGET_RECALL = 0.95
FLOOR_RULE = "the highest floor that still passes at least {target:.0%} of the relevant candidates"


# --------------------------------------------------------------------------- labels


@dataclass(frozen=True)
class LabelledCandidate:
    """One labelled (query, candidate) pair, with the intent at each altitude."""

    query: str
    intent_domain: str
    candidate: str
    candidate_id: str
    label: Literal["relevant", "off-topic"]
    intent_narrow: str | None = None
    contaminant: bool = False
    title: str = ""
    conversation: str = ""  # the chat the candidate came from, when it came from one (the gate's session signals)

    @property
    def relevant(self) -> bool:
        """True when the label says the candidate fits the query."""
        return self.label == "relevant"

    def intent(self, altitude: Altitude) -> str | None:
        """The intent the gate judges against at ``altitude`` (None: no narrow angle given)."""
        return self.intent_domain if altitude == "domain" else self.intent_narrow


def load_labels(path: str | Path) -> list[LabelledCandidate]:
    """Read a labels JSONL file; a bad line raises ParseError naming ``file:line``."""
    path = Path(path)
    if not path.is_file():
        raise ParseError(path, "no such labels file")
    labels: list[LabelledCandidate] = []
    seen: dict[str, int] = {}
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            item = _labelled(json.loads(line))
        except json.JSONDecodeError as exc:
            raise ParseError(where, f"not a JSON object ({exc.msg})") from None
        except ValueError as exc:
            raise ParseError(where, str(exc)) from None
        if item.candidate_id in seen:
            raise ParseError(
                where, f"candidate_id {item.candidate_id!r} already used on line {seen[item.candidate_id]}"
            )
        seen[item.candidate_id] = number
        labels.append(item)
    if not labels:
        raise ParseError(path, "no labelled candidates in the file")
    return labels


def load_label_files(paths: Sequence[str | Path]) -> list[LabelledCandidate]:
    """Several labels files as one list; a candidate_id used in two files raises ParseError."""
    labels: list[LabelledCandidate] = []
    seen: dict[str, Path] = {}
    for path in paths:
        for item in load_labels(path):
            if item.candidate_id in seen:
                raise ParseError(path, f"candidate_id {item.candidate_id!r} already used in {seen[item.candidate_id]}")
            seen[item.candidate_id] = Path(path)
            labels.append(item)
    if not labels:
        raise ParseError("<labels>", "no labels files given")
    return labels


def _text(data: Mapping[str, Any], key: str) -> str:
    value = data.get(key)
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"field {key!r} must be a non-empty string, got {value!r}")
    return " ".join(value.split())


def _optional_text(data: Mapping[str, Any], key: str) -> str | None:
    return None if data.get(key) is None else _text(data, key)


def _labelled(data: Any) -> LabelledCandidate:
    if not isinstance(data, dict):
        raise ValueError(f"expected a JSON object, got {type(data).__name__}")
    if data.get("label") not in LABELS:
        raise ValueError(f"field 'label' must be 'relevant' or 'off-topic', got {data.get('label')!r}")
    contaminant = data.get("contaminant", False)
    if not isinstance(contaminant, bool):
        raise ValueError(f"field 'contaminant' must be true or false, got {contaminant!r}")
    if contaminant and data["label"] == "relevant":
        raise ValueError("a relevant candidate cannot be a contaminant")
    return LabelledCandidate(
        query=_text(data, "query"),
        intent_domain=_text(data, "intent_domain"),
        candidate=_text(data, "candidate"),
        candidate_id=_text(data, "candidate_id"),
        label=data["label"],
        intent_narrow=_optional_text(data, "intent_narrow"),
        contaminant=contaminant,
        title=_optional_text(data, "title") or "",
        conversation=_optional_text(data, "conversation") or "",
    )


# --------------------------------------------------------------------------- results


@dataclass(frozen=True)
class GateStats:
    """Gate counts for one query (or all queries) at one altitude, with cost."""

    altitude: str
    scope: str  # the query, or "all"
    queries: int
    candidates: int
    kept: int
    relevant: int
    relevant_kept: int
    off_topic: int
    off_topic_kept: int
    contaminants: int
    contaminants_kept: int
    fail_open: int
    calls: int
    tokens: int | None  # None: the backend reports no token counts
    seconds: float

    @property
    def keep_rate(self) -> float:
        """Share of candidates the gate let through (fail-open counts as kept)."""
        return self.kept / self.candidates if self.candidates else 0.0

    @property
    def precision(self) -> float | None:
        """Relevant kept / kept (None when nothing was kept)."""
        return self.relevant_kept / self.kept if self.kept else None

    @property
    def recall(self) -> float | None:
        """Relevant kept / relevant (None when there is nothing relevant)."""
        return self.relevant_kept / self.relevant if self.relevant else None

    def to_dict(self) -> dict[str, Any]:
        """Counts plus the derived rates, rounded for display."""
        rates = {
            "keep_rate": self.keep_rate,
            "precision": self.precision,
            "recall": self.recall,
            "seconds_per_query": self.seconds / self.queries if self.queries else 0.0,
            "calls_per_query": self.calls / self.queries if self.queries else 0.0,
        }
        return {**asdict(self), **{k: _round(v) for k, v in rates.items()}, "seconds": _round(self.seconds)}


@dataclass(frozen=True)
class CandidateResult:
    """One candidate's similarity and gate outcome per altitude."""

    candidate_id: str
    query: str
    label: str
    contaminant: bool
    similarity: float
    outcomes: Mapping[str, str] = field(default_factory=dict)  # altitude -> keep/drop/fail-open
    reasons: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class FloorPoint:
    """What one similarity floor lets through."""

    floor: float
    recall: float  # share of relevant candidates at or above the floor
    off_topic_pass: float  # share of off-topic candidates at or above the floor
    contaminant_pass: float | None  # share of contaminants at or above the floor


@dataclass(frozen=True)
class CalibrationReport:
    """Everything ``calibrate`` measured."""

    model: str
    embedder: str
    altitudes: tuple[GateStats, ...]
    per_query: tuple[GateStats, ...]
    candidates: tuple[CandidateResult, ...]
    sweep: tuple[FloorPoint, ...]
    suggested_floor: float
    floor_meets_target: bool
    target_recall: float
    floor_rule: str
    floor_at_target: float | None = None  # the exact cosine keeping target_recall, unrounded to the grid
    current_floor: float | None = None  # the floor the funnel applies now (vault.toml, else the embedder's)
    offline: bool = False  # True when the offline backend's gate was calibrated, not a model

    def altitude(self, name: str) -> GateStats | None:
        """The pooled stats of one altitude (None if no label gives that altitude)."""
        return next((a for a in self.altitudes if a.altitude == name), None)

    def summary(self) -> dict[str, Any]:
        """The headline metrics as one flat, JSON-ready dict."""
        out: dict[str, Any] = {
            "model": self.model,
            "embedder": self.embedder,
            "offline": self.offline,
            "candidates": len(self.candidates),
            "queries": len({c.query for c in self.candidates}),
            "suggested_floor": self.suggested_floor,
            "floor_meets_target": self.floor_meets_target,
            "floor_at_target": _round(self.floor_at_target),
            "current_floor": _round(self.current_floor),
            "floor_rule": self.floor_rule,
        }
        for stats in self.altitudes:
            out[stats.altitude] = {
                k: stats.to_dict()[k]
                for k in (
                    "keep_rate",
                    "precision",
                    "recall",
                    "kept",
                    "candidates",
                    "relevant_kept",
                    "relevant",
                    "contaminants_kept",
                    "contaminants",
                    "fail_open",
                    "calls",
                    "tokens",
                    "calls_per_query",
                    "seconds_per_query",
                )
            }
        out["sweep"] = [{k: _round(v) for k, v in asdict(p).items()} for p in self.sweep]
        return out

    def to_json(self) -> str:
        """The summary as one JSON line."""
        return json.dumps(self.summary(), ensure_ascii=False, sort_keys=True)


def _round(value: Any, digits: int = 4) -> Any:
    return round(value, digits) if isinstance(value, float) else value


# --------------------------------------------------------------------------- calibrate


def calibrate(
    labels: Sequence[LabelledCandidate],
    *,
    llm: StructuredLLM,
    embedder: Embedder,
    floors: Iterable[float] = DEFAULT_FLOORS,
    target_recall: float = TARGET_RECALL,
    config: FunnelConfig | None = None,
) -> CalibrationReport:
    """Run the real gate at each altitude, the similarity floor sweep, and suggest a floor.

    The offline gate judges with the weights ``llm`` was built with (a vault's, else the shipped ones)."""
    if not labels:
        raise ConfigError("no labelled candidates to calibrate on")
    config = config or FunnelConfig(floor=calibration_of(embedder).floor)
    sims = similarities(labels, embedder)
    per_query: list[GateStats] = []
    outcomes: dict[str, dict[str, Any]] = {}
    for altitude in ALTITUDES:
        stats, found = _run_altitude(labels, altitude, llm, config, embedder)
        per_query.extend(stats)
        outcomes[altitude] = found
    pooled = tuple(
        _pool(altitude, [s for s in per_query if s.altitude == altitude])
        for altitude in ALTITUDES
        if any(s.altitude == altitude for s in per_query)
    )
    candidates = tuple(_candidate(item, sims[item.candidate_id], outcomes) for item in labels)
    sweep = floor_sweep(candidates, floors)
    floor, met = suggest_floor(sweep, target_recall)
    return CalibrationReport(
        model=llm.model,
        offline=offline_relevance(llm)[0],
        embedder=embedder.name,
        altitudes=pooled,
        per_query=tuple(per_query),
        candidates=candidates,
        sweep=sweep,
        suggested_floor=floor,
        floor_meets_target=met,
        target_recall=target_recall,
        floor_rule=FLOOR_RULE.format(target=target_recall),
        floor_at_target=floor_at_recall(candidates, target_recall),
        current_floor=config.floor,
    )


def similarities(labels: Sequence[LabelledCandidate], embedder: Embedder) -> dict[str, float]:
    """Cosine between each candidate and its query (what the funnel's floor compares)."""
    queries = list(dict.fromkeys(item.query for item in labels))
    query_vectors = l2_normalise(embedder.embed(queries))
    # As the index embeds the candidate's row: without its ids (``embedding_text``).
    candidate_vectors = embed_rows(embedder, [item.candidate for item in labels])
    row = {query: i for i, query in enumerate(queries)}
    return {
        item.candidate_id: float(np.dot(query_vectors[row[item.query]], candidate_vectors[i]))
        for i, item in enumerate(labels)
    }


def _groups(labels: Sequence[LabelledCandidate], altitude: Altitude) -> dict[tuple[str, str], list[LabelledCandidate]]:
    groups: dict[tuple[str, str], list[LabelledCandidate]] = {}
    for item in labels:
        intent = item.intent(altitude)
        if intent is not None:
            groups.setdefault((item.query, intent), []).append(item)
    return groups


def _run_altitude(
    labels: Sequence[LabelledCandidate],
    altitude: Altitude,
    llm: StructuredLLM,
    config: FunnelConfig,
    embedder: Embedder,
) -> tuple[list[GateStats], dict[str, Any]]:
    """Gate each query's candidates against the intent at ``altitude``, one funnel gate stage per query."""
    stats: list[GateStats] = []
    found: dict[str, Any] = {}
    with TokenTap(llm) as tap:
        for (query, intent), items in _groups(labels, altitude).items():
            metered = MeteredLLM(llm)
            tokens_before = tap.tokens if tap else 0
            rows = [(item.candidate_id, item.title, "", item.candidate) for item in items]
            conversations = {item.candidate_id: item.conversation for item in items if item.conversation}
            started = time.perf_counter()
            result = gate_rows(
                rows,
                llm=metered,
                intent=intent,
                query=query,
                batch_size=config.gate_batch,
                timeout=config.gate_timeout,
                text_chars=config.gate_text_chars,
                embedder=embedder,
                variants=[v["text"] for v in decompose({"query": query, "intent": intent})["variants"]],
                conversations=conversations,
            )
            seconds = time.perf_counter() - started
            found.update(result)
            tokens = tap.tokens - tokens_before if tap else None
            stats.append(_stats(altitude, query, items, result, metered.calls, tokens, seconds))
    return stats, found


def _stats(
    altitude: str,
    query: str,
    items: Sequence[LabelledCandidate],
    outcomes: Mapping[str, Any],
    calls: int,
    tokens: int | None,
    seconds: float,
) -> GateStats:
    kept = [item for item in items if survives(outcomes[item.candidate_id])]
    off_topic = [item for item in items if not item.relevant]
    return GateStats(
        altitude=altitude,
        scope=query,
        queries=1,
        candidates=len(items),
        kept=len(kept),
        relevant=sum(item.relevant for item in items),
        relevant_kept=sum(item.relevant for item in kept),
        off_topic=len(off_topic),
        off_topic_kept=sum(not item.relevant for item in kept),
        contaminants=sum(item.contaminant for item in items),
        contaminants_kept=sum(item.contaminant for item in kept),
        fail_open=sum(isinstance(outcomes[item.candidate_id], FailOpen) for item in items),
        calls=calls,
        tokens=tokens,
        seconds=seconds,
    )


def _pool(altitude: str, stats: Sequence[GateStats]) -> GateStats:
    totals = {
        name: sum(getattr(s, name) for s in stats)
        for name in (
            "queries",
            "candidates",
            "kept",
            "relevant",
            "relevant_kept",
            "off_topic",
            "off_topic_kept",
            "contaminants",
            "contaminants_kept",
            "fail_open",
            "calls",
            "seconds",
        )
    }
    tokens = None if any(s.tokens is None for s in stats) else sum(s.tokens or 0 for s in stats)
    return GateStats(altitude=altitude, scope="all", tokens=tokens, **totals)


def _candidate(
    item: LabelledCandidate, similarity: float, outcomes: Mapping[str, Mapping[str, Any]]
) -> CandidateResult:
    found = {alt: o[item.candidate_id] for alt, o in outcomes.items() if item.candidate_id in o}
    return CandidateResult(
        candidate_id=item.candidate_id,
        query=item.query,
        label=item.label,
        contaminant=item.contaminant,
        similarity=similarity,
        outcomes={alt: label(o) for alt, o in found.items()},
        reasons={alt: reason_of(o) for alt, o in found.items()},
    )


# --------------------------------------------------------------------------- the floor


def floor_sweep(
    candidates: Sequence[CandidateResult], floors: Iterable[float] = DEFAULT_FLOORS
) -> tuple[FloorPoint, ...]:
    """For each floor: share of relevant, off-topic and contaminant candidates at or above it."""
    relevant = [c.similarity for c in candidates if c.label == "relevant"]
    off_topic = [c.similarity for c in candidates if c.label != "relevant"]
    contaminants = [c.similarity for c in candidates if c.contaminant]

    def share(values: list[float], floor: float) -> float | None:
        return sum(v >= floor for v in values) / len(values) if values else None

    return tuple(
        FloorPoint(
            floor=floor,
            recall=share(relevant, floor) or 0.0,
            off_topic_pass=share(off_topic, floor) or 0.0,
            contaminant_pass=share(contaminants, floor),
        )
        for floor in sorted(float(f) for f in floors)
    )


def suggest_floor(sweep: Sequence[FloorPoint], target_recall: float = TARGET_RECALL) -> tuple[float, bool]:
    """The highest floor keeping >= ``target_recall`` of relevant candidates; else the lowest floor, flagged."""
    if not sweep:
        raise ConfigError("no floors to sweep")
    passing = [p.floor for p in sweep if p.recall >= target_recall - 1e-9]
    return (max(passing), True) if passing else (min(p.floor for p in sweep), False)


def floor_at_recall(candidates: Sequence[CandidateResult], target_recall: float = TARGET_RECALL) -> float | None:
    """The highest cosine that still passes ``target_recall`` of relevant candidates (off the sweep grid)."""
    relevant = sorted((c.similarity for c in candidates if c.label == "relevant"), reverse=True)
    if not relevant:
        return None
    needed = max(1, -(-round(target_recall * len(relevant) * 1e6) // 1_000_000))  # ceil, robust to 0.95*n
    return relevant[min(needed, len(relevant)) - 1]
