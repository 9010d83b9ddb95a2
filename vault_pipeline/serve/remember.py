"""``remember``: a client's text becomes provisional atomic notes, the way an export does.

The text is one user message of a one-message conversation; the extraction operator cuts it
into atomic units, the Note Quality Gate's hard rules judge each (a unit that fails is reported
with its reasons, not written, so the calling model can say it better; the selector that picks
notes out of a chat archive does not: the user asked for this one to be remembered), and the
passing units are written into ``inbox/`` with a session note in ``sessions/`` holding the
text they came from (topic units, which name an ingest's topic hubs, are left out: a memory makes
no hub). Provenance is ``source_kind: mcp`` plus ``source_client``, the calling
client's name. Nothing is overwritten or deleted: a note whose id is already in the vault is
reported as already remembered. All of it, and the index sync after it, under the vault lock.
"""

from __future__ import annotations

import hashlib
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
    wait: float = 30.0,
    now: datetime | None = None,
) -> RememberReport:
    """Extract, gate and write provisional notes from ``text``; re-sync the index when ``embedder`` is given."""
    conv = _conversation(text, client, now or datetime.now(UTC))
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
    with vault.lock("remember", wait=wait):
        _write(vault, conv, extraction.summary, passing, client, report)
        link_people(vault, text, [PurePosixPath(p).stem for p in [report.session, *report.written]])
        if embedder is not None and report.written:
            from vault_pipeline.index.sync import sync

            sync(vault, embedder)
            report.indexed = True
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
    conv_id = "mcp-" + hashlib.sha256(normalise_text(text).encode("utf-8")).hexdigest()[:16]
    speaker = client or "mcp client"
    title = shorten(" ".join(text.split()), TITLE_CHARS)
    message = Message("1", "user", speaker, text, now)
    return Conversation(MCP_KIND, conv_id, title, now, now, (message,), f"mcp:{speaker}")


def _write(
    vault: Vault, conv: Conversation, summary: str, units: list[AtomicUnit], client: str, report: RememberReport
) -> None:
    """Write the session note and each unit's note; a note already in the vault is left as it is."""
    session = _with_client(session_note(conv, summary), client)
    created = (conv.created or datetime.now(UTC)).isoformat(timespec="seconds")
    notes = [
        _with_client(atomic_note(unit, conv, session.stem, created, position=n), client)
        for unit, n in zip(units, positions(units))
    ]
    report.session = _put(vault, session, report, atomic=False)
    for note in notes:
        _put(vault, note, report, atomic=True)


def _with_client(note: Note, client: str) -> Note:
    return replace(note, frontmatter={**note.frontmatter, "source_client": client or "unknown"})


def _put(vault: Vault, note: Note, report: RememberReport, *, atomic: bool) -> str:
    """Create ``note`` unless its id is already in the vault; never overwrite."""
    where = vault.locate(note.id)
    if where is not None:
        if atomic:
            report.present.append(where)
        return where
    outcome = vault.write(note)
    if outcome.outcome == "created":
        if atomic:
            report.written.append(outcome.relpath)
        return outcome.relpath
    if atomic:  # refused: a different file already sits at that path
        report.refused.append((note.body.splitlines()[0], [outcome.reason]))
    return outcome.relpath
