"""Detect an export's format by content, peeking only at the start of the file."""

from __future__ import annotations

import re
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path

from vault_pipeline.errors import HeadTooLarge, ParseError
from vault_pipeline.ingest.parse.types import Kind

TEXT_SUFFIXES = frozenset({".md", ".markdown", ".txt"})
PEEK = 1 << 16
MAX_PEEK = 1 << 23  # LoCoMo puts a long "qa" list before "conversation": look that far, no further
# Leading records can be broken and lack the telling keys; this many undecided ones in a row mean "unknown".
MAX_UNDECIDED = 32
EMPTY = "empty"  # a top-level [] : nothing to read, nothing to detect
# Companions of the conversations in ChatGPT / Claude exports: not conversations, not worth an issue.
# Claude's projects.json (project documents, resource-tier material) is skipped for now, not yet ingested.
IGNORED_NAMES = frozenset(
    {
        "users.json",
        "user.json",
        "memories.json",
        "projects.json",
        "message_feedback.json",
        "shared_conversations.json",
        "model_comparisons.json",
        "chat.html",
        "conversation_templates.json",
        "user_settings.json",
    }
)

_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.S)


def detect_kind(path: str | Path) -> Kind:
    """A file's format from its suffix (transcripts) or its first records' keys; a folder or zip: its first export's."""
    path = Path(path)
    if path.is_dir():
        return _folder_kind(path)
    if path.suffix.lower() in TEXT_SUFFIXES:
        return "transcript"
    try:
        if path.suffix.lower() == ".zip" or (path.suffix.lower() != ".json" and zipfile.is_zipfile(path)):
            found = _zip_kind(path)
        else:
            with path.open("rb") as fh:
                found = detect_stream(fh.read, str(path))
    except (OSError, zipfile.BadZipFile) as exc:
        raise ParseError(path, f"cannot read: {exc}") from None
    if found == EMPTY:
        raise ParseError(path, "an empty JSON array: nothing to detect")
    return found  # type: ignore[return-value]


def _folder_kind(folder: Path) -> Kind:
    """The kind of the first export file in a folder (sorted order), as for a zip."""
    files = sorted(
        p
        for p in folder.rglob("*")
        if p.is_file()
        and not p.name.startswith(".")
        and p.name.lower() not in IGNORED_NAMES
        and p.suffix.lower() in TEXT_SUFFIXES | {".json", ".zip"}
    )
    for file in files:
        try:
            return detect_kind(file)
        except ParseError:
            continue
    raise ParseError(folder, "no ChatGPT, Claude, LoCoMo or transcript file in the folder")


def _zip_kind(path: Path) -> str:
    """The kind of the first conversations file in an export zip (sorted order)."""
    with zipfile.ZipFile(path) as archive:
        names = sorted(
            n
            for n in archive.namelist()
            if n.lower().endswith(".json") and n.rsplit("/", 1)[-1].lower() not in IGNORED_NAMES
        )
        for name in names:
            with archive.open(name) as raw:
                try:
                    return detect_stream(raw.read, f"{path}!{name}")
                except ParseError:
                    continue
    raise ParseError(path, "no ChatGPT, Claude or LoCoMo conversations file in the zip")


def detect_stream(read: Callable[[int], bytes], source: str) -> str:
    """A Kind (or EMPTY) from the head of a byte stream; ParseError when it is no known export."""
    head = b""
    while True:
        more = read(max(PEEK, len(head)))  # the head doubles: re-scanning it stays linear overall
        head += more
        text = head.decode("utf-8", errors="ignore").lstrip("\ufeff \t\r\n")
        if not text.startswith(("[", "{")):
            raise ParseError(source, "not a recognised export (not JSON, not a .md/.txt transcript)")
        kind, final = kind_from_head(text)
        if kind is not None:
            return kind
        if not final and more and len(head) >= MAX_PEEK:
            raise HeadTooLarge(source, "JSON whose first records are too large to show their shape")
        if final or not more:
            raise ParseError(source, "JSON of an unknown shape (expected a ChatGPT, Claude or LoCoMo export)")


def kind_from_head(text: str) -> tuple[str | None, bool]:
    """(Kind, EMPTY or None; whether more text could not change it) from the records in a file's head."""
    for undecided, (keys, complete) in enumerate(record_keys(text), 1):
        kind = kind_from_keys(keys)
        if kind is not None:
            return kind, True
        if not complete:
            return None, False
        if undecided >= MAX_UNDECIDED:
            return None, True
    return None, True


def kind_from_keys(keys: set[str] | None) -> str | None:
    """The Kind the first record's keys show, EMPTY for an empty array, None while undecided."""
    if keys is None:
        return EMPTY
    if "mapping" in keys or "current_node" in keys:
        return "chatgpt"
    if "chat_messages" in keys:
        return "claude"
    if "conversation" in keys and ("qa" in keys or "sample_id" in keys):
        return "locomo"
    return None


def record_keys(text: str) -> Iterator[tuple[set[str] | None, bool]]:
    """Keys of each record in ``[{...}, ...]``, ``{"conversations": [{...}, ...]}`` or a lone ``{...}``, in order.

    Yields (keys, whether the record was seen to its end); keys is None for an empty list. The last
    record yielded may be cut short by the end of ``text``.
    """
    scan = _Scan(text)
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == '"':
            match = _STRING.match(text, i)
            if match is None:
                break  # the head ends inside a string
            scan.string(match.group()[1:-1])
            i = match.end()
            continue
        if ch in "{[":
            scan.open(ch, i)
        elif ch in "}]":
            closed = scan.close(ch, i)
            if closed is not None:
                keys, last = closed
                yield keys, True
                if last:
                    return
            scan.pop()
        elif ch in ",:":
            scan.expect_key = ch == "," and bool(scan.stack) and scan.stack[-1][0] == "{"
        i += 1
    yield (scan.rec if scan.rec_depth else scan.top), False


class _Scan:
    """Where ``record_keys`` is in the text: the open brackets, the top level's keys, the record's keys."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.stack: list[tuple[str, int]] = []  # (bracket, position) of each open bracket
        self.top: set[str] = set()
        self.rec: set[str] = set()
        self.rec_depth = 0  # the depth of the record being read (0: none)
        self.last_top = ""  # the last key of the top level
        self.expect_key = False

    def string(self, value: str) -> None:
        """A string where a key may stand: a key of the top level, or of the record being read."""
        if self.expect_key and len(self.stack) == 1:
            self.last_top = value
            self.top.add(value)
        elif self.expect_key and len(self.stack) == self.rec_depth:
            self.rec.add(value)

    def open(self, ch: str, i: int) -> None:
        """An opening bracket at ``i``; a ``{`` in the record list starts a record."""
        self.stack.append((ch, i))
        if ch == "{" and not self.rec_depth and _is_record_start(self._outer(3), self.last_top):
            self.rec_depth = len(self.stack)
        self.expect_key = ch == "{"

    def close(self, ch: str, i: int) -> tuple[set[str] | None, bool] | None:
        """A closing bracket at ``i``: (keys, whether nothing more can follow) when it ends a record, else None."""
        if len(self.stack) == self.rec_depth:
            keys, self.rec, self.rec_depth = self.rec, set(), 0
            return keys, False
        if (
            not self.rec_depth
            and ch == "]"
            and _is_record_list(self._outer(2), self.last_top)
            and not self.text[self.stack[-1][1] + 1 : i].strip()
        ):
            return None, True  # the list closed before any record
        if len(self.stack) == 1:
            return (self.top if ch == "}" else set()), True  # a lone top-level object is itself the record
        return None

    def pop(self) -> None:
        """Leave the innermost bracket."""
        self.stack.pop()
        self.expect_key = False

    def _outer(self, depth: int) -> list[str]:
        """The open brackets when at most ``depth`` are open, else [] (a record list sits at depth 1
        or 2): never a copy of a deep stack, so a scan stays linear however deep the JSON nests."""
        return [c for c, _ in self.stack] if len(self.stack) <= depth else []


def _is_record_list(stack: list[str], last_top: str) -> bool:
    return stack == ["["] or (stack == ["{", "["] and last_top == "conversations")


def _is_record_start(stack: list[str], last_top: str) -> bool:
    return _is_record_list(stack[:-1], last_top) and stack[-1] == "{"
