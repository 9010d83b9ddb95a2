"""Stream the elements of a top-level JSON array without holding the whole file."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import IO, Any

_DECODER = json.JSONDecoder()
_WS = " \t\r\n"
_NUMBER_CHARS = "0123456789.eE+-"


class TruncatedJSON(ValueError):
    """The file ended (or broke) inside an element; earlier elements were yielded."""


def iter_json_array(fp: IO[str], chunk_size: int = 1 << 16, key: str = "conversations") -> Iterator[Any]:
    """Yield each element of ``[...]`` or of ``{"<key>": [...]}`` from a text stream."""
    reader = _Reader(fp, chunk_size)
    first = reader.skip_ws()
    if first == "{":
        reader.enter_object_array(key)
    elif first == "[":
        reader.pos += 1
    else:
        raise ValueError("not a JSON array (expected '[' or an object with a list)")
    yield from reader.elements()


class _Reader:
    def __init__(self, fp: IO[str], chunk_size: int):
        self.fp = fp
        self.chunk = chunk_size
        self.buf = ""
        self.pos = 0
        self.eof = False

    def _more(self, want: int) -> bool:
        if self.eof:
            return False
        data = self.fp.read(max(want, self.chunk))
        if not data:
            self.eof = True
            return False
        self.buf = self.buf[self.pos:] + data
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

    def enter_object_array(self, key: str) -> None:
        """Position after the '[' of ``{"key": [``; other keys before it are decoded and skipped."""
        self.pos += 1
        while True:
            if self.skip_ws() != '"':
                raise ValueError(f"no {key!r} list in the top-level object")
            name = self.decode()
            if self.skip_ws() != ":":
                raise ValueError("malformed top-level object")
            self.pos += 1
            if name == key and self.skip_ws() == "[":
                self.pos += 1
                return
            self.decode()
            if self.skip_ws() == ",":
                self.pos += 1

    def decode(self) -> Any:
        """Decode one JSON value at the cursor, reading more (geometrically) until it is complete."""
        want = self.chunk
        while True:
            self.skip_ws()
            try:
                value, end = _DECODER.raw_decode(self.buf, self.pos)
            except json.JSONDecodeError as exc:
                if self._more(want):
                    want *= 2  # a huge element costs O(n log n), not O(n^2)
                    continue
                raise TruncatedJSON(f"invalid or truncated JSON: {exc.msg} at char {exc.pos}") from None
            if not self.eof and (end == len(self.buf) or self.buf[end] in _NUMBER_CHARS) \
                    and self._more(self.chunk):
                continue  # a number cut by the read ("3." + "25") goes on in the next chunk
            self.pos = end
            return value

    def elements(self) -> Iterator[Any]:
        """Yield array elements up to the closing ']'."""
        if self.skip_ws() == "]":
            return
        while True:
            yield self.decode()
            sep = self.skip_ws()
            if sep == ",":
                self.pos += 1
            elif sep == "]":
                return
            else:
                raise TruncatedJSON("the array ends without ']' (file truncated?)")
