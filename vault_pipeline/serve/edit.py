"""The MCP tools that change notes: ``edit_note``, ``archive_note``, ``supersede`` and their ``undo``.

On the vault's own rules: every change is made under the vault lock, journaled first
(``vault/journal.py``: the file's bytes copied, then where it ended), so ``vault clean --undo RUN``
or the ``undo`` tool puts it back byte for byte; nothing is ever deleted (archiving moves a note to
``archive/`` with ``status: archived`` and an ``archived_by`` line saying why and how to undo it).
A file the user changed since the caller read it (its ``version``) or while the change was being
written is refused, never overwritten; a user's edit after ours makes undo leave the file alone.
An edit through a tool is the user's own (made on their behalf): the file does not become
vault_pipeline's again, so a later ingest leaves it as edited. Decision 0142.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vault_pipeline.errors import DirtyFileError, VaultError
from vault_pipeline.serve.catalogue import Entry
from vault_pipeline.vault.files import Vault
from vault_pipeline.vault.frontmatter import split_frontmatter
from vault_pipeline.vault.journal import Journal, load_journal
from vault_pipeline.vault.note import wikilink
from vault_pipeline.vault.state import atomic_write, edit_frontmatter_text, sha256_bytes

ARCHIVE = "archive"
TOOL_RUNS = ("edit", "archive", "supersede")  # the journal kinds these tools write (what `undo` undoes)
# Keys a property edit may not set: the note's identity, its lifecycle (archive_note, supersede,
# `vault keep`) and its provenance (what its citation stands on).
PROTECTED = frozenset(
    {"id", "type", "status", "tier", "archived_by", "superseded_by", "supersedes", "duplicate_of", "session", "created"}
)
MAX_TEXT_CHARS = 20_000  # text one edit may add or put in a section
MAX_PROPERTIES = 20
MAX_VALUE_CHARS = 2_000
MAX_LIST_ITEMS = 100
_KEY = re.compile(r"^[A-Za-z][\w-]{0,63}$")
_RUN_ID = re.compile(r"^\d{8}T\d{12}Z-[0-9a-f]{8}$")
_HEADING_LINE = re.compile(r"^(#{1,6})[ \t]+(.+?)[ \t#]*$")
_FENCE = re.compile(r"^[ \t]{0,3}(```|~~~)")


@dataclass(frozen=True)
class Change:
    """What one tool call changed: the note's path (after a move), its new version, the journal run."""

    path: str
    id: str
    version: str
    run_id: str
    changed: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        """The change as the tool returns it, with how to undo it."""
        return {
            "path": self.path,
            "id": self.id,
            "version": self.version,
            "changed": list(self.changed),
            "run_id": self.run_id,
            "undo": f"vault clean --undo {self.run_id}",
        }


def edit_note(
    vault: Vault,
    entry: Entry,
    *,
    append: str | None = None,
    section: str | None = None,
    content: str | None = None,
    properties: dict[str, Any] | None = None,
    version: str | None = None,
) -> Change:
    """Append to a note, replace one section's text, and/or set properties; one journaled write."""
    changes = check_properties(properties or {})
    _check_edit(append, section, content, changes)
    data = _current(vault, entry, version)
    text, changed = data.decode("utf-8"), []
    if changes:
        text = edit_frontmatter_text(text, changes, entry.path)
        changed += [f"property {key}" for key in changes]
    if section is not None and content is not None:
        text = _with_body(text, entry.path, lambda body: replace_section(body, section, content, entry.path))
        changed.append(f"section {section.strip()}")
    if append is not None and append.strip():
        text = _with_body(text, entry.path, lambda body: f"{body.rstrip()}\n\n{append.strip()}\n")
        changed.append("appended")
    new = text.encode("utf-8")
    if new == data:
        raise VaultError(f"{entry.path}: already as asked; nothing changed")
    journal = Journal(vault, "edit", entry.path + "\n".join(changed))
    key = entry.id or entry.path
    journal.before(key, entry.path, data, note_id=entry.id)
    journal.expect(key, [(entry.path, sha256_bytes(new))])
    try:
        atomic_write(vault.path(entry.path), new, expect_sha256=sha256_bytes(data))
    except DirtyFileError:  # nothing of ours to record: undo leaves the user's file alone
        raise VaultError(f"{entry.path}: changed while the edit was being written; left as the user saved it") from None
    sha = journal.after(key, entry.path)
    journal.finish([{"n": 1, "action": "edit", "path": entry.path, "changed": changed}], [])
    return Change(entry.path, entry.id, sha, journal.run_id, tuple(changed))


def _check_edit(append: str | None, section: str | None, content: str | None, changes: dict[str, Any]) -> None:
    if append is None and section is None and not changes:
        raise VaultError("nothing to change: give `append`, `section` with `content`, or `properties`")
    if (section is None) != (content is None):
        raise VaultError("replacing a section takes both `section` (its heading) and `content` (its new text)")
    for name, value in (("append", append), ("content", content)):
        if value is not None and len(value) > MAX_TEXT_CHARS:
            raise VaultError(f"{name}: {len(value):,} characters; at most {MAX_TEXT_CHARS:,} per edit")


def archive_note(vault: Vault, entry: Entry, reason: str, version: str | None = None) -> Change:
    """Move a note to ``archive/`` with ``status: archived`` and an ``archived_by`` line (journaled)."""
    why = _reason(reason)
    _live(entry, vault)
    data = _current(vault, entry, version)
    journal = Journal(vault, "archive", entry.path)
    changes = {"status": "archived", "archived_by": _archived_by(journal, why)}
    path = _journaled_edit(journal, vault, entry, data, changes, folder=ARCHIVE)
    journal.finish([{"n": 1, "action": "archive", "id": entry.id, "path": entry.path, "reason": why}], [])
    return Change(path, entry.id, sha256_bytes((Path(vault.root) / path).read_bytes()), journal.run_id, ("archived",))


def supersede(vault: Vault, older: Entry, newer: Entry, reason: str = "") -> tuple[Change, Change]:
    """``newer`` replaces ``older``: newer gains ``supersedes``, older is archived with ``superseded_by``."""
    if older.path == newer.path:
        raise VaultError(f"{older.path}: a note cannot supersede itself")
    _live(older, vault)
    _live(newer)
    old_data, new_data = _current(vault, older, None), _current(vault, newer, None)
    journal = Journal(vault, "supersede", f"{older.path}\n{newer.path}")
    link = wikilink(newer.stem)
    new_props, _ = split_frontmatter(new_data.decode("utf-8"), newer.path)
    supersedes = _union(new_props.get("supersedes"), wikilink(older.stem))
    why = f"superseded by {link}" + (f": {_reason(reason)}" if reason.strip() else "")
    newer_path = _journaled_edit(journal, vault, newer, new_data, {"supersedes": supersedes}, action=1)
    older_changes = {"superseded_by": link, "status": "archived", "archived_by": _archived_by(journal, why)}
    older_path = _journaled_edit(journal, vault, older, old_data, older_changes, folder=ARCHIVE, action=1)
    journal.finish([{"n": 1, "action": "supersede", "newer": newer.id, "older": older.id}], [])
    root = Path(vault.root)
    return (
        Change(older_path, older.id, sha256_bytes((root / older_path).read_bytes()), journal.run_id, ("archived",)),
        Change(newer_path, newer.id, sha256_bytes((root / newer_path).read_bytes()), journal.run_id, ("supersedes",)),
    )


def undo_run(vault: Vault, run_id: str) -> dict[str, Any]:
    """Undo one run these tools made (``TOOL_RUNS``), as ``vault clean --undo`` does; a file changed
    since is left alone (the report says so). The caller holds the vault lock."""
    from vault_pipeline.clean.undo import undo_held

    run = (run_id or "").strip()
    if not _RUN_ID.match(run):
        raise VaultError(
            f"run {run[:40]!r}: not a run id (as an edit's `run_id` gives it, e.g. 20261201T101500123456Z-1a2b3c4d)"
        )
    kind = load_journal(vault, run).get("kind", "")
    if kind not in TOOL_RUNS:
        raise VaultError(
            f"run {run} is a `{kind}` run, not one of these tools'; undo it with `vault clean --undo {run}`"
        )
    report = undo_held(vault, run)
    return report.to_dict()


def check_properties(properties: dict[str, Any]) -> dict[str, Any]:
    """The property changes, validated: plain keys, none of ``PROTECTED``, scalar or short-list values
    (None removes the key)."""
    if not isinstance(properties, dict):
        raise VaultError("properties: give an object of key: value")
    if len(properties) > MAX_PROPERTIES:
        raise VaultError(f"properties: {len(properties)} keys; at most {MAX_PROPERTIES} per edit")
    for key, value in properties.items():
        if not _KEY.match(str(key)):
            raise VaultError(f"property {str(key)[:40]!r}: a key is a letter then letters, digits, - or _")
        if key in PROTECTED or str(key).startswith("source"):
            raise VaultError(
                f"property {key!r} is the vault's own (identity, lifecycle or provenance); "
                "use archive_note or supersede, or `vault keep`"
            )
        _check_value(key, value)
    return dict(properties)


def _check_value(key: str, value: Any) -> None:
    items = value if isinstance(value, list) else [value]
    if isinstance(value, list) and len(value) > MAX_LIST_ITEMS:
        raise VaultError(f"property {key!r}: {len(value)} items; at most {MAX_LIST_ITEMS}")
    for item in items:
        if item is not None and not isinstance(item, (str, int, float, bool)):
            raise VaultError(f"property {key!r}: a value is text, a number, true/false, a list of those, or null")
        if isinstance(item, str) and len(item) > MAX_VALUE_CHARS:
            raise VaultError(f"property {key!r}: a value of {len(item):,} characters; at most {MAX_VALUE_CHARS:,}")


def replace_section(body: str, section: str, content: str, relpath: str) -> str:
    """``body`` with the text under heading ``section`` (up to the next heading of its level or
    higher) replaced by ``content``; the heading stays. Headings inside code fences do not count."""
    want = " ".join(section.strip().lstrip("#").split()).casefold()
    lines = body.splitlines(keepends=True)
    headings = _headings(lines)
    found = [(i, level) for i, level, title in headings if " ".join(title.split()).casefold() == want]
    if not found:
        names = ", ".join(repr(title) for _, _, title in headings[:10]) or "none"
        raise VaultError(f"{relpath}: no section {section.strip()[:60]!r} (its headings: {names})")
    if len(found) > 1:
        raise VaultError(f"{relpath}: {len(found)} sections are called {section.strip()[:60]!r}; edit it by hand")
    start, level = found[0]
    end = next((i for i, lvl, _ in headings if i > start and lvl <= level), len(lines))
    tail = "\n" if end < len(lines) else ""
    middle = f"\n{content.strip()}\n{tail}" if content.strip() else tail
    head = "".join(lines[: start + 1])
    return head + ("" if head.endswith("\n") else "\n") + middle + "".join(lines[end:])


def _headings(lines: list[str]) -> list[tuple[int, int, str]]:
    """(line number, level, title) of each ATX heading outside code fences."""
    found, fence = [], ""
    for i, line in enumerate(lines):
        opened = _FENCE.match(line)
        if opened:
            fence = "" if fence and opened[1] == fence else (fence or opened[1])
            continue
        heading = None if fence else _HEADING_LINE.match(line.rstrip("\r\n"))
        if heading:
            found.append((i, len(heading[1]), heading[2]))
    return found


def _with_body(text: str, relpath: str, change) -> str:
    """``text`` with its body (after the frontmatter) replaced by ``change(body)``."""
    _, body = split_frontmatter(text, relpath)
    head = text[: len(text) - len(body)] if body else text
    return head + change(body)


def _current(vault: Vault, entry: Entry, version: str | None) -> bytes:
    """The note's bytes now; refused when they are not the ``version`` the caller read."""
    try:
        data = vault.path(entry.path).read_bytes()
    except OSError as exc:
        raise VaultError(f"{entry.path}: cannot be read: {exc.strerror or exc}") from None
    if version and sha256_bytes(data) != version.strip():
        raise VaultError(f"{entry.path}: changed since you read it (the user's edit wins); read it again")
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        raise VaultError(f"{entry.path}: not UTF-8 text; left untouched") from None
    if entry.broken:
        raise VaultError(f"{entry.path}: its frontmatter does not parse ({entry.broken}); fix it by hand first")
    return data


def _live(entry: Entry, vault: Vault | None = None) -> None:
    """Refuse a note already archived, or (with ``vault``) one whose name ``archive/`` holds already."""
    if entry.status == "archived" or entry.path.startswith(f"{ARCHIVE}/"):
        raise VaultError(f"{entry.path}: already archived")
    if vault is not None and (Path(vault.root) / ARCHIVE / Path(entry.path).name).exists():
        raise VaultError(f"{ARCHIVE}/{Path(entry.path).name} exists already; {entry.path} left where it is")


def _reason(reason: str) -> str:
    why = " ".join((reason or "").split())
    if not why:
        raise VaultError("give a `reason` (it goes into the note's archived_by line)")
    if len(why) > 300:
        raise VaultError(f"reason: {len(why)} characters; at most 300")
    return why


def _archived_by(journal: Journal, why: str) -> str:
    return f"mcp {journal.stamp} — {why} (undo: vault clean --undo {journal.run_id})"


def _journaled_edit(
    journal: Journal,
    vault: Vault,
    entry: Entry,
    data: bytes,
    changes: dict[str, Any],
    *,
    folder: str = "",
    action: int = 0,
) -> str:
    key = f"{action}:{entry.id or entry.path}" if action else entry.id or entry.path
    try:
        return journal.edit(key, entry.path, data, changes, note_id=entry.id, action=action, folder=folder)
    except DirtyFileError as exc:
        raise VaultError(f"{exc}; left untouched") from None


def _union(existing: Any, link: str) -> list[str]:
    links = [str(v) for v in (existing if isinstance(existing, list) else [existing] if existing else [])]
    return links if link in links else [*links, link]
