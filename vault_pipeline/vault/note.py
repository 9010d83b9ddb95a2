"""A vault note as a value: where it goes, what it says, its tier and its readable file name.

Nothing here touches the file system; ``vault.files`` is the only module that writes.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from pathlib import PurePath, PurePosixPath
from typing import Any

from vault_pipeline.models.calllog import redact
from vault_pipeline.text import normalise_text
from vault_pipeline.vault.frontmatter import render_note

TIER_WEIGHTS = {"engram": 1.0, "resource": 0.8, "chat": 0.6, "web": 0.1}
MAX_STEM_BYTES = 120

_FOLDER_TIERS = {
    "engrams": "engram",
    "resources": "resource",
    "web": "web",
    "inbox": "chat",
    "sessions": "chat",
    "threads": "chat",
    "topics": "chat",
    "people": "chat",
    # Archived copies are ours (duplicates, superseded notes), not the user's own writing.
    "archive": "chat",
}
_TIER_ALIASES = {"transcript": "chat"}
_APOSTROPHES = re.compile(r"['’‘`]")
_RESERVED = {"con", "prn", "aux", "nul", *(f"com{i}" for i in range(10)), *(f"lpt{i}" for i in range(10))}


def wikilink(stem: str, anchor: str = "") -> str:
    """An Obsidian wikilink to a note stem, optionally to a heading or ``^block``."""
    return f"[[{stem}#{anchor}]]" if anchor else f"[[{stem}]]"


# --------------------------------------------------------------------------- the Note value


@dataclass(frozen=True)
class Note:
    """One vault note as a value: where it goes and what it says."""

    id: str
    type: str
    folder: str
    stem: str
    frontmatter: dict = field(hash=False)
    body: str = field(hash=False)

    @property
    def relpath(self) -> str:
        """Vault-relative path, always with forward slashes."""
        return f"{self.folder}/{self.stem}.md"

    def text(self) -> str:
        """The file's full text, exactly as it is written."""
        return render_note({**self.frontmatter, "id": self.id, "type": self.type}, self.body)


def note_id(prefix: str, *parts: object) -> str:
    """``<prefix>-`` plus 12 hex of sha256 over the parts joined with U+001F."""
    digest = hashlib.sha256("\x1f".join(str(p) for p in parts).encode("utf-8")).hexdigest()
    return f"{prefix.rstrip('-')}-{digest[:12]}"


def safe_stem(title: str, note_id: str, max_len: int = 80) -> str:
    """Readable, unique, length-bounded file stem that is safe on every OS and in wikilinks.

    Text shaped like a secret (the call log's redaction patterns: API keys, auth headers) never
    reaches a file name: a name is seen in listings, sync logs and links, where a note's text is not."""
    suffix = _id_suffix(note_id)
    slug = _truncate(_slugify(redact(str(title))), max(1, max_len - len(suffix) - 1), MAX_STEM_BYTES - len(suffix) - 1)
    stem = f"{slug or 'note'}-{suffix}"
    # The suffix already keeps us clear of CON, NUL, COM1...; this guards odd ids and max_len.
    if stem.split(".")[0].lower() in _RESERVED:
        stem = "_" + stem
    return stem


def person_id(name: str) -> str:
    """Stable id of a person's page (case and punctuation of the name do not matter)."""
    return note_id("p", normalise_text(name))


def person_stem(name: str) -> str:
    """The file name of a person's page (``ingest/people.py`` writes it): what a prompt naming them looks up."""
    return safe_stem(name, person_id(name))


def _slugify(title: str) -> str:
    text = _APOSTROPHES.sub("", unicodedata.normalize("NFC", str(title)).lower())
    # Whitelist: letters, combining marks, digits and "_". Everything else (path separators,
    # Obsidian's # ^ [ ] |, dots, control characters, NUL, emoji) becomes a dash.
    kept = "".join(ch if ch == "_" or unicodedata.category(ch)[0] in "LMN" else "-" for ch in text)
    # An underscore stays only inside a word (`pg_dump`): at a word's edge (`__init__`) Markdown
    # readers take it for emphasis, and a parser that renders before it reads links loses the name.
    kept = _EDGE_UNDERSCORES.sub("-", kept)
    return re.sub(r"-{2,}", "-", kept).strip("-_")


_EDGE_UNDERSCORES = re.compile(r"_+(?![^\W_])|(?<![^\W_])_+")


def _truncate(slug: str, max_chars: int, max_bytes: int) -> str:
    out, used = [], 0
    for ch in slug[:max_chars]:
        size = len(ch.encode("utf-8"))
        if used + size > max_bytes:
            break
        out.append(ch)
        used += size
    cut = "".join(out)
    if len(cut) < len(slug):
        dash = cut.rfind("-")
        if dash > len(cut) // 2:  # prefer a word boundary when one is near the end
            cut = cut[:dash]
    return cut.strip("-_")


def _id_suffix(note_id: str) -> str:
    hexes = re.sub(r"[^0-9a-f]", "", str(note_id).lower())
    return hexes[-6:] if len(hexes) >= 6 else hashlib.sha256(str(note_id).encode()).hexdigest()[:6]


def iso(value: Any) -> str:
    """ISO 8601 text for a datetime, date, Unix seconds or string; empty for None."""
    if value is None or value == "":
        return ""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = datetime.fromtimestamp(value, tz=UTC)
    if isinstance(value, datetime):
        return value.isoformat(timespec="seconds")
    if isinstance(value, date):
        return value.isoformat()
    return str(value)


# --------------------------------------------------------------------------- tiers


def note_tier(frontmatter: Mapping[str, Any], relpath: str | PurePath) -> str:
    """A note's effective provenance tier: kept -> engram, else its tier key, else its folder."""
    if str(frontmatter.get("status", "")).strip().lower() == "kept":
        return "engram"
    tier = str(frontmatter.get("tier") or "").strip().lower()
    tier = _TIER_ALIASES.get(tier, tier)
    if tier in TIER_WEIGHTS:
        return tier
    parts = PurePosixPath(str(relpath).replace("\\", "/")).parts
    # Notes the user wrote in the root or their own folders are their adopted thinking.
    return _FOLDER_TIERS.get(parts[0], "engram") if len(parts) > 1 else "engram"
