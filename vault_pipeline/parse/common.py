"""Small helpers shared by the format readers."""

from __future__ import annotations

import re
from datetime import datetime, timezone
from typing import Any

from vault_pipeline.parse.types import RecordError

# Newer ChatGPT exports embed invisible citation tokens ("\ue200cite\ue202turn0search1\ue201").
_CITE_TOKEN = re.compile("\ue200(?:cite|filecite)[^\ue201]*\ue201")


def from_epoch(value: Any) -> datetime | None:
    """Unix seconds (float or int) to an aware UTC datetime; None when absent or nonsense."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        return datetime.fromtimestamp(float(value), tz=timezone.utc)
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
    return stamp.replace(tzinfo=timezone.utc) if stamp.tzinfo is None else stamp.astimezone(timezone.utc)


def type_name(value: Any) -> str:
    """JSON-ish name of a Python value's type, for issue messages."""
    return {dict: "an object", list: "a list", str: "a string", int: "a number", float: "a number",
            bool: "a boolean", type(None): "null"}.get(type(value), type(value).__name__)


def need(record: Any, key: str, kind: type | tuple[type, ...], what: str = "record") -> Any:
    """``record[key]`` checked for type, else a RecordError naming the field."""
    if not isinstance(record, dict):
        raise RecordError(f"{what} is {type_name(record)}, not an object")
    if key not in record:
        raise RecordError(f"missing {key!r}")
    value = record[key]
    if not isinstance(value, kind) or isinstance(value, bool) and bool not in _as_tuple(kind):
        names = " or ".join(type_name(k()) for k in _as_tuple(kind))
        raise RecordError(f"{key!r} is {type_name(value)}, expected {names}")
    return value


def _as_tuple(kind: type | tuple[type, ...]) -> tuple[type, ...]:
    return kind if isinstance(kind, tuple) else (kind,)


def clean_text(text: str) -> str:
    """Strip NULs, invisible citation tokens and surrounding white space."""
    return _CITE_TOKEN.sub("", text.replace("\x00", "")).strip()


def label(index: int, record: Any, *keys: str) -> str:
    """'17 (id abc...)' for issue messages."""
    if isinstance(record, dict):
        for key in keys:
            value = record.get(key)
            if isinstance(value, (str, int)) and not isinstance(value, bool) and str(value):
                return f"{index} (id {str(value)[:60]})"
    return str(index)
