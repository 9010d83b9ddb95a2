"""Writing what an ingest extracted: session and atomic notes, merged topic hubs, thread maps.

Every note goes through ``write_note``, which applies the re-ingest lifecycle rule: the keys
that keep and clean own are taken from the file already in the vault, so re-ingesting an
export never undoes what they decided, and a file that already says it all is not rewritten.
A note written in an older form (the nested ``source`` mapping, a date-only ``created``, no
``tags``) is rewritten in the current one, unless the user edited it: ``Vault.write`` refuses
to overwrite any file whose bytes are not the ones vault_pipeline last wrote.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import PurePosixPath
from typing import Any

from vault_pipeline.errors import ModelError, VaultError
from vault_pipeline.ingest.extract import AtomicUnit, Extraction, ThreadMap, group_threads, map_thread
from vault_pipeline.ingest.notes import (
    atomic_note,
    conversation_created,
    positions,
    session_note,
    thread_note,
    topic_hub,
    topic_tag,
)
from vault_pipeline.ingest.parse import Conversation
from vault_pipeline.ingest.retire import Retirement
from vault_pipeline.ingest.summary import session_summary
from vault_pipeline.models.protocol import StructuredLLM, is_offline
from vault_pipeline.models.workers import ordered
from vault_pipeline.text import wikilinks
from vault_pipeline.vault.files import Vault
from vault_pipeline.vault.frontmatter import source_messages
from vault_pipeline.vault.note import Note

_TOPIC_PREFIXES = (
    "the conversation is about ",
    "this conversation is about ",
    "the topic is ",
    "the session is about ",
    "topic: ",
)

# Keys that keep and clean own: re-ingesting an export must not undo what they decided (nor drop
# the "why and how to undo" line clean leaves on a note it archived, which ingest now follows).
LIFECYCLE_KEYS = (
    "status",
    "tier",
    "kept",
    "quality",
    "related",
    "supersedes",
    "superseded_by",
    "duplicate_of",
    "archived_by",
)


@dataclass
class IngestReport:
    """What an ingest read, wrote, refused and skipped, and how long it took."""

    sources: list[str] = field(default_factory=list)
    conversations: int = 0
    messages: int = 0
    alternates: int = 0
    notes_by_category: Counter = field(default_factory=Counter)
    units_skipped: int = 0  # sentences not sayable in the word limit: left to the transcript, never cut
    not_written: Counter = field(default_factory=Counter)  # candidates below the selector's bar, by reason
    archived: list[str] = field(default_factory=list)  # inbox notes of re-ingested conversations no longer written
    archive_run: str = ""  # the journal run that archived them (``vault clean --undo <run>``)
    topics_named: int = 0  # topic units that only named their topic: named the conversation's hub, not notes
    writes: Counter = field(default_factory=Counter)
    skipped: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # read all the same (e.g. bytes not UTF-8)
    refused: list[str] = field(default_factory=list)
    unwritable: list[str] = field(default_factory=list)  # files that could not be written (permissions)
    errors: list[str] = field(default_factory=list)
    threads: int = 0
    seconds: float = 0.0
    model: str = ""  # the extraction model

    @property
    def files_written(self) -> int:
        """Files created or updated on disk by this run."""
        return self.writes["created"] + self.writes["updated"]

    @property
    def notes(self) -> int:
        """Atomic notes produced (written or already present)."""
        return sum(self.notes_by_category.values())

    def to_dict(self) -> dict[str, Any]:
        """The report as ``vault ingest --json`` prints it (the CLI adds ``exit_code``)."""
        return {
            "conversations": self.conversations,
            "messages": self.messages,
            "alternates": self.alternates,
            "notes": self.notes,
            "notes_by_category": dict(sorted(self.notes_by_category.items())),
            "units_skipped": self.units_skipped,
            "not_written": sum(self.not_written.values()),
            "not_written_reasons": dict(self.not_written.most_common()),
            "archived": self.archived,
            "archive_run": self.archive_run,
            "topics_named": self.topics_named,
            "threads": self.threads,
            "writes": dict(sorted(self.writes.items())),
            "files_written": self.files_written,
            "skipped": self.skipped,
            "warnings": self.warnings,
            "errors": self.errors,
            "refused": self.refused,
            "unwritable": self.unwritable,
            "seconds": round(self.seconds, 3),
            "model": self.model,
        }


@dataclass
class Hubs:
    """The hubs an ingest writes: per hub the notes it links, and the subject tags it carries.

    A subject's hub (``ingest/topics.py``) gathers the sessions and notes of every conversation
    about it; a conversation's own hub (named by its title) gathers its notes, tagged with its
    subjects rather than a tag of its own. Only stems are kept."""

    links: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    tags: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))

    def file(self, subjects: Sequence[str], titles: Sequence[str], session: str, notes: Sequence[str]) -> None:
        """A conversation's session and notes under each subject; its notes under its own hub."""
        for subject in subjects:
            self.links[subject].update([session, *notes])
        for title in titles:
            self.links[title].update(notes)
            self.tags[title].update(topic_tag(t) for t in subjects)


def write_conversation(
    vault: Vault,
    extraction: Extraction,
    report: IngestReport,
    hubs: Hubs,
    written: list[tuple[str, str]] | None = None,
    subjects: Sequence[str] = (),
) -> str:
    """Write a conversation's session note and atomic notes; file them under their subjects' hubs.

    Returns the session note's stem (thread maps link to it); ``written`` receives each atomic
    note's (stem, sentence), for the people pages. ``subjects``: what the conversation is about
    among subjects several conversations share (``ingest/topics.py``)."""
    conv = extraction.conversation
    # A subject tags the session note and every note, and its hub links them all. A topic unit that
    # says more than the title (a model's) is a subject too; one that only names its topic ("The
    # conversation is about Offerte software project.") names the conversation's own hub: no note
    # (the Note Quality Gate refuses it as template filler) and no tag of its own.
    topics = list(dict.fromkeys([*subjects, *(_topic_name(u.text) for u in extraction.units if _own_topic(u))]))
    titles = list(dict.fromkeys(_topic_name(u.text) for u in extraction.units if _names_a_topic(u)))
    # The offline extractor's summary quotes turn openings; once the notes are chosen, say what the
    # session was about and what was established instead (``ingest/summary.py``). A model's stays.
    summary = extraction.summary
    if is_offline(report.model):
        summary = session_summary(conv, extraction.units, extraction.scores, topics)
    session = session_note(conv, summary)
    tags = [*session.frontmatter.get("tags", []), *(topic_tag(t) for t in topics)]
    session = replace(session, frontmatter={**session.frontmatter, "tags": list(dict.fromkeys(tags))})
    # Links use the session note's current name: the user may have renamed it (found by its id).
    session_stem = _stem(write_note(vault, session, report))
    created = conversation_created(conv)
    scores = extraction.scores or (None,) * len(extraction.units)
    kept = [(u, p) for u, p in zip(extraction.units, scores) if not _names_a_topic(u)]
    report.topics_named += len(extraction.units) - len(kept)
    units = [u for u, _ in kept]
    notes = [
        (u, atomic_note(u, conv, session_stem, created, topics, n, p)) for (u, p), n in zip(kept, positions(units))
    ]
    report.units_skipped += extraction.skipped
    stems = []
    for unit, note in notes:
        report.notes_by_category[unit.category] += 1
        stems.append(_stem(write_note(vault, note, report)))
        if written is not None:
            written.append((stems[-1], unit.text))
    hubs.file(topics, titles, session_stem, stems)
    return session_stem


def _stem(relpath: str) -> str:
    return PurePosixPath(relpath).stem


def _own_topic(unit: AtomicUnit) -> bool:
    """A topic unit that names a subject of its own, not the conversation's title."""
    return unit.category == "topic" and not _names_a_topic(unit)


def _names_a_topic(unit: AtomicUnit) -> bool:
    return unit.category == "topic" and unit.text.strip().lower().startswith(_TOPIC_PREFIXES)


def _topic_name(sentence: str) -> str:
    text = sentence.strip().rstrip(".!?").strip()
    lowered = text.lower()
    for prefix in _TOPIC_PREFIXES:
        if lowered.startswith(prefix):
            text = text[len(prefix) :]
            break
    return text[:1].upper() + text[1:]


def write_topic_hubs(vault: Vault, hubs: Hubs, report: IngestReport) -> None:
    """Write each hub, its links merged with those its file already holds; a hub with nothing to
    link is not written. A conversation's own hub carries its subjects' tags, not one of its own."""
    for topic in sorted(hubs.links):
        links = hubs.links[topic] | existing_links(vault, topic_hub(topic, []))
        if not links:
            continue
        hub = topic_hub(topic, sorted(links))
        if topic in hubs.tags:
            hub = replace(hub, frontmatter={**hub.frontmatter, "tags": ["hub", *sorted(hubs.tags[topic])]})
        write_note(vault, hub, report)


def existing_links(vault: Vault, probe: Note) -> set[str]:
    """The notes a hub's file already links (the user may have added some), found by the hub's id."""
    relpath = vault.locate(probe.id)
    if relpath is None:
        return set()
    _, body, _ = vault.read(relpath)
    return {link.target for link in wikilinks(body) if link.target != probe.stem}


def write_threads(
    vault: Vault,
    sessions: Sequence[tuple[Conversation, str, str]],
    llm: StructuredLLM,
    report: IngestReport,
    *,
    concurrency: int = 1,
    retirement: Retirement | None = None,
) -> None:
    """Map each thread of related conversations ((conversation, summary, session stem)) and write it;
    ``concurrency`` maps run at once (written in the threads' order).

    A map already in the vault is judged by this run when the run ingested every session it links:
    one whose line no longer holds together under the current rule (an older rule chained it, or a
    partial ingest mapped part of a line now mapped whole) is archived by ``retirement`` (journaled,
    undoable; one the user edited stays), with ``superseded_by`` naming the map that now holds most
    of its sessions. A map that links sessions this run did not see stays as it is, and stands for
    the line of the sessions it links (a partial ingest sees part of a line)."""
    by_id = {conv.id: (conv, summary, stem) for conv, summary, stem in sessions}

    def mapped(thread: tuple[str, list[Conversation]]) -> ThreadMap | ModelError:
        return _map_or_error(thread, by_id, llm)

    before = _thread_maps(vault)
    judged = _judged(before, {stem for _, _, stem in sessions})
    groups = group_threads([conv for conv, _, _ in sessions])
    stems_of = {key: {by_id[c.id][2] for c in members} for key, members in groups}
    threads = [(key, members) for key, members in groups if not _held(key, stems_of[key], before, judged)]
    written: dict[str, tuple[str, set[str]]] = {}  # key -> (map stem, session stems)
    for (key, members), outcome in ordered(mapped, threads, concurrency):
        thread_map = outcome.result()
        if isinstance(thread_map, ModelError):
            report.errors.append(f"thread {key}: {thread_map}")
            continue
        stems = {c.id: by_id[c.id][2] for c in members}
        written[key] = (_stem(write_note(vault, thread_note(key, thread_map, stems), report)), set(stems.values()))
        report.threads += 1
    if retirement is not None:  # the maps this run judged whose line no longer holds
        report.archived += _retire_maps(retirement, [before[k] for k in sorted(judged - set(stems_of))], written)


def _map_or_error(
    thread: tuple[str, list[Conversation]], by_id: dict[str, tuple[Conversation, str, str]], llm: StructuredLLM
) -> ThreadMap | ModelError:
    key, members = thread
    try:
        return map_thread(key, [(c, by_id[c.id][1]) for c in members], llm)
    except ModelError as exc:
        return exc


def _retire_maps(retirement: Retirement, stale: Sequence[_Map], written: dict[str, tuple[str, set[str]]]) -> list[str]:
    return [path for old in stale for path in retirement.retire_map(old.relpath, old.id, _successor(old, written))]


def _judged(before: dict[str, _Map], seen: set[str]) -> set[str]:
    """The keys of the maps in the vault every session of which this run ingested."""
    return {key for key, m in before.items() if m.sessions and m.sessions <= seen}


def _held(key: str, stems: set[str], before: dict[str, _Map], judged: set[str]) -> bool:
    """Whether a map already in the vault under another key, one this run cannot judge (it links
    sessions the run did not see), links all of a line's sessions: that map is the line's."""
    return any(k != key and k not in judged and stems <= m.sessions for k, m in before.items())


def _successor(old: _Map, written: dict[str, tuple[str, set[str]]]) -> str:
    """The stem of the map written now that holds most of ``old``'s sessions ("" when none holds any)."""
    best = max(written.values(), key=lambda w: (len(w[1] & old.sessions), w[0]), default=("", set()))
    return best[0] if best[1] & old.sessions else ""


@dataclass(frozen=True)
class _Map:
    """A thread map in the vault: where it is, its id, and the session stems it links."""

    relpath: str
    id: str
    sessions: frozenset[str]


def _thread_maps(vault: Vault) -> dict[str, _Map]:
    """Thread key -> its map in the vault."""
    found: dict[str, _Map] = {}
    for relpath in vault.iter_note_paths():
        if not relpath.startswith(THREADS + "/"):
            continue
        try:
            fm, body, _ = vault.read(relpath)
        except VaultError:
            continue
        if fm.get("type") == "thread" and fm.get("thread"):
            links = frozenset(link.target for link in wikilinks(body))
            found[str(fm["thread"])] = _Map(relpath, str(fm.get("id", "")), links)
    return found


THREADS = "threads"


def write_note(vault: Vault, note: Note, report: IngestReport) -> str:
    """Write one note where it lives now (lifecycle keys kept), count the outcome; return its vault path.

    A note is found by its frontmatter ``id``: renamed or moved by the user, it keeps receiving updates."""
    note, same = with_lifecycle(vault, note)
    if same:
        report.writes["unchanged"] += 1
        return vault.locate(note.id) or note.relpath
    outcome = vault.write(note, follow=True)
    report.writes[outcome.outcome] += 1
    if outcome.unwritable:
        report.unwritable.append(f"{outcome.relpath}: {outcome.reason}")
    elif outcome.outcome == "refused":
        report.refused.append(f"{outcome.relpath}: {outcome.reason}")
    return outcome.relpath


def with_lifecycle(vault: Vault, note: Note) -> tuple[Note, bool]:
    """The note with its file's lifecycle keys and merged sources; True when the file already says it all."""
    relpath = vault.locate(note.id)
    if relpath is None or note.type != "atomic":
        return note, False
    try:
        existing, body, _ = vault.read(relpath)
    except (VaultError, OSError):
        return note, False
    frontmatter = dict(note.frontmatter)
    frontmatter.update({k: existing[k] for k in LIFECYCLE_KEYS if k in existing})
    # Clean merges the source messages and tags of the duplicates it absorbed: keep them. The
    # file's messages may be in the older nested ``source`` mapping; they are written flat.
    frontmatter["source_messages"] = _merged(frontmatter.get("source_messages"), source_messages(existing))
    frontmatter["tags"] = _merged(frontmatter.get("tags"), existing.get("tags"))
    # Same properties in another key order (clean appends its keys): nothing to write.
    same = _present(frontmatter) == _present(existing) and body.strip() == note.body.strip()
    return replace(note, frontmatter=frontmatter), same


def _merged(new: object, old: object) -> list:
    """New values then old ones not among them; the old list itself when it holds the same values."""
    new_list = [str(v) for v in new] if isinstance(new, list) else []
    old_list = [str(v) for v in old] if isinstance(old, list) else []
    merged = list(dict.fromkeys([*new_list, *old_list]))
    return old_list if set(old_list) == set(merged) and len(old_list) == len(merged) else merged


def _present(frontmatter: dict) -> dict:
    """Keys as rendered: empty values are not written, so they do not count as a difference."""
    return {k: v for k, v in frontmatter.items() if v not in (None, "", [], {})}
