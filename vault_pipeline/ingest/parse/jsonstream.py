"""Stream the elements of a top-level JSON array without holding the whole file."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, Any

_DECODER = json.JSONDecoder()
_WS = " \t\r\n\ufeff"
_NUMBER_TAIL = "0123456789.eE+-"
_TAIL = 16  # a read can cut a value (e.g. "tru", "\\u12") this many characters before the buffer's end
_NESTING = re.compile(r'["\\\[\]{}]')


class TruncatedJSON(ValueError):
    """The file ended (or broke) inside or between elements; the elements before it were yielded."""


class NotAnArray(ValueError):
    """The stream does not hold a JSON array or object at the top level."""


@dataclass(frozen=True)
class Unreadable:
    """Yielded in place of an element the decoder cannot take (nested too deeply); the stream goes on."""

    reason: str


def iter_json_array(fp: IO[str], chunk_size: int = 1 << 16, key: str = "conversations") -> Iterator[Any]:
    """Yield each element of ``[...]`` or of ``{"<key>": [...]}``; any other top-level object is yielded whole."""
    reader = _Reader(fp, chunk_size)
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

    def __init__(self, fp: IO[str], chunk_size: int):
        self.fp = fp
        self.chunk = max(1, chunk_size)
        self.buf = ""
        self.pos = 0
        self.eof = False

    def _more(self, want: int) -> bool:
        """Append at least ``want`` characters (fewer at the end); False at end of input."""
        if self.eof:
            return False
        data = self.fp.read(max(want, self.chunk))
        if not data:
            self.eof = True
            return False
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
                self.skip_nested()
                return Unreadable("nested too deeply to decode; skipped")
            except json.JSONDecodeError as exc:
                if _is_syntax_error(exc, len(self.buf)):
                    raise TruncatedJSON(f"malformed JSON ({exc.msg})") from None
                if self._more(want):
                    want *= 2  # a huge element costs O(n log n) re-scans, not O(n^2)
                    continue
                raise TruncatedJSON(f"invalid or truncated JSON ({exc.msg})") from None
            if _is_number(value) and (end == len(self.buf) or self.buf[end] in _NUMBER_TAIL) and self._more(self.chunk):
                continue  # a number cut by the read ("3." + "25") goes on in the next chunk
            self.pos = end
            return value

    def skip_nested(self) -> None:
        """Move the cursor past one array or object by counting brackets outside strings."""
        depth, in_string, at = 0, False, self.pos
        while True:
            match = _NESTING.search(self.buf, at)
            if match is None:
                at -= self.pos  # _more drops the consumed text before the cursor
                if not self._more(self.chunk):
                    raise TruncatedJSON("the file ends inside a deeply nested value (truncated?)")
                continue
            char, at = match.group(), match.end()
            if in_string:
                at += char == "\\"  # skip the escaped character
                in_string = char != '"'
            elif char == '"':
                in_string = True
            else:
                depth += 1 if char in "[{" else -1
                if depth == 0:
                    self.pos = at
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
            if self.skip_ws() == ",":
                self.pos += 1
        yield seen


def _is_syntax_error(exc: json.JSONDecodeError, end: int) -> bool:
    """An error well before the end of the buffer cannot be cured by reading more (unless a string runs on)."""
    return exc.pos < end - _TAIL and not exc.msg.startswith("Unterminated string")


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
