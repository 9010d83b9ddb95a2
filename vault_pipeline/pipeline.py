"""The public API, in the order of the flow: ingest, keep, index, query, clean.

Each function takes already-built collaborators (a ``Vault``, a ``StructuredLLM``,
an ``Embedder``); ``cli.py`` is the only place that builds them from settings.
"""

from __future__ import annotations

import re
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from vault_pipeline.errors import ModelError, ParseError, VaultError
from vault_pipeline.ingest.extract import Extraction, extract_conversation, group_threads, map_thread
from vault_pipeline.models.llm import StructuredLLM
from vault_pipeline.ingest.notes import atomic_note, session_note, thread_note, topic_hub
from vault_pipeline.vault.note import Note
from vault_pipeline.ingest.parse import Conversation, ParseIssue, read_export
from vault_pipeline.vault.files import Vault

Progress = Callable[[int, int | None, str], None]

_TOPIC_PREFIXES = ("the conversation is about ", "this conversation is about ", "the topic is ",
                   "the session is about ", "topic: ")


@dataclass
class IngestReport:
    """What an ingest read, wrote, refused and skipped, and how long it took."""

    sources: list[str] = field(default_factory=list)
    conversations: int = 0
    messages: int = 0
    alternates: int = 0
    notes_by_category: Counter = field(default_factory=Counter)
    writes: Counter = field(default_factory=Counter)
    skipped: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    threads: int = 0
    seconds: float = 0.0

    @property
    def files_written(self) -> int:
        """Files created or updated on disk by this run."""
        return self.writes["created"] + self.writes["updated"]

    @property
    def notes(self) -> int:
        """Atomic notes produced (written or already present)."""
        return sum(self.notes_by_category.values())


def ingest(vault: Vault, paths: Sequence[Path], llm: StructuredLLM, *,
           progress: Progress | None = None, wait: float = 0) -> IngestReport:
    """Parse exports, extract atomic units, and write notes into the vault (idempotent)."""
    report = IngestReport(sources=[str(p) for p in paths])
    started = time.perf_counter()
    with vault.lock("ingest", wait=wait):
        sessions: dict[str, tuple[Conversation, str, str]] = {}
        hubs: dict[str, set[str]] = defaultdict(set)
        for conv in _conversations(paths, report):
            if progress:
                progress(report.conversations, None, conv.title)
            extraction = _extract(conv, llm, report)
            if extraction is None:
                continue
            stem = _write_conversation(vault, extraction, report, hubs)
            sessions[conv.id] = (conv, extraction.summary, stem)
        _write_topic_hubs(vault, hubs, report)
        _write_threads(vault, list(sessions.values()), llm, report)
    report.seconds = time.perf_counter() - started
    return report


def _conversations(paths: Sequence[Path], report: IngestReport) -> Iterable[Conversation]:
    for path in paths:
        try:
            for item in read_export(path):
                if isinstance(item, ParseIssue):
                    report.skipped.append(str(item))
                    continue
                report.conversations += 1
                report.messages += len(item.messages)
                report.alternates += item.alternates
                yield item
        except ParseError as exc:
            report.skipped.append(str(exc))


def _extract(conv: Conversation, llm: StructuredLLM, report: IngestReport) -> Extraction | None:
    try:
        return extract_conversation(conv, llm)
    except ModelError as exc:
        report.errors.append(f"{conv.source} [conversation {conv.id}]: {exc}")
        return None


def _write_conversation(vault: Vault, extraction: Extraction, report: IngestReport,
                        hubs: dict[str, set[str]]) -> str:
    conv = extraction.conversation
    session = session_note(conv, extraction.summary)
    _write(vault, session, report)
    created = _created(conv)
    notes = [(unit, atomic_note(unit, conv, session.stem, created)) for unit in extraction.units]
    for unit, note in notes:
        report.notes_by_category[unit.category] += 1
        _write(vault, note, report)
    # A topic unit anchors a hub note that loads its conversation's cluster of notes.
    for unit, _ in notes:
        if unit.category == "topic":
            hubs[_topic_name(unit.text)].update(note.stem for _, note in notes)
    return session.stem


def _created(conv: Conversation) -> str:
    stamp = conv.created or next((m.created for m in conv.messages if m.created), None)
    return stamp.isoformat(timespec="seconds") if stamp else ""


def _topic_name(sentence: str) -> str:
    text = sentence.strip().rstrip(".!?").strip()
    lowered = text.lower()
    for prefix in _TOPIC_PREFIXES:
        if lowered.startswith(prefix):
            text = text[len(prefix):]
            break
    return text[:1].upper() + text[1:]


def _write_topic_hubs(vault: Vault, hubs: dict[str, set[str]], report: IngestReport) -> None:
    for topic in sorted(hubs):
        existing = _existing_hub_links(vault, topic)
        _write(vault, topic_hub(topic, sorted(hubs[topic] | existing)), report)


def _existing_hub_links(vault: Vault, topic: str) -> set[str]:
    probe = topic_hub(topic, [])
    relpath = vault.locate(probe.id)
    if relpath is None:
        return set()
    frontmatter, body, _ = vault.read(relpath)
    return {link for link in _wikilinks(body) if link != probe.stem}


def _wikilinks(body: str) -> list[str]:
    return [m.split("#")[0].split("|")[0] for m in re.findall(r"\[\[([^\]]+)\]\]", body)]


def _write_threads(vault: Vault, sessions: list[tuple[Conversation, str, str]], llm: StructuredLLM,
                   report: IngestReport) -> None:
    by_id = {conv.id: (conv, summary, stem) for conv, summary, stem in sessions}
    for key, members in group_threads([conv for conv, _, _ in sessions]):
        pairs = [(c, by_id[c.id][1]) for c in members]
        try:
            thread_map = map_thread(key, pairs, llm)
        except ModelError as exc:
            report.errors.append(f"thread {key}: {exc}")
            continue
        stems = {c.id: by_id[c.id][2] for c in members}
        _write(vault, thread_note(key, thread_map, stems), report)
        report.threads += 1


# Keys that keep and clean own: re-ingesting an export must not undo what they decided.
_LIFECYCLE_KEYS = ("status", "tier", "kept", "related", "supersedes", "superseded_by", "duplicate_of")


def _with_lifecycle(vault: Vault, note: Note) -> tuple[Note, bool]:
    """The note with its file's lifecycle keys and merged sources; True when the file already says it all."""
    relpath = vault.locate(note.id)
    if relpath is None or note.type != "atomic":
        return note, False
    try:
        existing, body, _ = vault.read(relpath)
    except (VaultError, OSError):
        return note, False
    frontmatter = dict(note.frontmatter)
    frontmatter.update({k: existing[k] for k in _LIFECYCLE_KEYS if k in existing})
    old_source, new_source = existing.get("source"), frontmatter.get("source")
    if isinstance(old_source, dict) and isinstance(new_source, dict):
        merged = list(dict.fromkeys([*new_source.get("messages", []), *old_source.get("messages", [])]))
        frontmatter["source"] = {**new_source, "messages": merged}
    # Same properties in another key order (clean appends its keys): nothing to write.
    same = _present(frontmatter) == _present(existing) and body.strip() == note.body.strip()
    return replace(note, frontmatter=frontmatter), same


def _present(frontmatter: dict) -> dict:
    """Keys as rendered: empty values are not written, so they do not count as a difference."""
    return {k: v for k, v in frontmatter.items() if v not in (None, "", [], {})}


def _write(vault: Vault, note: Note, report: IngestReport) -> None:
    note, same = _with_lifecycle(vault, note)
    if same:
        report.writes["unchanged"] += 1
        return
    outcome = vault.write(note)
    report.writes[outcome.outcome] += 1
    if outcome.outcome == "refused":
        report.refused.append(f"{outcome.relpath}: {outcome.reason}")


# --------------------------------------------------------------------------- index and query


def index(vault: Vault, embedder, *, progress: Progress | None = None, rebuild: bool = False,
          verify: bool = False, wait: float = 0):
    """Bring the derived index in line with the vault (incremental by content hash)."""
    from vault_pipeline.index.sync import sync

    def report_progress(done: int, total: int) -> None:
        if progress:
            progress(done, total, "index")

    with vault.lock("index", wait=wait):
        return sync(vault, embedder, progress=report_progress, rebuild=rebuild, verify=verify)


def query(vault: Vault, queries: Iterable[tuple[str, str | None]], *, embedder, llm_plan: StructuredLLM,
          llm_gate: StructuredLLM, config=None) -> Iterable:
    """Answer each (query, intent) with a context package; the index is opened once for all."""
    from vault_pipeline.index.sync import Index
    from vault_pipeline.retrieve.funnel import run_query

    if hasattr(embedder, "preload"):
        embedder.preload()  # the model loads while LanceDB is imported and the index opened
    retriever = Index.open(vault, embedder)
    for text, intent in queries:
        yield run_query(text, retriever=retriever, embedder=embedder, llm_plan=llm_plan,
                        llm_gate=llm_gate, config=config, intent=intent)


# --------------------------------------------------------------------------- status


@dataclass
class VaultStatus:
    """Counts from the vault and the index, and how far the index lags the files."""

    folders: Counter = field(default_factory=Counter)
    index: dict | None = None
    pending: dict[str, int] = field(default_factory=dict)
    lint: list[tuple[str, str, int]] = field(default_factory=list)


def status(vault: Vault, *, lint: bool = False) -> VaultStatus:
    """Notes per folder; tier/status/category counts from the index; index freshness; optional lint."""
    from vault_pipeline.index.sync import Index
    from vault_pipeline.index.store import MANIFEST_FILE, opened_manifest
    from vault_pipeline.errors import IndexStateError
    from vault_pipeline.vault.files import STATE_DIR

    paths = vault.iter_note_paths()
    result = VaultStatus(folders=Counter(p.split("/", 1)[0] if "/" in p else "(vault root)" for p in paths))
    manifest_path = vault.root / STATE_DIR / MANIFEST_FILE
    if manifest_path.exists():
        with opened_manifest(manifest_path) as manifest:
            result.pending = _pending(vault, paths, manifest.entries())
        try:
            result.index = Index.open(vault).stats()
        except IndexStateError:
            result.index = None
    if lint:
        result.lint = _lint(vault, paths)
    return result


def _pending(vault: Vault, paths: list[str], entries: dict) -> dict[str, int]:
    new = changed = 0
    for relpath in paths:
        entry = entries.get(relpath)
        if entry is None:
            new += 1
            continue
        stat = (vault.root / relpath).stat()
        if (stat.st_size, stat.st_mtime_ns) != (entry.size, entry.mtime_ns):
            changed += 1
    removed = len(set(entries) - set(paths))
    return {"new": new, "changed": changed, "removed": removed}


def _lint(vault: Vault, paths: list[str]) -> list[tuple[str, str, int]]:
    from vault_pipeline.index.chunk import lint_levels
    from vault_pipeline.errors import FrontmatterError

    findings = []
    for relpath in paths:
        if relpath.startswith(("inbox/", "engrams/", "archive/")):
            continue  # atomic notes are one sentence: no levels to lint
        try:
            _, body, _ = vault.read(relpath)
        except FrontmatterError:
            continue
        findings += [(relpath, " > ".join(f.heading_path) or "(top)", f.bullets) for f in lint_levels(body)]
    return findings


# --------------------------------------------------------------------------- clean


def plan_clean(vault: Vault, *, embedder, llm: StructuredLLM, progress: Progress | None = None,
               wait: float = 0):
    """The nightly sweep's plan (duplicates, supersessions, related links) on a freshly synced index."""
    with vault.lock("clean (plan)", wait=wait):
        return _plan_held(vault, embedder, llm, progress)


def _plan_held(vault: Vault, embedder, llm: StructuredLLM, progress: Progress | None):
    from vault_pipeline.clean.plan import plan
    from vault_pipeline.index.sync import Index, sync

    def report_progress(done: int, total: int) -> None:
        if progress:
            progress(done, total, "clean")

    sync(vault, embedder)
    return plan(vault, Index.open(vault, embedder), llm, progress=report_progress)


def clean(vault: Vault, *, embedder, llm: StructuredLLM, progress: Progress | None = None, wait: float = 0):
    """Plan and apply the sweep (journaled, undoable), then re-sync the index."""
    from vault_pipeline.clean.apply import apply_held
    from vault_pipeline.index.sync import sync

    # One lock across plan, apply and re-index: no other writer slips in between the steps.
    with vault.lock("clean", wait=wait):
        report = apply_held(vault, _plan_held(vault, embedder, llm, progress))
        sync(vault, embedder)
    return report


def undo_clean(vault: Vault, run_id: str, *, embedder=None, wait: float = 0):
    """Restore every file a sweep run changed, byte for byte (files changed since are left alone)."""
    from vault_pipeline.clean.apply import undo_held
    from vault_pipeline.index.sync import sync

    with vault.lock("undo", wait=wait):
        report = undo_held(vault, run_id)
        if embedder is not None:
            sync(vault, embedder)
    return report
