"""Stream the elements of a top-level JSON array without holding the whole file.

Memory stays bounded by the largest element read, and that is capped: an element whose text
runs past ``max_chars`` is skipped by a scan that drops what it has passed (a 1 GB string
costs one buffer, not a gigabyte), and yielded as ``Unreadable`` naming what it was.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, Any

from vault_pipeline.errors import NotAnArray, TruncatedJSON
from vault_pipeline.ingest.parse.common import SHOWN, printable, shown

_DECODER = json.JSONDecoder()
_WS = " \t\r\n\ufeff"
_NUMBER_TAIL = "0123456789.eE+-"
_TAIL = 16  # a read can cut a value (e.g. "tru", "\\u12") this many characters before the buffer's end
MAX_RECORD_CHARS = 5 * 1024 * 1024  # one record's JSON text; above it the record is skipped, not decoded
# The most any setting can raise that limit to: one record's text, its decoded values and the
# notes made from it stay within a few hundred MB (decision 0091).
RECORD_CEILING = 32 * 1024 * 1024
_OUTSIDE = re.compile(r'[^"\[\]{}]*+')  # text between strings and brackets
_IN_STRING = re.compile(r'(?:[^"\\]++|\\.)*+', re.S)  # a string's body up to its closing quote
_SCALAR = re.compile(r"[^,\]}\s]*+")
_HEAD = 1 << 14  # characters of a skipped record searched for its id or title
_HEAD_KEYS = ("id", "conversation_id", "uuid", "sample_id", "title", "name")


@dataclass(frozen=True)
class Unreadable:
    """Yielded in place of an element the decoder cannot take (nested too deeply, too large); the stream goes on."""

    reason: str
    label: str = ""  # "id '...'" or "title '...'" when the element's head shows one


def iter_json_array(
    fp: IO[str], chunk_size: int = 1 << 16, key: str = "conversations", *, max_chars: int = MAX_RECORD_CHARS
) -> Iterator[Any]:
    """Yield each element of ``[...]`` or of ``{"<key>": [...]}``; any other top-level object is yielded whole.

    An element longer than ``max_chars`` characters of JSON (at most ``RECORD_CEILING``) is yielded
    as ``Unreadable``, never decoded."""
    reader = _Reader(fp, chunk_size, min(max_chars, RECORD_CEILING))
    first = reader.skip_ws()
    if first == "[":
        reader.pos += 1
        yield from reader.elements()
    elif first == "{":
        yield from reader.object_members(key)
    elif first == "":
        raise NotAnArray("empty file")
    else:
        raise NotAnArray("not JSON (expected '[' or '{' at the start)")


class _Reader:
    """A cursor over a growing text buffer; consumed text is dropped on each read."""

    def __init__(self, fp: IO[str], chunk_size: int, max_chars: int = MAX_RECORD_CHARS):
        self.fp = fp
        self.chunk = max(1, chunk_size)
        self.max_chars = max(1, max_chars)
        self.buf = ""
        self.pos = 0
        self.base = 0  # characters dropped before buf[0]: base + pos is the offset in the stream
        self.eof = False

    def _more(self, want: int) -> bool:
        """Append at least ``want`` characters (fewer at the end); False at end of input."""
        if self.eof:
            return False
        data = self.fp.read(max(want, self.chunk))
        if not data:
            self.eof = True
            return False
        self.base += self.pos
        self.buf = self.buf[self.pos :] + data
        self.pos = 0
        return True

    def skip_ws(self) -> str:
        """Advance past white space and return the next character ('' at the end)."""
        while True:
            while self.pos < len(self.buf) and self.buf[self.pos] in _WS:
                self.pos += 1
            if self.pos < len(self.buf):
                return self.buf[self.pos]
            if not self._more(self.chunk):
                return ""

    def decode(self) -> Any:
        """Decode one JSON value at the cursor, reading more (geometrically) until it is complete."""
        want = self.chunk
        while True:
            self.skip_ws()
            try:
                value, end = _DECODER.raw_decode(self.buf, self.pos)
            except RecursionError:
                self.skip_value()
                return Unreadable("nested too deeply to decode; skipped")
            except json.JSONDecodeError as exc:
                if _is_syntax_error(exc, len(self.buf)):
                    raise TruncatedJSON(f"malformed JSON ({exc.msg})") from None
                if len(self.buf) - self.pos > self.max_chars:
                    return self._skip_oversized()
                if self._more(min(want, self.max_chars)):
                    want *= 2  # a huge element costs O(n log n) re-scans, not O(n^2)
                    continue
                raise TruncatedJSON(f"invalid or truncated JSON ({exc.msg})") from None
            if _is_number(value) and (end == len(self.buf) or self.buf[end] in _NUMBER_TAIL) and self._more(self.chunk):
                continue  # a number cut by the read ("3." + "25") goes on in the next chunk
            if end - self.pos > self.max_chars:
                return self._skip_oversized()  # decoded whole from one read, still above the limit
            self.pos = end
            return value

    def _skip_oversized(self) -> Unreadable:
        """Skip the value at the cursor, too large to decode, and say how large it was at least."""
        label = _head_label(self.buf[self.pos : self.pos + _HEAD])
        start = self.base + self.pos
        self.skip_value()
        size = self.base + self.pos - start
        return Unreadable(
            f"record of {size:,} characters is larger than the {self.max_chars:,}-character limit; skipped", label
        )

    def skip_value(self) -> None:
        """Move the cursor past one JSON value, dropping the text it passes (memory stays at one chunk)."""
        if self.skip_ws() == "":
            raise TruncatedJSON("the file ends before a value (truncated?)")
        first = self.buf[self.pos]
        if first not in '"[{':
            self._advance(_SCALAR)
            return
        depth, in_string = 0, False
        while True:
            if self.pos >= len(self.buf) and not self._more(self.chunk):
                raise TruncatedJSON("the file ends inside a skipped value (truncated?)")
            if in_string:
                self.pos = _IN_STRING.match(self.buf, self.pos).end()  # type: ignore[union-attr]
                if self.pos >= len(self.buf) - 1 and not self.buf.endswith('"', self.pos):
                    # the body ran to the buffer's end, or a backslash waits for its escaped character
                    if not self._more(self.chunk):
                        raise TruncatedJSON("the file ends inside a skipped string (truncated?)")
                    continue
                self.pos += 1  # the closing quote
                in_string = False
            else:
                self.pos = _OUTSIDE.match(self.buf, self.pos).end()  # type: ignore[union-attr]
                if self.pos >= len(self.buf):
                    continue
                char = self.buf[self.pos]
                self.pos += 1
                if char == '"':
                    in_string = True
                    continue
                depth += 1 if char in "[{" else -1
            if depth == 0:
                return

    def _advance(self, pattern: re.Pattern[str]) -> None:
        """Move the cursor past a run that ``pattern`` matches, across reads."""
        while True:
            self.pos = pattern.match(self.buf, self.pos).end()  # type: ignore[union-attr]
            if self.pos < len(self.buf) or not self._more(self.chunk):
                return

    def elements(self) -> Iterator[Any]:
        """Yield array elements up to the closing ']' (the cursor is just after '[')."""
        if self.skip_ws() == "]":
            self.pos += 1
            return
        while True:
            yield self.decode()
            sep = self.skip_ws()
            if sep == ",":
                self.pos += 1
            elif sep == "]":
                self.pos += 1
                return
            elif sep == "":
                raise TruncatedJSON("the file ends before the closing ']' (truncated?)")
            else:
                raise TruncatedJSON(f"malformed JSON: expected ',' or ']' between elements, found {sep!r}")

    def object_members(self, key: str) -> Iterator[Any]:
        """Stream the list under ``key`` of the top-level object, or yield the object whole if it has none."""
        self.pos += 1
        start = self.base + self.pos
        seen: dict[str, Any] = {}
        while (first := self.skip_ws()) != "}":
            if first == "":
                raise TruncatedJSON("the file ends inside the top-level object (truncated?)")
            name = self.decode()
            if not isinstance(name, str) or self.skip_ws() != ":":
                raise TruncatedJSON("malformed JSON in the top-level object")
            self.pos += 1
            if name == key and self.skip_ws() == "[":
                self.pos += 1
                yield from self.elements()
                return  # keys after the list carry nothing we read
            seen[name] = self.decode()
            if isinstance(seen[name], Unreadable) or self.base + self.pos - start > self.max_chars:
                yield self._skip_object_rest(seen, name, start)
                return
            if self.skip_ws() == ",":
                self.pos += 1
        yield seen

    def _skip_object_rest(self, seen: dict[str, Any], name: str, start: int) -> Unreadable:
        """The lone top-level object is too large: skip the rest of it (depth 1) and name it."""
        found, label = seen[name], _label(seen)
        seen.clear()  # free what was decoded before anything else is read
        while self.skip_ws() not in ("}", ""):
            self.pos += self.buf[self.pos] in ",:"
            if self.buf[self.pos : self.pos + 1] not in ("}", ""):
                self.skip_value()
        self.pos += self.skip_ws() == "}"
        size = self.base + self.pos - start
        if isinstance(found, Unreadable) and not found.reason.startswith("record of"):
            return Unreadable(f"{found.reason} (key {name!r})", label)
        return Unreadable(
            f"record of {size:,} characters is larger than the {self.max_chars:,}-character limit; skipped", label
        )


_TOKEN = re.compile(r'\s*+(?:("(?:[^"\\]|\\.)*+")|([\[\]{}:,])|([^\s\[\]{}:,"]++))', re.S)


def _head_label(head: str) -> str:
    """A label for a skipped object from the top-level keys in its head: id, uuid, ... or title; '' if none."""
    depth, key, after_colon, pos = 0, None, False, 0
    found: dict[str, Any] = {}
    while (match := _TOKEN.match(head, pos)) is not None and match.end() > pos:
        pos = match.end()
        string, mark = match.group(1), match.group(2)
        if mark in ("[", "{"):
            depth += 1
        elif mark in ("]", "}"):
            depth -= 1
        if mark is not None:
            after_colon, key = mark == ":", key if mark == ":" else None
            continue
        if string is not None and depth == 1:
            text = json.loads(string)
            if after_colon and key is not None:
                found.setdefault(key, text)
                key = None
            else:
                key = text
        after_colon = False
    rest = head[pos:].lstrip()
    if depth == 1 and after_colon and key in ("title", "name") and rest.startswith('"'):
        found.setdefault(key, rest[1 : SHOWN + 2].split('"')[0])  # a title cut by the head: its start (never an id)
    return _label(found)


def _label(members: dict[str, Any]) -> str:
    """'id abc' (as ``common.label`` prints ids) or "title '...'" from an object's members; '' if none."""
    for name in _HEAD_KEYS:
        value = members.get(name)
        if isinstance(value, (str, int)) and not isinstance(value, bool) and str(value):
            text = str(value)
            return f"{name} {shown(text)}" if name in ("title", "name") else f"id {printable(text[:SHOWN])}"
    return ""


def _is_syntax_error(exc: json.JSONDecodeError, end: int) -> bool:
    """An error well before the end of the buffer cannot be cured by reading more (unless a string runs on)."""
    return exc.pos < end - _TAIL and not exc.msg.startswith("Unterminated string")


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
