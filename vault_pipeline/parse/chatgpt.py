"""ChatGPT ``conversations.json``: the main branch is the current_node path, not a tree walk."""

from __future__ import annotations

from typing import Any

from vault_pipeline.parse.common import clean_text, from_epoch, need
from vault_pipeline.parse.types import Conversation, Message, RecordError

_TEXT_TYPES = {"text", "multimodal_text"}


def parse_conversation(record: Any, source: str) -> Conversation:
    """One ChatGPT conversation record -> Conversation (RecordError when malformed)."""
    mapping = need(record, "mapping", dict, "conversation")
    conv_id = record.get("id") or record.get("conversation_id")
    if not isinstance(conv_id, str) or not conv_id:
        raise RecordError("missing 'id'/'conversation_id'")
    path = _main_path(mapping, record.get("current_node"))
    messages = tuple(m for m in (_message(mapping[node]) for node in path) if m is not None)
    if not messages:
        raise RecordError("no user or assistant messages")
    on_path = set(path)
    alternates = sum(1 for node_id, node in mapping.items()
                     if node_id not in on_path and isinstance(node, dict) and isinstance(node.get("message"), dict))
    title = record.get("title") if isinstance(record.get("title"), str) and record.get("title").strip() else None
    return Conversation(kind="chatgpt", id=conv_id, title=(title or "Untitled conversation").strip(),
                        created=from_epoch(record.get("create_time")), updated=from_epoch(record.get("update_time")),
                        messages=messages, source=source, alternates=alternates)


def _main_path(mapping: dict, current: Any) -> list[str]:
    """Node ids from the root to ``current_node`` (else the newest leaf), following parent links."""
    if not isinstance(current, str) or current not in mapping:
        current = _newest_leaf(mapping)
    path, seen = [], set()
    node_id = current
    while isinstance(node_id, str) and node_id in mapping and node_id not in seen:
        seen.add(node_id)
        path.append(node_id)
        node = mapping[node_id]
        if not isinstance(node, dict):
            raise RecordError(f"mapping node {node_id!r} is not an object")
        node_id = node.get("parent")
    return path[::-1]


def _newest_leaf(mapping: dict) -> str | None:
    leaves = [(_node_time(node), node_id) for node_id, node in mapping.items()
              if isinstance(node, dict) and not node.get("children")]
    if not leaves:
        raise RecordError("no current_node and no leaf in mapping")
    return max(leaves)[1]


def _node_time(node: dict) -> float:
    message = node.get("message")
    stamp = message.get("create_time") if isinstance(message, dict) else None
    return float(stamp) if isinstance(stamp, (int, float)) and not isinstance(stamp, bool) else 0.0


def _message(node: Any) -> Message | None:
    """A visible user/assistant turn, or None for roots, system, tool, hidden and non-text content."""
    message = node.get("message") if isinstance(node, dict) else None
    if not isinstance(message, dict):
        return None
    author = message.get("author") if isinstance(message.get("author"), dict) else {}
    role = author.get("role")
    metadata = message.get("metadata") if isinstance(message.get("metadata"), dict) else {}
    if role not in ("user", "assistant") or metadata.get("is_visually_hidden_from_conversation"):
        return None
    content = message.get("content")
    if not isinstance(content, dict) or content.get("content_type") not in _TEXT_TYPES:
        return None
    text = _parts_text(content.get("parts"))
    if not text or not isinstance(message.get("id"), str):
        return None
    return Message(id=message["id"], role=role, speaker=role, text=text, created=from_epoch(message.get("create_time")))


def _parts_text(parts: Any) -> str:
    if not isinstance(parts, list):
        return ""
    texts = [clean_text(p) for p in parts if isinstance(p, str) and p.strip()]
    images = any(isinstance(p, dict) and "image" in str(p.get("content_type", "")) for p in parts)
    if not texts:
        return ""  # an image-only message carries no text unit
    return "\n\n".join(texts + (["[image]"] if images else []))
