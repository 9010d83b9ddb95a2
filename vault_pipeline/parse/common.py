"""Small helpers shared by the format readers."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from vault_pipeline.parse.types import RecordError


def from_epoch(value: Any) -> datetime | None:
    """Unix seconds (float or int) to an aware UTC datetime; None when absent or nonsense."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        return datetime.fromtimestamp(float(value), tz=timezone.utc)
    except (OverflowError, OSError, ValueError):
        return None


def from_iso(value: Any) -> datetime | None:
    """An ISO 8601 string to an aware UTC datetime; None when absent or unparseable."""
    if not isinstance(value, str) or not value:
        return None
    try:
        stamp = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return stamp.replace(tzinfo=timezone.utc) if stamp.tzinfo is None else stamp.astimezone(timezone.utc)


def need(record: Any, key: str, kind: type | tuple[type, ...], what: str = "") -> Any:
    """``record[key]`` checked for type, else a RecordError naming the field."""
    if not isinstance(record, dict):
        raise RecordError(f"{what or 'record'} is a {type(record).__name__}, not an object")
    if key not in record:
        raise RecordError(f"missing {key!r}")
    value = record[key]
    if not isinstance(value, kind):
        names = kind.__name__ if isinstance(kind, type) else "/".join(k.__name__ for k in kind)
        raise RecordError(f"{key!r} is a {type(value).__name__}, expected {names}")
    return value


def clean_text(text: str) -> str:
    """Strip NULs and surrounding white space."""
    return text.replace("\x00", "").strip()


def label(index: int, record: Any, *keys: str) -> str:
    """'17 (id abc...)' for issue messages."""
    if isinstance(record, dict):
        for key in keys:
            value = record.get(key)
            if isinstance(value, str) and value:
                return f"{index} (id {value[:40]})"
    return str(index)
