"""LoCoMo samples: each session is one conversation; both speakers are people; dia_ids are message ids."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

from vault_pipeline.ingest.parse.common import clean_id, clean_text, need, shown, type_name
from vault_pipeline.ingest.parse.types import Conversation, Message, RecordError

_SESSION = re.compile(r"session_(\d+)")
_DATE_FORMATS = ("%I:%M %p on %d %B, %Y", "%I:%M %p on %d %b, %Y", "%I:%M %p on %B %d, %Y", "%I:%M %p on %b %d, %Y")


def parse_sample(record: Any, source: str, notes: list[str]) -> list[Conversation]:
    """One LoCoMo sample -> one Conversation per session in numeric order; ``notes`` for skipped turns."""
    conv = need(record, "conversation", dict, "sample")
    sample_id = clean_id(str(need(record, "sample_id", (str, int))))
    if sample_id is None:
        raise RecordError("'sample_id' is blank")
    a, b = (
        clean_id(str(conv.get(key) or "")) or default
        for key, default in (("speaker_a", "speaker A"), ("speaker_b", "speaker B"))
    )
    numbers = sorted(int(m.group(1)) for key in conv if (m := _SESSION.fullmatch(key)))
    if not numbers:
        raise RecordError("no session_N lists in 'conversation'")
    out = []
    for n in numbers:
        session = _session(conv, n, notes)
        if session is None:
            continue
        created, messages = session
        if not messages:
            notes.append(f"session_{n}: no user or assistant messages")
            continue
        out.append(
            Conversation(
                kind="locomo",
                id=f"{sample_id}:session_{n}",
                title=f"{a} and {b}, session {n}",
                created=created,
                updated=created,
                messages=messages,
                source=source,
                thread=sample_id,
                titled=False,  # LoCoMo names no session: the title is ours
            )
        )
    return out


def _session(conv: dict, n: int, notes: list[str]) -> tuple[datetime | None, tuple[Message, ...]] | None:
    """(date, messages) of session ``n``; None (with a note) when the session is not a list."""
    turns = conv[f"session_{n}"]
    if not isinstance(turns, list):
        notes.append(f"session_{n} is {type_name(turns)}, not a list; skipped")
        return None
    raw_date = conv.get(f"session_{n}_date_time")
    created = parse_date(raw_date)
    if created is None and raw_date is not None:
        notes.append(f"session_{n}_date_time {shown(raw_date)} not understood; messages left undated")
    messages = []
    for i, turn in enumerate(turns):
        try:
            messages.append(_message(turn, created))
        except RecordError as exc:
            notes.append(f"session_{n} turn {i}: {exc}; skipped")
    return created, tuple(messages)


def _message(turn: Any, created: datetime | None) -> Message:
    """One turn; RecordError when it has no dia_id or no text."""
    if not isinstance(turn, dict):
        raise RecordError(f"turn is {type_name(turn)}, not an object")
    dia_id = clean_id(turn.get("dia_id"))
    if dia_id is None:
        raise RecordError("missing 'dia_id'")
    text = clean_text(turn["text"]) if isinstance(turn.get("text"), str) else ""
    caption = turn.get("blip_caption")
    if isinstance(caption, str) and clean_text(caption):
        text = f"{text} [shares a photo: {clean_text(caption)}]".strip()
    if not text:
        raise RecordError(f"turn {shown(dia_id)} has no text")
    speaker = clean_id(turn.get("speaker")) or "speaker"
    return Message(id=dia_id, role="user", speaker=speaker, text=text, created=created)


def parse_date(value: Any) -> datetime | None:
    """'1:56 pm on 8 May, 2023' -> aware UTC datetime; None when absent or in another format."""
    if not isinstance(value, str):
        return None
    cleaned = " ".join(value.split())
    for fmt in _DATE_FORMATS:
        try:
            return datetime.strptime(cleaned, fmt).replace(tzinfo=UTC)
        except ValueError:
            continue
    return None
