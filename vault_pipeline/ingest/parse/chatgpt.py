"""ChatGPT ``conversations.json``: the main branch is the current_node path, not a tree walk."""

from __future__ import annotations

import re
from typing import Any

from vault_pipeline.ingest.parse.common import clean_id, clean_text, from_epoch, need, shown, type_name
from vault_pipeline.ingest.parse.types import Conversation, Message, RecordError, Role

_TEXT_TYPES = frozenset({"text", "multimodal_text"})


def parse_conversation(record: Any, source: str, notes: list[str]) -> list[Conversation]:
    """One ChatGPT conversation record -> [Conversation]; RecordError when unusable, ``notes`` for bad messages."""
    mapping = need(record, "mapping", dict, "conversation")
    conv_id = _conversation_id(record)
    path = _main_path(mapping, record.get("current_node"), notes)
    messages = []
    for node_id in path:
        try:
            message = _message(mapping[node_id], node_id)
        except RecordError as exc:
            notes.append(f"message {shown(node_id)}: {exc}; skipped")
            continue
        if message is not None:
            messages.append(message)
    if not messages:
        raise RecordError("no user or assistant messages")
    on_path = set(path)
    alternates = sum(1 for node_id, node in mapping.items() if node_id not in on_path and _is_turn(node, node_id))
    title = clean_id(record.get("title")) or "Untitled conversation"
    return [
        Conversation(
            kind="chatgpt",
            id=conv_id,
            title=title,
            created=from_epoch(record.get("create_time")),
            updated=from_epoch(record.get("update_time")),
            messages=tuple(messages),
            source=source,
            alternates=alternates,
        )
    ]


def _conversation_id(record: dict) -> str:
    for key in ("id", "conversation_id"):
        value = clean_id(record.get(key))
        if value:
            return value
    raise RecordError("missing 'id' / 'conversation_id'")


def _main_path(mapping: dict, current: Any, notes: list[str]) -> list[str]:
    """Node ids from the root to ``current_node`` (else the newest leaf), following parent links."""
    if not isinstance(current, str) or current not in mapping:
        current = _newest_leaf(mapping)
    path: list[str] = []
    seen: set[str] = set()
    node_id: Any = current
    while node_id is not None:
        if not isinstance(node_id, str) or node_id not in mapping:
            notes.append(
                f"parent {shown(node_id)} of node {shown(path[-1])} is not in 'mapping'; the thread starts there"
            )
            break
        if node_id in seen:
            raise RecordError(f"'parent' links loop at node {shown(node_id)}")
        node = mapping[node_id]
        if not isinstance(node, dict):
            raise RecordError(f"mapping node {shown(node_id)} is {type_name(node)}, not an object")
        seen.add(node_id)
        path.append(node_id)
        node_id = node.get("parent")
    return path[::-1]


def _newest_leaf(mapping: dict) -> str:
    """The leaf with the latest message create_time: the fallback when current_node is missing or dangling."""
    leaves = [
        (_node_time(node), node_id)
        for node_id, node in mapping.items()
        if isinstance(node, dict) and not node.get("children")
    ]
    if not leaves:
        raise RecordError("no usable 'current_node' and no leaf in 'mapping'")
    return max(leaves)[1]


def _node_time(node: dict) -> float:
    message = node.get("message")
    stamp = message.get("create_time") if isinstance(message, dict) else None
    return float(stamp) if isinstance(stamp, (int, float)) and not isinstance(stamp, bool) else float("-inf")


def _is_turn(node: Any, node_id: str) -> bool:
    """Whether an off-path node would have been a visible turn (an abandoned edit or regeneration)."""
    try:
        return _message(node, node_id) is not None
    except RecordError:
        return False


def _message(node: Any, node_id: str) -> Message | None:
    """A visible user/assistant turn; None for roots, system, tool traffic, hidden and non-text content."""
    if not isinstance(node, dict):
        raise RecordError(f"node is {type_name(node)}, not an object")
    message = node.get("message")
    if message is None:
        return None
    role = _visible_role(message)
    if role is None:
        return None
    content = message.get("content")
    if not isinstance(content, dict):
        raise RecordError(f"'content' is {type_name(content)}, not an object")
    if not isinstance(content.get("content_type"), str) or content["content_type"] not in _TEXT_TYPES:
        return None  # code, execution_output, thoughts, tether_*, ... are not turns
    parts = content.get("parts")
    if not isinstance(parts, list):
        raise RecordError(f"'content.parts' is {type_name(parts)}, expected a list")
    text = cited(_parts_text(parts), message.get("metadata"))
    if not text:
        return None
    msg_id = clean_id(message.get("id")) or clean_id(node_id) or shown(node_id)
    return Message(id=msg_id, role=role, speaker=role, text=text, created=from_epoch(message.get("create_time")))


# A browsing citation marker: 【5†source】, 【3†Title†host】.
_MARKER = re.compile(r"\s?【[^】]*】")


def cited(text: str, metadata: Any) -> str:
    """The text with each browsing citation marker turned into the link it cites (a Markdown link
    titled "source", which notes leave out) or, without a URL in the message's metadata, removed."""
    found = metadata.get("citations") if isinstance(metadata, dict) else None
    links = {}
    for citation in found if isinstance(found, list) else ():
        meta = citation.get("metadata") if isinstance(citation, dict) else None
        start = citation.get("start_ix") if isinstance(citation, dict) else None
        if isinstance(meta, dict) and isinstance(meta.get("url"), str) and isinstance(start, int):
            title = " ".join(str(meta.get("title") or meta["url"]).split()).replace("]", ")").replace("[", "(")
            links[start] = f' [{title}]({meta["url"].replace(" ", "%20")} "source")'
    return _MARKER.sub(
        lambda m: links.get(m.start() + (m.group().startswith(" ") or m.group().startswith("\n")), ""), text
    )


def _visible_role(message: Any) -> Role | None:
    """'user' or 'assistant' for a turn the user saw; None for system, tool, hidden and tool calls."""
    if not isinstance(message, dict):
        raise RecordError(f"'message' is {type_name(message)}, not an object")
    author = message.get("author")
    if not isinstance(author, dict):
        raise RecordError(f"'author' is {type_name(author)}, not an object")
    role: Role
    match author.get("role"):
        case "user" | "assistant" as known:
            role = known
        case _:
            return None
    metadata = message.get("metadata")
    if isinstance(metadata, dict) and metadata.get("is_visually_hidden_from_conversation"):
        return None
    if message.get("recipient") not in (None, "all"):
        return None  # an assistant call to a tool or plugin: tool traffic, not a turn
    return role


def _parts_text(parts: list) -> str:
    """String parts (and voice transcriptions) joined; images noted as "[image]" only beside text."""
    pieces: list[str] = []
    has_text = False
    for part in parts:
        if isinstance(part, dict) and part.get("content_type") == "audio_transcription":
            part = part.get("text")
        if isinstance(part, str):
            text = clean_text(part)
            if text:
                pieces.append(text)
                has_text = True
        elif isinstance(part, dict) and "image" in str(part.get("content_type", "")):
            pieces.append("[image]")
    return "\n\n".join(pieces) if has_text else ""
