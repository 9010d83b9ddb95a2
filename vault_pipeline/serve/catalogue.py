"""What the MCP note tools read: every note's properties, links and times, from the files.

The files are the truth (the index is derived and may lag), so ``recent``, ``list_notes``,
``neighbours`` and a lookup by id read the vault's notes themselves. ``Catalogue`` keeps one entry
per note and re-reads only the files whose size or modification time changed since, so a second
call over thousands of notes costs a directory walk. A note whose frontmatter does not parse is
listed from its body, with ``broken`` set (a hand-edited note stays findable).
"""

from __future__ import annotations

import os
import re
import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import PurePosixPath
from typing import Any

from vault_pipeline.errors import FrontmatterError, VaultError
from vault_pipeline.ingest.people import PEOPLE_FOLDER, person_stem
from vault_pipeline.text import link_target, wikilinks
from vault_pipeline.vault.files import FOLDERS, Vault
from vault_pipeline.vault.frontmatter import split_frontmatter

MAX_SCAN_BYTES = 1024 * 1024  # a note's head read for its properties and links (a huge file is listed by this)
TITLE_CHARS = 120
_HEADING = re.compile(r"^#{1,6}[ \t]+(.+?)[ \t#]*$", re.M)
_SINCE = re.compile(r"^(\d{1,6})\s*([mhdw])$")
_UNITS = {"m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


@dataclass(frozen=True)
class Entry:
    """One note as the catalogue lists it."""

    path: str
    id: str
    type: str
    status: str
    title: str
    tags: tuple[str, ...]
    links: tuple[str, ...]  # the stems it links (body and properties), in order, once each
    session: str  # the stem of its session note ("" when none)
    created: str
    modified: float  # the file's modification time (POSIX seconds)
    size: int
    broken: str = ""  # why its frontmatter did not parse ("" when it did)

    @property
    def stem(self) -> str:
        """The file name without ``.md``: what a wikilink resolves."""
        return PurePosixPath(self.path).stem

    def summary(self) -> dict[str, Any]:
        """The entry as a listing shows it (small: no body)."""
        data: dict[str, Any] = {
            "path": self.path,
            "id": self.id,
            "title": self.title,
            "type": self.type,
            "status": self.status,
            "tags": list(self.tags[:10]),
            "modified": modified_iso(self.modified),
        }
        if self.broken:
            data["broken"] = self.broken
        return data


@dataclass
class Catalogue:
    """Entries for every note of the vault at ``root``, refreshed from the files on each ``entries()``."""

    root: Any
    _cache: dict[str, tuple[tuple[int, int], Entry]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def entries(self) -> list[Entry]:
        """Every note, by path; files changed since the last call are read again."""
        vault = Vault(self.root)
        try:
            paths = vault.iter_note_paths()
        finally:
            vault.close()
        with self._lock:
            fresh: dict[str, tuple[tuple[int, int], Entry]] = {}
            for relpath in paths:
                try:
                    st = os.stat(os.path.join(self.root, relpath))
                except OSError:
                    continue  # gone since the walk
                key = (st.st_size, st.st_mtime_ns)
                cached = self._cache.get(relpath)
                if cached is not None and cached[0] == key:
                    fresh[relpath] = cached
                    continue
                entry = _read_entry(self.root, relpath, st.st_mtime, st.st_size)
                if entry is not None:
                    fresh[relpath] = (key, entry)
            self._cache = fresh
            return [entry for _, entry in fresh.values()]

    def resolve(self, path: str | None = None, note_id: str | None = None) -> Entry:
        """The note at ``path`` or with frontmatter ``id`` ``note_id`` (exactly one of them)."""
        path, note_id = (path or "").strip(), (note_id or "").strip()
        if bool(path) == bool(note_id):
            raise VaultError("give the note's `path` or its `id` (one of them)")
        entries = self.entries()
        if path:
            found = [e for e in entries if e.path == path]
            if not found:
                raise VaultError(f"{path}: no such note")
            return found[0]
        found = [e for e in entries if e.id == note_id]
        if not found:
            raise VaultError(f"no note has id {note_id!r}")
        return min(found, key=lambda e: e.path)


def _read_entry(root: Any, relpath: str, mtime: float, size: int) -> Entry | None:
    try:
        with open(os.path.join(root, relpath), "rb") as fh:
            text = fh.read(MAX_SCAN_BYTES).decode("utf-8", errors="replace")
    except OSError:
        return None
    broken = ""
    try:
        props, body = split_frontmatter(text, relpath)
    except FrontmatterError as exc:
        props, body, broken = {}, text, str(exc)
    props = props if isinstance(props, dict) else {}
    links = [w.target for w in wikilinks(body)]
    links += [t for value in props.values() for t in _link_values(value)]
    return Entry(
        path=relpath,
        id=_text(props.get("id")),
        type=_text(props.get("type")),
        status=_text(props.get("status")),
        title=title_of(body, relpath),
        tags=tuple(_text(t).lstrip("#") for t in _as_list(props.get("tags")) if _text(t)),
        links=tuple(dict.fromkeys(PurePosixPath(t.strip()).name for t in links if t.strip())),
        session=PurePosixPath(link_target(props.get("session")) or "").name,
        created=_text(props.get("created")),
        modified=mtime,
        size=size,
        broken=broken,
    )


def _link_values(value: Any) -> list[str]:
    return [target for item in _as_list(value) if isinstance(item, str) and (target := link_target(item))]


def _as_list(value: Any) -> list[Any]:
    if value is None:
        return []
    return list(value) if isinstance(value, (list, tuple)) else [value]


def _text(value: Any) -> str:
    return "" if value is None else str(value)


def title_of(body: str, relpath: str) -> str:
    """A note's first heading, else its first line, else its file name; at most ``TITLE_CHARS``."""
    heading = _HEADING.search(body)
    line = heading[1] if heading else next((ln.strip() for ln in body.splitlines() if ln.strip()), "")
    line = " ".join(line.split()) or PurePosixPath(relpath).stem
    return line if len(line) <= TITLE_CHARS else line[: TITLE_CHARS - 1] + "…"


def modified_iso(mtime: float) -> str:
    """A file time as ISO 8601 UTC to the second."""
    return datetime.fromtimestamp(mtime, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def parse_since(since: str, now: datetime | None = None) -> datetime:
    """``since`` as a UTC time: ISO 8601 ("2026-11-30", "2026-11-30T09:00", with or without a zone) or a
    span back from now ("30m", "12h", "7d", "2w")."""
    text = (since or "").strip()
    now = now or datetime.now(UTC)
    span = _SINCE.match(text.lower())
    if span:
        return now - timedelta(**{_UNITS[span[2]]: int(span[1])})
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise VaultError(
            f"since {text[:40]!r}: give an ISO date or time (2026-11-30, 2026-11-30T09:00Z) or a span (30m, 12h, 7d, 2w)"
        ) from None
    return when if when.tzinfo else when.replace(tzinfo=UTC)


def check_folder(folder: str) -> str:
    """A vault folder name (``FOLDERS``), refused otherwise."""
    name = (folder or "").strip().strip("/")
    if name not in FOLDERS:
        raise VaultError(f"folder {folder[:40]!r} is not one of {', '.join(FOLDERS)}")
    return name


def matches_tag(entry: Entry, tag: str) -> bool:
    """Whether the note carries ``tag`` or a tag nested under it ("topic" matches "topic/django"), any case."""
    want = tag.strip().lstrip("#").casefold()
    return any(t.casefold() == want or t.casefold().startswith(want + "/") for t in entry.tags)


def person_notes(entries: list[Entry], person: str) -> list[Entry]:
    """The person's page (``people/<name>.md``), the notes it links and the notes that link it; with
    no page, the notes whose title names them."""
    name = " ".join(person.split())
    pages = [e for e in entries if e.path.startswith(f"{PEOPLE_FOLDER}/")]
    page = next((e for e in pages if e.stem == person_stem(name)), None) or next(
        (e for e in pages if e.title.casefold() == name.casefold()), None
    )  # the page ingest writes, else one the user made and titled with the name
    if page is None:
        word = re.compile(rf"\b{re.escape(name)}\b")
        return [e for e in entries if word.search(e.title)]
    members = set(page.links)
    return [page] + [e for e in entries if e is not page and (e.stem in members or page.stem in e.links)]


def by_stem(entries: list[Entry]) -> dict[str, Entry]:
    """Stem -> note (the first by path when two folders hold the same name)."""
    found: dict[str, Entry] = {}
    for entry in sorted(entries, key=lambda e: e.path):
        found.setdefault(entry.stem, entry)
    return found
