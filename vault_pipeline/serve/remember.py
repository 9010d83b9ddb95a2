"""``remember``: a client's text becomes provisional atomic notes, the way an export does.

The text is one user message of a one-message conversation; the extraction operator cuts it
into atomic units, the Note Quality Gate's hard rules judge each (a unit that fails is reported
with its reasons, not written, so the calling model can say it better; the selector that picks
notes out of a chat archive does not: the user asked for this one to be remembered), and the
passing units are written into ``inbox/``, linked to the client's running session note in
``sessions/`` (one per client while the server runs, a message per remembered text) (topic units, which name an ingest's topic hubs, are left out: a memory makes
no hub). Provenance is ``source_kind: mcp`` plus ``source_client``, the calling
client's name. Nothing is overwritten or deleted: a note whose id is already in the vault is
reported as already remembered. Writes hold the vault lock, queued in turn (``vault.lock`` serves
one thread of a process at a time); the index sync after them is shared (``_Syncs``).
"""

from __future__ import annotations

import hashlib
import threading
import time
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import PurePosixPath
from typing import cast

from vault_pipeline.errors import VaultError
from vault_pipeline.ingest.extract import (
    CATEGORIES,
    AtomicUnit,
    extract_conversation,
    shorten,
)
from vault_pipeline.ingest.notes import atomic_note, positions, session_note
from vault_pipeline.ingest.parse.types import Conversation, Kind, Message
from vault_pipeline.ingest.people import link_people
from vault_pipeline.ingest.quality import hard_problems, word_limit
from vault_pipeline.models.protocol import StructuredLLM
from vault_pipeline.text import normalise_text
from vault_pipeline.vault.files import Vault
from vault_pipeline.vault.note import Note

# The parse stage's Kind names export formats; "mcp" is a source that never passes through a parser.
MCP_KIND = cast(Kind, "mcp")
WRITE_WAIT = 120.0  # seconds a call waits its turn at the vault lock (others' writes, a sync) before it says so
MAX_TEXT_CHARS = 20_000  # a memory, not an archive: longer text belongs in `vault ingest`
TITLE_CHARS = 60


@dataclass
class RememberReport:
    """What a remember call wrote, found already present, and refused (with the gate's reasons)."""

    written: list[str] = field(default_factory=list)  # vault-relative paths of new atomic notes
    present: list[str] = field(default_factory=list)  # atomic notes already in the vault
    refused: list[tuple[str, list[str]]] = field(default_factory=list)  # (sentence, reasons)
    session: str = ""  # the session note holding the remembered text
    indexed: bool = False

    def to_dict(self) -> dict:
        """JSON-ready."""
        return {
            "written": self.written,
            "already_present": self.present,
            "refused": [{"sentence": s, "reasons": r} for s, r in self.refused],
            "session": self.session,
            "indexed": self.indexed,
        }


def remember(
    vault: Vault,
    text: str,
    llm: StructuredLLM,
    *,
    kind: str | None = None,
    client: str = "",
    embedder=None,
    wait: float = WRITE_WAIT,
    now: datetime | None = None,
) -> RememberReport:
    """Extract, gate and write provisional notes from ``text``; re-sync the index when ``embedder`` is given.

    Concurrent calls queue for the vault lock (``wait`` seconds at most) and hold it only to write
    their files; one index sync then serves every call written before it started."""
    when = now or datetime.now(UTC)
    conv = _conversation(text, client, when)
    if kind is not None and kind not in CATEGORIES:
        raise VaultError(f"kind {kind!r} is not one of {', '.join(CATEGORIES)}")
    extraction = extract_conversation(conv, llm)
    report = RememberReport()
    passing = []
    for unit in extraction.units:
        if unit.category == "topic" and kind != "topic":
            continue  # what the text is about names a topic hub in an ingest; a memory makes no hub
        unit = unit if kind is None else unit.model_copy(update={"category": kind})
        problems = hard_problems(unit.text, unit.category, limit=word_limit(unit.text, text))
        if problems:
            report.refused.append((unit.text, problems))
        else:
            passing.append(unit)
    if not passing:
        return report
    started = time.monotonic()
    with vault.lock("remember", wait=wait):
        _write(vault, conv, passing, client, report, when)
        link_people(vault, text, [PurePosixPath(p).stem for p in [report.session, *report.written]])
    if embedder is not None and report.written:
        from vault_pipeline.index.sync import sync

        def run() -> None:
            with vault.lock("remember (index)", wait=max(0.0, wait - (time.monotonic() - started))):
                sync(vault, embedder)

        report.indexed = _syncs(vault).after_write(run, deadline=started + wait)
    return report


def _conversation(text: str, client: str, now: datetime) -> Conversation:
    """The text as a one-message conversation; its id is the text's, so the same memory is one note."""
    text = text.strip()
    if not text:
        raise VaultError("nothing to remember: the text is empty")
    if len(text) > MAX_TEXT_CHARS:
        raise VaultError(
            f"text of {len(text):,} characters; remember takes at most {MAX_TEXT_CHARS:,} (use `vault ingest`)"
        )
    digest = hashlib.sha256(normalise_text(text).encode("utf-8")).hexdigest()[:16]
    speaker = client or "mcp client"
    title = shorten(" ".join(text.split()), TITLE_CHARS)
    # The message id is the text's too: its block in the client's running session note is unique.
    message = Message(digest, "user", speaker, text, now)
    return Conversation(MCP_KIND, "mcp-" + digest, title, now, now, (message,), f"mcp:{speaker}")


# --------------------------------------------------------------------------- the running session


@dataclass
class _Running:
    """A client's session while the server runs: every text it asked to remember, one message each."""

    conv_id: str
    title: str
    created: datetime
    messages: list[Message] = field(default_factory=list)


_RUNNING: dict[tuple[str, str], _Running] = {}
_RUNNING_GUARD = threading.Lock()


def _running(vault: Vault, client: str, now: datetime) -> _Running:
    """The client's running session on this vault (made on its first memory)."""
    key = (str(vault.root), client)
    with _RUNNING_GUARD:
        if key not in _RUNNING:
            speaker = client or "mcp client"
            stamp = now.strftime("%Y-%m-%d %H:%M")
            digest = hashlib.sha256(f"{speaker}\0{now.isoformat()}".encode()).hexdigest()[:16]
            _RUNNING[key] = _Running(f"mcp-session-{digest}", f"Memories from {speaker}, {stamp}", now)
        return _RUNNING[key]


def _session_of(running: _Running, conv: Conversation) -> Conversation:
    """The running session as a conversation, with ``conv``'s message added once."""
    if all(m.id != conv.messages[0].id for m in running.messages):
        running.messages.append(conv.messages[0])
    last = running.messages[-1].created or running.created
    return Conversation(
        MCP_KIND, running.conv_id, running.title, running.created, last, tuple(running.messages), conv.source
    )


def _write(
    vault: Vault, conv: Conversation, units: list[AtomicUnit], client: str, report: RememberReport, now: datetime
) -> None:
    """Write (or extend) the client's running session note, then each unit's note; a note already in
    the vault is left as it is."""
    session_conv = _session_of(_running(vault, client, now), conv)
    count = len(session_conv.messages)
    summary = f"What {conv.messages[0].speaker} asked the vault to remember in this session: {count} text(s)."
    session = _with_client(session_note(session_conv, summary), client)
    outcome = vault.write(session)  # ours to extend; a user's edit of it is left alone (refused)
    report.session = outcome.relpath
    created = (conv.created or now).isoformat(timespec="seconds")
    for unit, n in zip(units, positions(units)):
        _put(vault, _with_client(atomic_note(unit, conv, session.stem, created, position=n), client), report)


class _Syncs:
    """Group commit for the index: a sync that starts after a call's files were written covers them,
    so twenty calls at once pay for one or two syncs, not twenty in a row."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._started = self._done = 0
        self._running = False

    def after_write(self, run, *, deadline: float) -> bool:
        """True once a sync begun after now has finished (``run`` does one); False past ``deadline``
        (the watcher, or the next call, indexes the files then)."""
        with self._cond:
            ticket = self._started + 1
            while self._done < ticket:
                if not self._running:
                    self._running, self._started = True, self._started + 1
                    mine = self._started
                    break
                if not self._cond.wait(timeout=max(0.0, deadline - time.monotonic())):
                    return self._done >= ticket
            else:
                return True
        finished = False
        try:
            run()
            finished = True
        finally:
            with self._cond:
                self._running = False
                if finished:
                    self._done = max(self._done, mine)
                self._cond.notify_all()
        return True


_SYNCS: dict[str, _Syncs] = {}


def _syncs(vault: Vault) -> _Syncs:
    with _RUNNING_GUARD:
        return _SYNCS.setdefault(str(vault.root), _Syncs())


def _with_client(note: Note, client: str) -> Note:
    return replace(note, frontmatter={**note.frontmatter, "source_client": client or "unknown"})


def _put(vault: Vault, note: Note, report: RememberReport) -> None:
    """Create an atomic ``note`` unless its id is already in the vault; never overwrite."""
    where = vault.locate(note.id)
    if where is not None:
        report.present.append(where)
        return
    outcome = vault.write(note)
    if outcome.outcome == "created":
        report.written.append(outcome.relpath)
    else:  # refused: a different file already sits at that path, or it cannot be written
        report.refused.append((note.body.splitlines()[0], [outcome.reason]))
