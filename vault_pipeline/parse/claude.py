"""Claude.ai ``conversations.json``: text from ``content`` blocks, branches from parent_message_uuid."""

from __future__ import annotations

from typing import Any

from vault_pipeline.parse.common import clean_text, from_iso, need
from vault_pipeline.parse.types import Conversation, Message, RecordError

ROOT = "00000000-0000-4000-8000-000000000000"
_ROLES = {"human": "user", "user": "user", "assistant": "assistant"}


def parse_conversation(record: Any, source: str) -> Conversation:
    """One Claude conversation record -> Conversation (RecordError when malformed)."""
    raw = need(record, "chat_messages", list, "conversation")
    conv_id = need(record, "uuid", str)
    items = [m for m in raw if isinstance(m, dict)]
    if len(items) != len(raw):
        raise RecordError("a chat_messages entry is not an object")
    branch = _main_branch(items)
    messages = tuple(m for m in (_message(item) for item in branch) if m is not None)
    if not messages:
        raise RecordError("no user or assistant messages")
    name = record.get("name") if isinstance(record.get("name"), str) else ""
    project = record.get("project_uuid")
    return Conversation(kind="claude", id=conv_id, title=name.strip() or "Untitled conversation",
                        created=from_iso(record.get("created_at")), updated=from_iso(record.get("updated_at")),
                        messages=messages, source=source, thread=project if isinstance(project, str) else None,
                        alternates=len(items) - len(branch))


def _main_branch(items: list[dict]) -> list[dict]:
    """The path to the newest leaf when messages carry parents; else the list as given."""
    if not any("parent_message_uuid" in m for m in items):
        return items
    by_id = {m.get("uuid"): m for m in items if isinstance(m.get("uuid"), str)}
    parents = {m.get("parent_message_uuid") for m in items}
    leaves = [m for m in items if m.get("uuid") not in parents]
    leaf = max(leaves or items, key=lambda m: (str(m.get("created_at") or ""), items.index(m)))
    path, seen = [], set()
    node = leaf
    while node is not None and node.get("uuid") not in seen:
        seen.add(node.get("uuid"))
        path.append(node)
        parent = node.get("parent_message_uuid")
        node = by_id.get(parent) if parent and parent != ROOT else None
    return path[::-1]


def _message(item: dict) -> Message | None:
    role = _ROLES.get(item.get("sender"))
    if role is None or not isinstance(item.get("uuid"), str):
        return None
    text = _text(item)
    if not text:
        return None
    return Message(id=item["uuid"], role=role, speaker=role, text=text, created=from_iso(item.get("created_at")))


def _text(item: dict) -> str:
    """Only ``text`` blocks: the top-level text can glue the thinking block to the answer."""
    content = item.get("content")
    if isinstance(content, list):
        blocks = [clean_text(b["text"]) for b in content
                  if isinstance(b, dict) and b.get("type") == "text" and isinstance(b.get("text"), str)]
        return "\n\n".join(b for b in blocks if b)
    text = item.get("text")
    return clean_text(text) if isinstance(text, str) else ""
