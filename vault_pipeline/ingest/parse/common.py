"""Small helpers shared by the format readers."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

from vault_pipeline.ingest.parse.types import RecordError

# Newer ChatGPT exports embed invisible citation tokens ("\ue200cite\ue202turn0search1\ue201").
# A token never holds another opener: excluding it keeps the scan linear on unterminated openers.
_CITE_TOKEN = re.compile("\ue200(?:cite|filecite)[^\ue200\ue201]*\ue201")
# Lone surrogates (JSON "\\ud800" escapes, undecodable file names) cannot be written as UTF-8.
_SURROGATE = re.compile("[\ud800-\udfff]")
SHOWN = 60  # characters of a value quoted in an issue message


def from_epoch(value: Any) -> datetime | None:
    """Unix seconds (float or int) to an aware UTC datetime; None when absent or nonsense."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        return datetime.fromtimestamp(float(value), tz=UTC)
    except (OverflowError, OSError, ValueError):
        return None


def from_iso(value: Any) -> datetime | None:
    """An ISO 8601 string to an aware UTC datetime (naive taken as UTC); None when absent or unparseable."""
    if not isinstance(value, str) or not value.strip():
        return None
    try:
        stamp = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError:
        return None
    return stamp.replace(tzinfo=UTC) if stamp.tzinfo is None else stamp.astimezone(UTC)


def type_name(value: Any) -> str:
    """JSON-ish name of a Python value's type, for issue messages."""
    return {
        dict: "an object",
        list: "a list",
        str: "a string",
        int: "a number",
        float: "a number",
        bool: "a boolean",
        type(None): "null",
    }.get(type(value), type(value).__name__)


def need(record: Any, key: str, kind: type | tuple[type, ...], what: str = "record") -> Any:
    """``record[key]`` checked for type, else a RecordError naming the field."""
    if not isinstance(record, dict):
        raise RecordError(f"{what} is {type_name(record)}, not an object")
    if key not in record:
        raise RecordError(f"missing {key!r}")
    value = record[key]
    if not isinstance(value, kind) or (isinstance(value, bool) and bool not in _as_tuple(kind)):
        names = " or ".join(type_name(k()) for k in _as_tuple(kind))
        raise RecordError(f"{key!r} is {type_name(value)}, expected {names}")
    return value


def _as_tuple(kind: type | tuple[type, ...]) -> tuple[type, ...]:
    return kind if isinstance(kind, tuple) else (kind,)


def clean_text(text: str) -> str:
    """Strip NULs, invisible citation tokens and surrounding white space; lone surrogates become U+FFFD."""
    return _CITE_TOKEN.sub("", writable(text).replace("\x00", "")).strip()


def clean_id(value: Any) -> str | None:
    """An id string cleaned like text, or None when it is not a non-blank string."""
    return (clean_text(value) or None) if isinstance(value, str) else None


def writable(text: str) -> str:
    """``text`` with lone surrogates replaced by U+FFFD, so it encodes as UTF-8."""
    if text.isascii() or not _SURROGATE.search(text):
        return text
    return _SURROGATE.sub("\ufffd", text)


def shown(value: Any, limit: int = SHOWN) -> str:
    """A value quoted for a one-line issue message: repr, cut to ``limit`` characters, encodable."""
    text = repr(value[: limit + 1] if isinstance(value, str) else value)
    return writable(text if len(text) <= limit + 2 else text[:limit] + "...")


def label(index: int, record: Any, *keys: str) -> str:
    """'17 (id abc...)' for issue messages."""
    if isinstance(record, dict):
        for key in keys:
            value = record.get(key)
            if isinstance(value, (str, int)) and not isinstance(value, bool) and str(value):
                return f"{index} (id {printable(str(value)[:SHOWN])})"
    return str(index)


def printable(text: str) -> str:
    """Control and other unprintable characters escaped, so a label stays on one line."""
    return writable("".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in text))
