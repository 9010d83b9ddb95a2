"""``read_export``: a file, folder or export zip -> Conversations and ParseIssues, streamed, in a fixed order."""

from __future__ import annotations

import io
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

from vault_pipeline.errors import ParseError
from vault_pipeline.ingest.parse import chatgpt, claude, locomo
from vault_pipeline.ingest.parse.common import label, writable
from vault_pipeline.ingest.parse.detect import EMPTY, IGNORED_NAMES, TEXT_SUFFIXES, detect_stream
from vault_pipeline.ingest.parse.jsonstream import NotAnArray, TruncatedJSON, Unreadable, iter_json_array
from vault_pipeline.ingest.parse.transcript import parse_transcript
from vault_pipeline.ingest.parse.types import Conversation, Kind, ParseIssue, RecordError

Item = Conversation | ParseIssue
Handler = Callable[[Any, str, list[str]], list[Conversation]]

WHOLE_FILE = "whole file"
_HANDLERS: dict[str, Handler] = {
    "chatgpt": chatgpt.parse_conversation,
    "claude": claude.parse_conversation,
    "locomo": locomo.parse_sample,
}
_MEDIA = frozenset({".png", ".jpg", ".jpeg", ".gif", ".webp", ".svg", ".wav", ".mp3", ".m4a", ".mp4", ".webm", ".ogg"})
_ATTACHMENT_DIRS = frozenset({"dalle-generations", "audio"})
_ID_KEYS = ("id", "conversation_id", "uuid", "sample_id")


def read_export(path: str | Path, *, kind: Kind | None = None) -> Iterator[Item]:
    """Yield conversations (and issues for bad records) from a file, folder or export zip."""
    path = Path(path)
    if not path.exists():
        raise ParseError(path, "no such file or folder")
    if path.is_dir():
        yield from _read_folder(path, kind)
    elif path.suffix.lower() == ".zip" or (
        path.suffix.lower() not in TEXT_SUFFIXES | {".json"} and zipfile.is_zipfile(path)
    ):
        yield from _read_zip(path, kind)
    else:
        yield from _read_file(path, kind)


def _read_file(path: Path, kind: Kind | None) -> Iterator[Item]:
    """One file; ParseError when it cannot be read at all."""
    source = writable(str(path))
    try:
        if kind == "transcript" or (kind is None and path.suffix.lower() in TEXT_SUFFIXES):
            yield _transcript(path.read_bytes(), path.stem, source)
            return
        with path.open("rb") as raw:
            found = kind or detect_stream(raw.read, source)
        if found == EMPTY:
            return
        with path.open("r", encoding="utf-8-sig", errors="replace") as fh:
            yield from _records(fh, found, source)
    except OSError as exc:
        raise ParseError(source, f"cannot read: {exc.strerror or exc}") from None


def _transcript(data: bytes, stem: str, source: str) -> Conversation:
    try:
        return parse_transcript(data.decode("utf-8-sig", errors="replace"), stem, source)
    except RecordError as exc:
        raise ParseError(source, str(exc)) from None


def _records(fh: IO[str], kind: str, source: str) -> Iterator[Item]:
    """Stream the records of one JSON export, one issue per bad record."""
    handler = _HANDLERS[kind]
    index = -1
    try:
        for index, record in enumerate(iter_json_array(fh)):
            yield from _one(handler, record, index, source)
    except TruncatedJSON as exc:
        yield ParseIssue(source, str(index + 1), f"{exc}; the {index + 1} record(s) before it were read")
    except NotAnArray as exc:
        raise ParseError(source, str(exc)) from None
    except UnicodeError as exc:
        raise ParseError(source, f"not UTF-8 text: {exc}") from None


def _one(handler: Handler, record: Any, index: int, source: str) -> Iterator[Item]:
    """The conversations of one record, then its notes; a ParseIssue instead when the record is unusable."""
    if isinstance(record, Unreadable):
        yield ParseIssue(source, str(index), record.reason)
        return
    where = label(index, record, *_ID_KEYS)
    notes: list[str] = []
    try:
        conversations = handler(record, source, notes)
    except RecordError as exc:
        conversations = []
        notes.append(str(exc))
    except (TypeError, AttributeError, KeyError, ValueError, IndexError) as exc:  # a shape no check anticipated
        conversations = []
        notes.append(f"malformed record ({type(exc).__name__}: {exc})")
    yield from conversations
    for note in notes:
        yield ParseIssue(source, where, note)


def _classify(name: str) -> str:
    """'read', 'ignore' (export companions, hidden files) or 'unknown' for a file inside a folder or zip."""
    base = name.rsplit("/", 1)[-1]
    suffix = Path(base).suffix.lower()
    if not base or base.startswith(".") or "__MACOSX/" in name or base.lower() in IGNORED_NAMES:
        return "ignore"
    if base.startswith(("file-", "file_")) or _ATTACHMENT_DIRS & set(name.lower().split("/")[:-1]):
        return "ignore"  # ChatGPT export attachments: uploads, generated images, voice audio
    if suffix in TEXT_SUFFIXES or suffix in (".json", ".zip"):
        return "read"
    return "ignore" if suffix in _MEDIA else "unknown"


def _json_kind(name: str, kind: Kind | None) -> Kind | None:
    """The kind forced on a JSON file inside a folder or zip: never 'transcript', which only fits text files."""
    return kind if name.lower().endswith(".json") and kind != "transcript" else None


def _read_folder(folder: Path, kind: Kind | None) -> Iterator[Item]:
    """Every export file under ``folder``, in sorted order; a bad file is an issue, not the end."""
    files = sorted(
        p
        for p in folder.rglob("*")
        if p.is_file() and not any(part.startswith(".") for part in p.relative_to(folder).parts)
    )
    for path in files:
        verdict = _classify(path.relative_to(folder).as_posix())
        if verdict == "unknown":
            yield ParseIssue(writable(str(path)), WHOLE_FILE, "not a recognised export file; skipped")
        elif verdict == "read":
            try:
                yield from read_export(path, kind=_json_kind(path.name, kind))
            except ParseError as exc:
                yield ParseIssue(exc.source, WHOLE_FILE, exc.reason)


def _read_zip(path: Path, kind: Kind | None) -> Iterator[Item]:
    """The members of an export zip, in sorted order; a bad member is an issue, a bad zip a ParseError."""
    try:
        archive = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError) as exc:
        raise ParseError(path, f"not a readable zip: {exc}") from None
    with archive:
        for info in sorted(archive.infolist(), key=lambda i: i.filename):
            if info.is_dir():
                continue
            source = writable(f"{path}!{info.filename}")
            verdict = _classify(info.filename)
            if verdict == "unknown" or info.filename.lower().endswith(".zip"):
                yield ParseIssue(source, WHOLE_FILE, "not a recognised export file; skipped")
            elif verdict == "read":
                yield from _zip_member(archive, info.filename, source, kind)


def _zip_member(archive: zipfile.ZipFile, name: str, source: str, kind: Kind | None) -> Iterator[Item]:
    """One member, streamed from the archive; every failure is an issue for this member only."""
    try:
        if Path(name).suffix.lower() in TEXT_SUFFIXES:
            yield _transcript(archive.read(name), Path(name).stem, source)
            return
        with archive.open(name) as raw:
            found = _json_kind(name, kind) or detect_stream(raw.read, source)
        if found == EMPTY:
            return
        with archive.open(name) as raw:
            yield from _records(io.TextIOWrapper(raw, encoding="utf-8-sig", errors="replace"), found, source)
    except ParseError as exc:
        yield ParseIssue(source, WHOLE_FILE, exc.reason)
    except (zipfile.BadZipFile, OSError, EOFError, RuntimeError) as exc:  # corrupt member, encrypted, ...
        yield ParseIssue(source, WHOLE_FILE, f"cannot read from the zip: {exc}")
