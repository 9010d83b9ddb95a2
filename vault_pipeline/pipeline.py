"""The public API, in the order of the flow: ingest, keep, index, query, status, check, clean, undo.

Each function takes already-built collaborators (a ``Vault``, a ``StructuredLLM``, an
``Embedder``) and holds the vault lock where it writes; ``cli/`` is the only place that builds
them from settings. The work itself lives in the stage packages. The index is derived: a read
that finds it unreadable (``query``, ``status``) sets it aside, rebuilds it from the notes and
reads again, here, so no caller has to. ``vault_pipeline`` re-exports these names (``__all__``).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vault_pipeline.errors import IndexDamagedError, ModelError, ParseError
from vault_pipeline.ingest.extract import Extraction, extract_conversation, group_threads, map_thread, thread_header
from vault_pipeline.ingest.keep import keep
from vault_pipeline.ingest.notes import atomic_id
from vault_pipeline.ingest.parse import Conversation, ParseIssue, read_export
from vault_pipeline.ingest.parse.jsonstream import MAX_RECORD_CHARS
from vault_pipeline.ingest.people import People, write_people
from vault_pipeline.ingest.retire import Retirement
from vault_pipeline.ingest.select import Selector, select_units
from vault_pipeline.ingest.topics import plan_subjects
from vault_pipeline.ingest.write import Hubs, IngestReport, write_conversation, write_threads, write_topic_hubs
from vault_pipeline.models.protocol import StructuredLLM, is_offline
from vault_pipeline.models.workers import ordered
from vault_pipeline.vault.files import Vault

if TYPE_CHECKING:
    from vault_pipeline.clean.apply import CleanReport
    from vault_pipeline.clean.types import Plan
    from vault_pipeline.clean.undo import UndoReport
    from vault_pipeline.index.check import CheckReport
    from vault_pipeline.index.sync import IndexReport
    from vault_pipeline.models.embed import Embedder
    from vault_pipeline.models.estimate import DryRunLLM, Estimate
    from vault_pipeline.retrieve.package import ContextPackage
    from vault_pipeline.retrieve.types import Candidate, FunnelConfig

__all__ = [
    "IngestReport",
    "VaultStatus",
    "check",
    "clean",
    "estimate_ingest",
    "gate_llm",
    "index",
    "ingest",
    "keep",
    "plan_clean",
    "query",
    "status",
    "undo_clean",
]

Progress = Callable[[int, int | None, str], None]
Repaired = Callable[["IndexReport"], None]  # told of a rebuild after a read found the index unreadable


# --------------------------------------------------------------------------- ingest (keep: ingest.keep)


def ingest(
    vault: Vault,
    paths: Sequence[Path],
    llm: StructuredLLM,
    *,
    progress: Progress | None = None,
    wait: float = 0,
    max_record: int = MAX_RECORD_CHARS,
    selector: Selector | None = None,
    concurrency: int = 1,
) -> IngestReport:
    """Parse exports, extract atomic units, and write notes into the vault (idempotent).

    A record larger than ``max_record`` (characters of JSON, bytes of a transcript) is skipped.
    ``selector`` decides which of the offline extractor's candidates are written (default: the shipped one).
    ``concurrency``: conversations a model extracts at once (the offline backend takes them one at a
    time); each is then selected and written in the export's order, so the vault is the same at any
    concurrency."""
    report = IngestReport(sources=[str(p) for p in paths], model=llm.model)
    started = time.perf_counter()
    workers = 1 if is_offline(llm.model) else max(1, concurrency)
    with vault.lock("ingest", wait=wait):
        sessions: dict[str, tuple[Conversation, str, str]] = {}
        retirement = Retirement(vault)  # notes of a re-ingested conversation no longer written
        hubs = Hubs()
        subjects = plan_subjects(vault, _parsed(paths, max_record))  # a first read: titles and names only
        people = People()
        extracted = ordered(lambda conv: _extract_call(conv, llm), _conversations(paths, report, max_record), workers)
        for done, (conv, outcome) in enumerate(extracted, 1):
            extraction = _extract(conv, outcome, report, selector)
            if extraction is not None:
                notes: list[tuple[str, str]] = []
                stem = write_conversation(vault, extraction, report, hubs, notes, subjects.get(conv.id, ()))
                people.add(conv, stem, notes)
                # Thread maps read titles, dates, openings and summaries: the messages are not kept.
                sessions[conv.id] = (thread_header(conv), extraction.summary, stem)
                written = (atomic_id(conv.kind, conv.id, u.category, u.text) for u in extraction.units)
                report.archived += retirement.retire(conv.kind, conv.id, written)
            if progress:
                progress(done, None, conv.title)
        write_topic_hubs(vault, hubs, report)
        write_people(vault, people, report)
        write_threads(vault, list(sessions.values()), llm, report, concurrency=workers, retirement=retirement)
        report.archive_run = retirement.finish()  # notes and thread maps archived: one run to undo
    report.seconds = time.perf_counter() - started
    return report


def _conversations(paths: Sequence[Path], report: IngestReport, max_record: int) -> Iterable[Conversation]:
    for path in paths:
        try:
            for item in read_export(path, max_record=max_record):
                if isinstance(item, ParseIssue):
                    (report.warnings if item.warning else report.skipped).append(str(item))
                    continue
                report.conversations += 1
                report.messages += len(item.messages)
                report.alternates += item.alternates
                yield item
        except ParseError as exc:
            report.skipped.append(str(exc))


def _parsed(paths: Sequence[Path], max_record: int) -> Iterable[Conversation]:
    """The conversations of ``paths``, what cannot be read left out (the ingest's own read reports it)."""
    for path in paths:
        try:
            yield from (c for c in read_export(path, max_record=max_record) if isinstance(c, Conversation))
        except ParseError:
            continue


def _extract_call(conv: Conversation, llm: StructuredLLM) -> Extraction | ModelError:
    """The model's extraction of one conversation, or the error that ended it (run on a worker thread)."""
    try:
        return extract_conversation(conv, llm)
    except ModelError as exc:
        return exc


def _extract(
    conv: Conversation, extracted: Future, report: IngestReport, selector: Selector | None = None
) -> Extraction | None:
    """The conversation's units (``extracted``: ``_extract_call``'s finished future), and of the
    offline extractor's candidates only those the selector writes (a model's own notes are written
    as it gave them); what is not written is counted by reason."""
    extraction = extracted.result()
    if isinstance(extraction, ModelError):
        report.errors.append(f"{conv.source} [conversation {conv.id}]: {extraction}")
        return None
    selection = select_units(conv, extraction.units, selector)
    report.not_written.update(selection.not_written)
    return replace(
        extraction,
        units=tuple(u for u, _ in selection.written),
        scores=tuple(p for _, p in selection.written),
    )


# A session summary's typical length, standing in for the summaries a thread map is shown.
ESTIMATE_SUMMARY = " ".join(["word"] * 300)


def estimate_ingest(paths: Sequence[Path], dry: DryRunLLM, *, max_record: int = MAX_RECORD_CHARS) -> Estimate:
    """What ingesting ``paths`` would ask ``dry``'s model, and cost, before anything is spent.

    Every call the ingest would make is rendered as it would be sent (``DryRunLLM``) and priced;
    nothing is written and no model is called. Thread maps are counted with summaries of typical
    length, as the real ones are not known yet."""
    from vault_pipeline.models.estimate import price_calls

    report = IngestReport(sources=[str(p) for p in paths], model=dry.model)
    titles: list[Conversation] = []
    for conv in _conversations(paths, report, max_record):
        extract_conversation(conv, dry)
        titles.append(thread_header(conv))  # what grouping reads: titles, dates, threads, openings
    for key, members in group_threads(titles):
        map_thread(key, [(conv, ESTIMATE_SUMMARY) for conv in members], dry)
    estimate = price_calls(dry.calls, dry.model, remote=dry.remote_model)
    estimate.conversations = report.conversations
    return estimate


# --------------------------------------------------------------------------- index and query


def index(
    vault: Vault,
    embedder: Embedder,
    *,
    progress: Progress | None = None,
    rebuild: bool = False,
    verify: bool = False,
    wait: float = 0,
) -> IndexReport:
    """Bring the derived index in line with the vault (incremental by content hash)."""
    from vault_pipeline.index.sync import sync

    with vault.lock("index", wait=wait):
        return sync(vault, embedder, progress=_stage_progress(progress, "index"), rebuild=rebuild, verify=verify)


def gate_llm(vault: Vault, model: str, **build: Any) -> StructuredLLM:
    """The fit-gate's backend for ``model`` (``build``: ``models.build.build_llm``'s options): the
    offline gate judges with the weights the vault fitted for itself (``vault gate-calibrate --fit``),
    else the shipped ones; a model judges by itself."""
    from vault_pipeline.models.build import build_llm
    from vault_pipeline.models.protocol import reads_vault_weights
    from vault_pipeline.retrieve.signals import load_relevance

    relevance = load_relevance(vault.root) if reads_vault_weights(model) else None
    return build_llm(model, relevance=relevance, **build)


def query(
    vault: Vault,
    queries: Iterable[tuple[str, str | None]],
    *,
    embedder: Embedder,
    llm_plan: StructuredLLM,
    llm_gate: StructuredLLM,
    config: FunnelConfig | None = None,
    on_repair: Repaired | None = None,
    wait: float = 0,
) -> Iterator[ContextPackage]:
    """Answer each (query, intent) with a context package; the index is opened once for all.

    The offline gate judges with the weights ``llm_gate`` was built with: a vault's own
    (``gate_llm``), or the shipped ones. An index found unreadable is rebuilt from the notes once
    (waiting up to ``wait`` seconds for the vault lock; ``on_repair`` is told), and the queries not
    yet answered are answered from the new one."""
    from vault_pipeline.index.damage import describe, is_damage
    from vault_pipeline.index.sync import repair

    todo = list(queries)
    answered = 0
    try:
        for package in _answer(vault, todo, embedder, llm_plan, llm_gate, config):
            answered += 1
            yield package
    except Exception as exc:
        if not is_damage(exc):
            raise
        report = repair(vault, embedder, describe(exc), wait=wait)
        if on_repair:
            on_repair(report)
        yield from _answer(vault, todo[answered:], embedder, llm_plan, llm_gate, config)


def _answer(
    vault: Vault,
    queries: Sequence[tuple[str, str | None]],
    embedder: Embedder,
    llm_plan: StructuredLLM,
    llm_gate: StructuredLLM,
    config: FunnelConfig | None,
) -> Iterator[ContextPackage]:
    from vault_pipeline.index.search import Index
    from vault_pipeline.index.sync import Preloadable
    from vault_pipeline.retrieve.funnel import run_query
    from vault_pipeline.retrieve.types import QUERY_COLUMNS, FunnelConfig, Retriever

    config = config or FunnelConfig()
    # The embedder's model and a model backend's libraries load while LanceDB is imported and the
    # index opened. The backends' loading is waited for here: seconds of imports must not count
    # against the gate's deadline.
    if isinstance(embedder, Preloadable):
        embedder.preload()
    backends = [
        llm.preload() for llm in {id(x): x for x in (llm_plan, llm_gate)}.values() if isinstance(llm, Preloadable)
    ]
    retriever: Retriever = Index.open(vault, embedder, columns=QUERY_COLUMNS)
    for loading in backends:
        loading.join()
    for text, intent in queries:
        yield run_query(
            text,
            retriever=retriever,
            embedder=embedder,
            llm_plan=llm_plan,
            llm_gate=llm_gate,
            config=config,
            intent=intent,
        )


def search(
    vault: Vault,
    text: str,
    *,
    embedder: Embedder,
    floor: float,
    limit: int = 10,
    on_repair: Repaired | None = None,
    wait: float = 0,
) -> list[Candidate]:
    """The index's best candidates for ``text`` (vector and full text, fused), one per note, best
    first: only those whose cosine to ``text`` reaches ``floor``, and none when the found model says
    the vault holds nothing on ``text``. An index found unreadable is rebuilt from the notes once
    (waiting up to ``wait`` seconds for the vault lock; ``on_repair`` is told)."""
    from vault_pipeline.index.damage import read_repairing
    from vault_pipeline.index.sync import repair

    def rebuild(what: str) -> None:
        report = repair(vault, embedder, what, wait=wait)
        if on_repair:
            on_repair(report)

    return read_repairing(lambda: _search(vault, text, embedder, floor, limit), rebuild)


def _search(vault: Vault, text: str, embedder: Embedder, floor: float, limit: int) -> list[Candidate]:
    from vault_pipeline.index.search import Index
    from vault_pipeline.models.embed import l2_normalise
    from vault_pipeline.retrieve.items import is_statement
    from vault_pipeline.retrieve.judge import with_original_similarity
    from vault_pipeline.retrieve.lanes import fuse

    index = Index.open(vault, embedder)
    vector = embedder.embed([text])[0]
    depth = limit * 3  # a long note can fill a lane with its chunks: look deeper, keep one per note
    lists = [
        ("original", "vector", index.vector_search(vector, depth)),
        ("original", "text", index.text_search(text, depth, vector=vector)),
    ]
    fused = [
        c
        for c in with_original_similarity(fuse(lists), l2_normalise(vector[None, :])[0], embedder)
        if c.similarity >= floor
    ]
    if not fused or not _finds(text, fused, index):
        return []
    # A statement row (index/statements.py) repeats the sentence of the note written from it: the
    # note stands for both.
    noted = {_first_line(c.row) for c in fused if c.row.type == "atomic" and not is_statement(c.row)}
    found: dict[str, Candidate] = {}
    for cand in fused:
        if is_statement(cand.row) and _first_line(cand.row) in noted:
            continue
        found.setdefault(cand.row.note_id, cand)
        if len(found) == limit:
            break
    return list(found.values())


def _finds(text: str, hits: Sequence[Candidate], index: Any) -> bool:
    """Whether the vault holds anything on ``text``: the funnel's found model (``evidence.py``) over
    the hits' best cosine and the text's words no note holds. No gate runs for a search, so its
    best relevance counts as certain: only the words and the cosine can say "nothing"."""
    from vault_pipeline.models.offline.relevance import FOUND
    from vault_pipeline.retrieve.evidence import absence_features
    from vault_pipeline.retrieve.lanes import absent_words

    absent = set(absent_words(text, hits, index))
    features = {"best": 1.0, "best_cosine": max(c.similarity for c in hits), **absence_features(text, absent)}
    return FOUND.probability(features) >= FOUND.threshold


def _first_line(row: Any) -> str:
    return row.text.split("\n", 1)[0].strip().casefold()


# --------------------------------------------------------------------------- status


@dataclass
class VaultStatus:
    """Counts from the vault and the index, and how far the index lags the files."""

    folders: Counter = field(default_factory=Counter)
    index: dict | None = None
    pending: dict[str, int] = field(default_factory=dict)
    lint: list[tuple[str, str, int]] = field(default_factory=list)
    vault: str = ""
    models: list[tuple[str, str, str]] = field(default_factory=list)  # (role, model, "local" | "remote")
    broken: list[tuple[str, str]] = field(default_factory=list)  # (path, problem): indexed from the body

    def to_dict(self) -> dict[str, Any]:
        """The status as ``vault status --json`` prints it (the CLI adds ``exit_code``)."""
        return {
            "vault": self.vault,
            "folders": dict(sorted(self.folders.items())),
            "index": self.index,
            "pending": self.pending,
            "models": [{"role": r, "model": m, "where": w} for r, m, w in self.models],
            "lint": [{"path": p, "heading": h, "bullets": b} for p, h, b in self.lint],
            "broken_frontmatter": [{"path": p, "problem": w} for p, w in self.broken],
        }


def status(
    vault: Vault,
    *,
    lint: bool = False,
    models: Sequence[tuple[str, str, str]] = (),
    embedder: Callable[[], Embedder] | None = None,
    on_repair: Repaired | None = None,
    wait: float = 0,
) -> VaultStatus:
    """Notes per folder; tier/status/category counts from the index; index freshness; optional lint.

    ``models`` (role, model, where it runs) is reported as given. An index found unreadable is
    rebuilt with ``embedder()`` (built only then; without one the error stands; waiting up to ``wait``
    seconds for the vault lock), ``on_repair`` told."""
    from vault_pipeline.index.damage import read_repairing
    from vault_pipeline.index.sync import repair

    def rebuild(what: str) -> None:
        if embedder is None:
            raise IndexDamagedError(what)
        report = repair(vault, embedder(), what, wait=wait)
        if on_repair:
            on_repair(report)

    return read_repairing(lambda: _status(vault, lint, models), rebuild)


def _status(vault: Vault, lint: bool, models: Sequence[tuple[str, str, str]]) -> VaultStatus:
    from vault_pipeline.index import status as index_status

    paths = vault.iter_note_paths()
    result = VaultStatus(
        folders=Counter(p.split("/", 1)[0] if "/" in p else "(vault root)" for p in paths),
        vault=str(vault.root),
        models=list(models),
    )
    result.pending, result.index = index_status.index_status(vault, paths)
    result.broken = index_status.broken_notes(vault)
    if lint:
        result.lint = index_status.lint(vault, paths)
    return result


def check(vault: Vault, *, embedder: Embedder | None = None, fix: bool = False) -> CheckReport:
    """Check every note and the index (``vault check``); with ``fix`` (and ``embedder``), remove stale
    temp files and re-sync the index."""
    from vault_pipeline.index.check import check as check_vault

    return check_vault(vault, embedder=embedder, fix=fix)


# --------------------------------------------------------------------------- clean and undo


def plan_clean(
    vault: Vault, *, embedder: Embedder, llm: StructuredLLM, progress: Progress | None = None, wait: float = 0
) -> Plan:
    """The nightly sweep's plan (duplicates, supersessions, related links) on a freshly synced index."""
    with vault.lock("clean (plan)", wait=wait):
        return _plan_held(vault, embedder, llm, progress)


def _plan_held(vault: Vault, embedder: Embedder, llm: StructuredLLM, progress: Progress | None) -> Plan:
    from vault_pipeline.clean.plan import plan
    from vault_pipeline.index.search import Index
    from vault_pipeline.index.sync import sync

    sync(vault, embedder)
    return plan(vault, Index.open(vault, embedder), llm, progress=_stage_progress(progress, "clean"))


def clean(
    vault: Vault, *, embedder: Embedder, llm: StructuredLLM, progress: Progress | None = None, wait: float = 0
) -> CleanReport:
    """Plan and apply the sweep (journaled, undoable), then re-sync the index."""
    from vault_pipeline.clean.apply import apply_held
    from vault_pipeline.index.sync import sync

    # One lock across plan, apply and re-index: no other writer slips in between the steps.
    with vault.lock("clean", wait=wait):
        report = apply_held(vault, _plan_held(vault, embedder, llm, progress))
        sync(vault, embedder)
    return report


def undo_clean(
    vault: Vault, run_id: str, *, action: int | None = None, embedder: Embedder | None = None, wait: float = 0
) -> UndoReport:
    """Restore every file a sweep run (or its action number ``action``) changed, byte for byte
    (files changed since are left alone)."""
    from vault_pipeline.clean.undo import undo_held
    from vault_pipeline.index.sync import sync

    with vault.lock("undo", wait=wait):
        report = undo_held(vault, run_id, action=action)
        if embedder is not None:
            sync(vault, embedder)
    return report


def _stage_progress(progress: Progress | None, stage: str) -> Callable[[int, int], None]:
    """A stage's (done, total) callback reporting to ``progress`` under the stage's name."""

    def report_progress(done: int, total: int) -> None:
        if progress:
            progress(done, total, stage)

    return report_progress
