"""LoCoMo samples: each session is one conversation; both speakers are people; dia_ids are message ids."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import datetime, timezone
from typing import Any

from vault_pipeline.parse.common import clean_text, need
from vault_pipeline.parse.types import Conversation, Message, RecordError

_SESSION = re.compile(r"^session_(\d+)$")


def parse_sample(record: Any, source: str) -> Iterator[Conversation]:
    """One LoCoMo sample -> one Conversation per session, in session order."""
    conv = need(record, "conversation", dict, "sample")
    sample_id = str(record.get("sample_id") or "sample")
    a, b = str(conv.get("speaker_a", "A")), str(conv.get("speaker_b", "B"))
    numbers = sorted(int(m.group(1)) for key in conv if (m := _SESSION.match(key)))
    if not numbers:
        raise RecordError("no session_N lists in 'conversation'")
    for n in numbers:
        turns = conv[f"session_{n}"]
        if not isinstance(turns, list):
            raise RecordError(f"session_{n} is not a list")
        created = parse_date(conv.get(f"session_{n}_date_time"))
        messages = tuple(m for m in (_message(t, created) for t in turns) if m is not None)
        if messages:
            yield Conversation(kind="locomo", id=f"{sample_id}:session_{n}", title=f"{a} and {b}, session {n}",
                               created=created, updated=created, messages=messages, source=source, thread=sample_id)


def _message(turn: Any, created: datetime | None) -> Message | None:
    if not isinstance(turn, dict) or not isinstance(turn.get("dia_id"), str):
        return None
    text = clean_text(str(turn.get("text") or ""))
    caption = turn.get("blip_caption")
    if isinstance(caption, str) and caption.strip():
        text = f"{text} [shares a photo: {caption.strip()}]".strip()
    if not text:
        return None
    speaker = str(turn.get("speaker") or "speaker")
    return Message(id=turn["dia_id"], role="user", speaker=speaker, text=text, created=created)


def parse_date(value: Any) -> datetime | None:
    """'1:56 pm on 8 May, 2023' -> aware UTC datetime."""
    if not isinstance(value, str):
        return None
    for fmt in ("%I:%M %p on %d %B, %Y", "%I:%M %p on %d %b, %Y", "%I:%M %p on %B %d, %Y"):
        try:
            return datetime.strptime(value.strip(), fmt).replace(tzinfo=timezone.utc)
        except ValueError:
            continue
    return None
