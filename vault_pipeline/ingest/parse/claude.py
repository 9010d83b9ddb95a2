"""Claude.ai ``conversations.json``: text from ``content`` blocks, branches from parent_message_uuid."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from vault_pipeline.ingest.parse.common import clean_id, clean_text, from_iso, need, type_name
from vault_pipeline.ingest.parse.types import Conversation, Message, RecordError, Role

ROOT = "00000000-0000-4000-8000-000000000000"
_ROLES: dict[str, Role] = {"human": "user", "user": "user", "assistant": "assistant"}
_NEVER = datetime.min.replace(tzinfo=UTC)


def parse_conversation(record: Any, source: str, notes: list[str]) -> list[Conversation]:
    """One Claude conversation record -> [Conversation]; RecordError when unusable, ``notes`` for bad messages."""
    raw = need(record, "chat_messages", list, "conversation")
    conv_id = clean_id(need(record, "uuid", str))
    if conv_id is None:
        raise RecordError("'uuid' is blank")
    items = _objects(raw, notes)
    branch = _main_branch(items)
    messages = tuple(m for m in (_message(item) for item in branch) if m is not None)
    unnamed = sum(1 for item in branch if _unnamed(item))
    if not messages:
        raise RecordError(_why_empty(branch, unnamed))
    if unnamed:
        notes.append(f"{unnamed} message(s) without a 'uuid' (needed to link notes to them); skipped")
    on_branch = {id(item) for item in branch}
    alternates = sum(1 for item in items if id(item) not in on_branch and _message(item) is not None)
    return [
        Conversation(
            kind="claude",
            id=conv_id,
            title=clean_id(record.get("name")) or "Untitled conversation",
            created=from_iso(record.get("created_at")),
            updated=from_iso(record.get("updated_at")),
            messages=messages,
            source=source,
            thread=_project(record),
            alternates=alternates,
        )
    ]


def _objects(raw: list[Any], notes: list[str]) -> list[dict]:
    """The message objects of ``chat_messages``; anything else is noted and skipped."""
    items = []
    for i, item in enumerate(raw):
        if isinstance(item, dict):
            items.append(item)
        else:
            notes.append(f"chat_messages[{i}] is {type_name(item)}, not an object; skipped")
    return items


def _unnamed(item: dict) -> bool:
    """A user or assistant turn with text but no ``uuid`` (notes could not link to it)."""
    return bool(_role(item) and clean_id(item.get("uuid")) is None and _text(item))


def _project(record: dict) -> str | None:
    """The project uuid, if the export gives one (``project_uuid`` or ``project.uuid``)."""
    value = record.get("project_uuid")
    project = record.get("project")
    if not isinstance(value, str) and isinstance(project, dict):
        value = project.get("uuid")
    return clean_id(value)


def _main_branch(items: list[dict]) -> list[dict]:
    """The path back from the newest leaf when messages carry parents; else the list as given."""
    if not any(isinstance(item.get("parent_message_uuid"), str) for item in items):
        return items  # older exports: a linear list (a null parent everywhere means the same)
    by_id = {item["uuid"]: item for item in items if isinstance(item.get("uuid"), str)}
    parents = {item["parent_message_uuid"] for item in items if isinstance(item.get("parent_message_uuid"), str)}
    leaves = [i for i, item in enumerate(items) if item.get("uuid") not in parents]
    newest = max(leaves or range(len(items)), key=lambda i: (from_iso(items[i].get("created_at")) or _NEVER, i))
    path: list[dict] = []
    seen: set[int] = set()
    item: dict | None = items[newest]
    while item is not None and id(item) not in seen:
        seen.add(id(item))
        path.append(item)
        parent = item.get("parent_message_uuid")
        item = by_id.get(parent) if isinstance(parent, str) and parent != ROOT else None
    return path[::-1]


def _why_empty(branch: list[dict], unnamed: int) -> str:
    """Why no message of the main branch is usable, as precisely as the record shows."""
    if not branch:
        return "no messages in 'chat_messages'"
    if unnamed:
        return f"no usable message: {unnamed} message(s) lack a 'uuid' (needed to link notes to them)"
    if not any(_role(item) for item in branch):
        return "no user or assistant messages"
    return "no user or assistant message has text"


def _role(item: dict) -> Role | None:
    sender = item.get("sender")
    return _ROLES.get(sender) if isinstance(sender, str) else None


def _message(item: dict) -> Message | None:
    """A user/assistant turn with visible text; None otherwise."""
    role = _role(item)
    msg_id = clean_id(item.get("uuid"))
    if role is None or msg_id is None:
        return None
    text = _text(item)
    if not text:
        return None
    return Message(id=msg_id, role=role, speaker=role, text=text, created=from_iso(item.get("created_at")))


def _text(item: dict) -> str:
    """The turn's text, then each attachment's extracted text under its file name."""
    parts = [_turn_text(item), *_attachments(item)]
    return "\n\n".join(p for p in parts if p)


def _turn_text(item: dict) -> str:
    """Only ``text`` blocks: the top-level text can glue the thinking block to the answer."""
    content = item.get("content")
    if isinstance(content, list):
        blocks = [
            clean_text(b["text"])
            for b in content
            if isinstance(b, dict) and b.get("type") == "text" and isinstance(b.get("text"), str)
        ]
        return "\n\n".join(b for b in blocks if b)
    text = item.get("text")
    return clean_text(text) if isinstance(text, str) else ""


def _attachments(item: dict) -> list[str]:
    """An attachment's ``extracted_content`` is what the user gave the conversation: it is read as theirs."""
    found = []
    for a in item.get("attachments") or ():
        if isinstance(a, dict) and isinstance(a.get("extracted_content"), str) and a["extracted_content"].strip():
            name = clean_id(a.get("file_name")) or "attachment"
            found.append(f"Attachment {name}\n\n{clean_text(a['extracted_content'])}")
    return found
