"""``read_export``: a file, folder or export zip -> Conversations and ParseIssues, streamed, in a fixed order.

Memory is bounded by ``max_record`` (never above ``RECORD_CEILING``, whatever the setting), never
by the input: a transcript is read up to the limit and skipped above it, and a JSON record above
it is scanned past without being decoded. Bytes that are not UTF-8 are shown as U+FFFD and
reported in a warning naming the file. A zip member is skipped with one line when its name could
point outside the archive (``..``, absolute, a drive or a backslash) or when its declared size or
compression ratio marks a zip bomb.
"""

from __future__ import annotations

import io
import re
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

from vault_pipeline.errors import ParseError
from vault_pipeline.ingest.parse import chatgpt, claude, locomo
from vault_pipeline.ingest.parse.common import label, writable
from vault_pipeline.ingest.parse.detect import (
    EMPTY,
    IGNORED_NAMES,
    MAX_UNDECIDED,
    TEXT_SUFFIXES,
    HeadTooLarge,
    detect_stream,
    kind_from_keys,
)
from vault_pipeline.ingest.parse.jsonstream import (
    MAX_RECORD_CHARS,
    RECORD_CEILING,
    NotAnArray,
    TruncatedJSON,
    Unreadable,
    iter_json_array,
)
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
_ESCAPED = re.compile("[\udc80-\udcff]")  # undecodable bytes, as the "surrogateescape" handler keeps them
# A member that expands more than this many times (deflate's ceiling is about 1,030; JSON and text
# exports compress 3-20 times) and to more than BOMB_MIN_BYTES is a zip bomb, refused unread.
BOMB_RATIO = 200
BOMB_MIN_BYTES = 16 * 1024 * 1024
MAX_MEMBER_BYTES = 16 * 1024**3  # no export member is this large: refused by its declared size
_DRIVE = re.compile(r"^[A-Za-z]:")


def read_export(path: str | Path, *, kind: Kind | None = None, max_record: int = MAX_RECORD_CHARS) -> Iterator[Item]:
    """Yield conversations (and issues for bad records) from a file, folder or export zip.

    ``max_record`` caps one record: characters of a JSON record, bytes of a transcript file; it is
    never more than ``RECORD_CEILING``."""
    path, max_record = Path(path), min(max_record, RECORD_CEILING)
    if not path.exists():
        raise ParseError(path, "no such file or folder")
    if path.is_dir():
        yield from _read_folder(path, kind, max_record)
    elif path.suffix.lower() == ".zip" or (
        path.suffix.lower() not in TEXT_SUFFIXES | {".json"} and zipfile.is_zipfile(path)
    ):
        yield from _read_zip(path, kind, max_record)
    else:
        yield from _read_file(path, kind, max_record)


def _read_file(path: Path, kind: Kind | None, limit: int) -> Iterator[Item]:
    """One file; ParseError when it cannot be read at all."""
    source = writable(str(path))
    try:
        if kind == "transcript" or (kind is None and path.suffix.lower() in TEXT_SUFFIXES):
            with path.open("rb") as raw:
                yield from _transcript(raw, path.stem, source, limit)
            return
        found = kind or _detect(lambda: path.open("rb"), source, limit)
        if found == EMPTY:
            return
        with path.open("rb") as raw:
            yield from _records(_Decoded(raw), found, source, limit)
    except OSError as exc:
        raise ParseError(source, f"cannot read: {exc.strerror or exc}") from None


def _detect(open_raw: Callable[[], IO[bytes]], source: str, limit: int) -> str:
    """The export's kind from its head; when huge first records hide it, from the first records that fit."""
    with open_raw() as raw:
        try:
            return detect_stream(raw.read, source)
        except HeadTooLarge:
            pass
    with open_raw() as raw:
        # Bounded like the parse itself: records above the limit are scanned past, never decoded.
        records = iter_json_array(_Decoded(raw), max_chars=limit)  # type: ignore[arg-type]
        try:
            for _, record in zip(range(MAX_UNDECIDED), records, strict=False):
                found = kind_from_keys(set(record)) if isinstance(record, dict) else None
                if found is not None:
                    return found
        except (TruncatedJSON, NotAnArray):
            pass
    raise ParseError(source, "JSON of an unknown shape (expected a ChatGPT, Claude or LoCoMo export)")


def _transcript(raw: IO[bytes], stem: str, source: str, limit: int) -> Iterator[Item]:
    """One transcript read up to ``limit`` bytes: its conversation and a warning for undecodable bytes."""
    data = raw.read(limit + 1)
    if len(data) > limit:
        yield ParseIssue(source, WHOLE_FILE, f"larger than the {limit:,}-byte limit for one transcript; skipped")
        return
    text, bad = _decode(data)
    try:
        yield parse_transcript(text, stem, source)
    except RecordError as exc:
        raise ParseError(source, str(exc)) from None
    if bad:
        yield _undecodable(source, bad)


def _decode(data: bytes) -> tuple[str, int]:
    """UTF-8 text, undecodable bytes as U+FFFD, and how many bytes that was."""
    try:
        return data.decode("utf-8-sig"), 0
    except UnicodeDecodeError:
        return _ESCAPED.subn("\ufffd", data.decode("utf-8-sig", errors="surrogateescape"))


def _undecodable(source: str, count: int) -> ParseIssue:
    return ParseIssue(source, WHOLE_FILE, f"{count:,} byte(s) not valid UTF-8, shown as U+FFFD", warning=True)


class _Decoded:
    """A UTF-8 text view of a byte stream that shows undecodable bytes as U+FFFD and counts them."""

    def __init__(self, raw: IO[bytes]):
        self._text = io.TextIOWrapper(raw, encoding="utf-8-sig", errors="surrogateescape")
        self.bad = 0

    def read(self, size: int = -1) -> str:
        """Up to ``size`` characters, like ``TextIOBase.read``."""
        data = self._text.read(size)
        if not data.isascii():
            data, count = _ESCAPED.subn("\ufffd", data)
            self.bad += count
        return data


def _records(fh: _Decoded, kind: str, source: str, limit: int) -> Iterator[Item]:
    """Stream the records of one JSON export, one issue per bad record, a warning for undecodable bytes."""
    handler = _HANDLERS[kind]
    index = -1
    try:
        for index, record in enumerate(iter_json_array(fh, max_chars=limit)):  # type: ignore[arg-type]
            yield from _one(handler, record, index, source)
    except TruncatedJSON as exc:
        yield ParseIssue(source, str(index + 1), f"{exc}; the {index + 1} record(s) before it were read")
    except NotAnArray as exc:
        raise ParseError(source, str(exc)) from None
    except UnicodeError as exc:
        raise ParseError(source, f"not UTF-8 text: {exc}") from None
    if fh.bad:
        yield _undecodable(source, fh.bad)


def _one(handler: Handler, record: Any, index: int, source: str) -> Iterator[Item]:
    """The conversations of one record, then its notes; a ParseIssue instead when the record is unusable."""
    if isinstance(record, Unreadable):
        yield ParseIssue(source, f"{index} ({record.label})" if record.label else str(index), record.reason)
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


def _unread_companion(name: str) -> str:
    """The one line said of an export companion that holds the user's material but is not read yet."""
    if name.rsplit("/", 1)[-1].lower() == "projects.json":
        return "Claude project documents (projects.json) are not ingested yet; skipped"
    return ""


def _json_kind(name: str, kind: Kind | None) -> Kind | None:
    """The kind forced on a JSON file inside a folder or zip: never 'transcript', which only fits text files."""
    return kind if name.lower().endswith(".json") and kind != "transcript" else None


def _read_folder(folder: Path, kind: Kind | None, limit: int) -> Iterator[Item]:
    """Every export file under ``folder``, in sorted order; a bad file is an issue, not the end."""
    files = sorted(
        p
        for p in folder.rglob("*")
        if p.is_file() and not any(part.startswith(".") for part in p.relative_to(folder).parts)
    )
    for path in files:
        verdict = _classify(path.relative_to(folder).as_posix())
        if _unread_companion(path.name):
            yield ParseIssue(writable(str(path)), WHOLE_FILE, _unread_companion(path.name), warning=True)
        elif verdict == "unknown":
            yield ParseIssue(writable(str(path)), WHOLE_FILE, "not a recognised export file; skipped")
        elif verdict == "read":
            try:
                yield from read_export(path, kind=_json_kind(path.name, kind), max_record=limit)
            except ParseError as exc:
                yield ParseIssue(exc.source, WHOLE_FILE, exc.reason)


def _read_zip(path: Path, kind: Kind | None, limit: int) -> Iterator[Item]:
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
            refused = _refused_member(info)
            verdict = _classify(info.filename)
            if refused:
                yield ParseIssue(source, WHOLE_FILE, refused)
            elif _unread_companion(info.filename):
                yield ParseIssue(source, WHOLE_FILE, _unread_companion(info.filename), warning=True)
            elif verdict == "unknown" or info.filename.lower().endswith(".zip"):
                yield ParseIssue(source, WHOLE_FILE, "not a recognised export file; skipped")
            elif verdict == "read":
                yield from _zip_member(archive, info.filename, source, kind, limit)


def _refused_member(info: zipfile.ZipInfo) -> str:
    """Why a zip member is skipped unread ('' when it may be read): an unsafe name, or a bomb by its declared sizes."""
    name = info.filename
    parts = name.replace("\\", "/").split("/")
    if "\\" in name or name.startswith("/") or _DRIVE.match(name) or ".." in parts:
        return "unsafe member name (a backslash, '..', a drive or an absolute path); skipped"
    if info.file_size > MAX_MEMBER_BYTES:
        return f"declares {info.file_size:,} bytes, more than the {MAX_MEMBER_BYTES:,}-byte limit for a member; skipped"
    if info.file_size > BOMB_MIN_BYTES and info.file_size > BOMB_RATIO * max(info.compress_size, 1):
        ratio = info.file_size // max(info.compress_size, 1)
        return f"expands {ratio:,} times to {info.file_size:,} bytes (a zip bomb?); skipped unread"
    return ""


def _zip_member(archive: zipfile.ZipFile, name: str, source: str, kind: Kind | None, limit: int) -> Iterator[Item]:
    """One member, streamed from the archive; every failure is an issue for this member only."""
    try:
        if Path(name).suffix.lower() in TEXT_SUFFIXES:
            with archive.open(name) as raw:
                yield from _transcript(raw, Path(name).stem, source, limit)
            return
        found = _json_kind(name, kind) or _detect(lambda: archive.open(name), source, limit)
        if found == EMPTY:
            return
        with archive.open(name) as raw:
            yield from _records(_Decoded(raw), found, source, limit)
    except ParseError as exc:
        yield ParseIssue(source, WHOLE_FILE, exc.reason)
    except (zipfile.BadZipFile, OSError, EOFError, RuntimeError) as exc:  # corrupt member, encrypted, ...
        yield ParseIssue(source, WHOLE_FILE, f"cannot read from the zip: {exc}")
