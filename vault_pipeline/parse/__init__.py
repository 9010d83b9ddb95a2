"""The parse stage: chat exports (ChatGPT, Claude, transcripts, LoCoMo) -> Conversation records.

``read_export`` accepts a file, a folder or an export ``.zip``, detects the format by content,
streams JSON arrays element by element, and yields a ``ParseIssue`` for every bad record while
the good records beside it still come through.
"""

from __future__ import annotations

import io
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

from vault_pipeline.errors import ParseError
from vault_pipeline.parse import chatgpt, claude, locomo
from vault_pipeline.parse.jsonstream import TruncatedJSON, iter_json_array
from vault_pipeline.parse.transcript import parse_transcript
from vault_pipeline.parse.types import Conversation, Kind, Message, ParseIssue, RecordError, Role
from vault_pipeline.parse.common import label

__all__ = ["Conversation", "Kind", "Message", "ParseIssue", "Role", "detect_kind", "read_export", "iter_json_array"]

Item = Conversation | ParseIssue
_TEXT_SUFFIXES = {".md", ".markdown", ".txt"}
_IGNORED_JSON = {"users.json", "memories.json", "projects.json", "user.json", "message_feedback.json",
                 "shared_conversations.json", "model_comparisons.json"}
_PEEK = 1 << 16


def read_export(path: str | Path, *, kind: Kind | None = None) -> Iterator[Item]:
    """Yield conversations (and issues for bad records) from a file, folder or export zip."""
    path = Path(path)
    if not path.exists():
        raise ParseError(path, "no such file or folder")
    if path.is_dir():
        yield from _read_folder(path, kind)
    elif zipfile.is_zipfile(path):
        yield from _read_zip(path, kind)
    else:
        yield from _read_file(path, kind)


def detect_kind(path: str | Path) -> Kind:
    """The format of one file, from its suffix and the first keys of its content."""
    path = Path(path)
    if path.suffix.lower() in _TEXT_SUFFIXES:
        return "transcript"
    with path.open("rb") as fh:
        return _kind_from_head(fh.read(_PEEK), str(path))


def _kind_from_head(head: bytes, source: str) -> Kind:
    text = head.decode("utf-8", errors="ignore").lstrip("\ufeff \t\r\n")
    if not text.startswith(("[", "{")):
        raise ParseError(source, "not a recognised export (not JSON, not a .md/.txt transcript)")
    if '"mapping"' in text or '"current_node"' in text:
        return "chatgpt"
    if '"chat_messages"' in text:
        return "claude"
    if '"qa"' in text or '"speaker_a"' in text or '"conversation"' in text and '"dia_id"' in text:
        return "locomo"
    raise ParseError(source, "JSON of an unknown shape (expected a ChatGPT, Claude or LoCoMo export)")


def _read_file(path: Path, kind: Kind | None) -> Iterator[Item]:
    kind = kind or detect_kind(path)
    if kind == "transcript":
        try:
            yield parse_transcript(path, str(path))
        except (RecordError, UnicodeError) as exc:
            raise ParseError(path, str(exc)) from None
        return
    with path.open("r", encoding="utf-8", errors="replace") as fh:
        yield from _records(fh, kind, str(path))


def _records(fh: IO[str], kind: Kind, source: str) -> Iterator[Item]:
    """Stream the records of one JSON export, one issue per bad record."""
    handler: Callable[[Any, str], Any] = {"chatgpt": chatgpt.parse_conversation, "claude": claude.parse_conversation,
                                          "locomo": locomo.parse_sample}[kind]
    index = -1
    try:
        for index, record in enumerate(iter_json_array(fh)):
            yield from _one(handler, record, index, source)
    except TruncatedJSON as exc:
        yield ParseIssue(source, str(index + 1), f"{exc}; records before it were read")
    except ValueError as exc:
        raise ParseError(source, str(exc)) from None


def _one(handler: Callable[[Any, str], Any], record: Any, index: int, source: str) -> Iterator[Item]:
    try:
        result = handler(record, source)
        if isinstance(result, Conversation):
            yield result
        else:
            yield from result
    except RecordError as exc:
        yield ParseIssue(source, label(index, record, "id", "conversation_id", "uuid", "sample_id"), str(exc))
    except (TypeError, AttributeError, KeyError, ValueError) as exc:  # a shape no check anticipated
        yield ParseIssue(source, label(index, record, "id", "conversation_id", "uuid", "sample_id"),
                         f"malformed record ({type(exc).__name__}: {exc})")


def _read_folder(folder: Path, kind: Kind | None) -> Iterator[Item]:
    files = sorted(p for p in folder.rglob("*") if p.is_file() and not any(
        part.startswith(".") for part in p.relative_to(folder).parts))
    for path in files:
        if path.name in _IGNORED_JSON or path.suffix.lower() not in _TEXT_SUFFIXES | {".json", ".zip"}:
            continue
        try:
            yield from read_export(path, kind=kind if path.suffix.lower() == ".json" else None)
        except ParseError as exc:
            yield ParseIssue(str(path), "file", exc.reason)


def _read_zip(path: Path, kind: Kind | None) -> Iterator[Item]:
    try:
        archive = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError) as exc:
        raise ParseError(path, f"not a readable zip: {exc}") from None
    with archive:
        for name in sorted(archive.namelist()):
            base = name.rsplit("/", 1)[-1]
            if name.endswith("/") or base in _IGNORED_JSON or base.startswith("."):
                continue
            yield from _zip_member(archive, name, f"{path}!{name}", kind)


def _zip_member(archive: zipfile.ZipFile, name: str, source: str, kind: Kind | None) -> Iterator[Item]:
    suffix = Path(name).suffix.lower()
    try:
        if suffix in _TEXT_SUFFIXES:
            yield _zip_transcript(archive, name, source)
        elif suffix == ".json":
            with archive.open(name) as raw:
                member_kind = kind or _kind_from_head(raw.read(_PEEK), source)
            with archive.open(name) as raw:
                yield from _records(io.TextIOWrapper(raw, encoding="utf-8", errors="replace"), member_kind, source)
    except ParseError as exc:
        yield ParseIssue(source, "file", exc.reason)
    except (RecordError, zipfile.BadZipFile, OSError) as exc:
        yield ParseIssue(source, "file", str(exc))


def _zip_transcript(archive: zipfile.ZipFile, name: str, source: str) -> Conversation:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        target = Path(tmp) / Path(name).name
        target.write_bytes(archive.read(name))
        return parse_transcript(target, source)
