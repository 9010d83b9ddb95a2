"""The note builders: atomic notes, session notes with their transcript, thread maps and topic hubs.

Nothing here touches the file system; ``vault.files`` is the only module that writes.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from vault_pipeline.ingest.extract import AtomicUnit, ThreadMap
from vault_pipeline.ingest.parse import Conversation
from vault_pipeline.text import normalise_text
from vault_pipeline.vault.note import Note, iso, note_id, safe_stem, wikilink


def atomic_id(kind: str, conversation_id: str, category: str, sentence: str) -> str:
    """Stable id of an atomic note: re-ingesting the same export yields the same id."""
    return note_id("a", kind, conversation_id, category, normalise_text(sentence))


def session_id(kind: str, conversation_id: str) -> str:
    """Stable id of a conversation's session note."""
    return note_id("s", kind, conversation_id)


def thread_id(key: str) -> str:
    """Stable id of a thread map note."""
    return note_id("t", key)


def topic_id(topic: str) -> str:
    """Stable id of a topic hub (case and punctuation of the name do not matter)."""
    return note_id("h", normalise_text(topic))


def block_id(message_id: str) -> str:
    """Obsidian block id for a message: ``m-`` + id reduced to [A-Za-z0-9-] (+ hash if reduced)."""
    raw = str(message_id)
    reduced = re.sub(r"[^A-Za-z0-9-]+", "-", raw)
    if reduced == raw and raw:
        return f"m-{raw}"
    tag = hashlib.sha256(raw.encode("utf-8")).hexdigest()[:4]
    reduced = reduced.strip("-")
    return f"m-{reduced}-{tag}" if reduced else f"m-{tag}"


# --------------------------------------------------------------------------- builders


def _source(conv: Conversation, message_ids: Iterable[str]) -> dict:
    return {
        "source": {
            "kind": conv.kind,
            "conversation": conv.id,
            "title": conv.title,
            "messages": [str(m) for m in message_ids],
        },
        "source_kind": conv.kind,
        "source_conversation": conv.id,
    }


def _one_line(text: str | None) -> str:
    return " ".join(str(text or "").split())


def atomic_note(unit: AtomicUnit, conv: Conversation, session_stem: str, created_iso: str) -> Note:
    """A provisional atomic note in inbox/, linked to its source messages in the session note."""
    nid = atomic_id(conv.kind, conv.id, unit.category, unit.text)
    sentence = _one_line(unit.text)
    frontmatter = {
        "id": nid,
        "type": "atomic",
        "category": unit.category,
        "status": "provisional",
        "tier": "chat",
        "speaker": unit.speaker,
        **_source(conv, unit.source_ids),
        "session": wikilink(session_stem),
        "created": created_iso,
    }
    lines = [sentence, ""]
    if _one_line(unit.context):
        lines += [f"Context: {_one_line(unit.context)}", ""]
    links = ", ".join(wikilink(session_stem, "^" + block_id(m)) for m in unit.source_ids)
    lines.append(f"Source: {links}")
    return Note(nid, "atomic", "inbox", safe_stem(sentence, nid), frontmatter, "\n".join(lines) + "\n")


def session_note(conv: Conversation, summary: str, units_by_message: Mapping[str, Sequence[Any]] | None = None) -> Note:
    """One note per conversation: title, summary, and the transcript with a block id per message."""
    nid = session_id(conv.kind, conv.id)
    title = _one_line(conv.title) or "Untitled conversation"
    frontmatter = {
        "id": nid,
        "type": "session",
        "tier": "chat",
        **_source(conv, (m.id for m in conv.messages)),
        "created": iso(conv.created),
    }
    links = {mid: [_stem_of(u) for u in units] for mid, units in (units_by_message or {}).items()}
    body = f"# {title}\n\n## Summary\n\n{str(summary or '').strip()}\n\n## Transcript\n\n" + render_transcript(
        conv.messages, links
    )
    return Note(nid, "session", "sessions", safe_stem(title, nid), frontmatter, body)


def _stem_of(unit: Any) -> str:
    return unit if isinstance(unit, str) else unit.stem


def thread_note(key: str, thread_map: ThreadMap, session_stems: Mapping[str, str]) -> Note:
    """A thread map across the sessions of one line of work, each step linking its session."""
    nid = thread_id(key)
    title = _one_line(thread_map.title) or _one_line(key) or "Thread"
    lines = [f"# {title}", "", "## Steps", ""]
    for number, step in enumerate(thread_map.steps, 1):
        stem = session_stems.get(step.session_id)
        where = wikilink(stem) if stem else f"session {step.session_id}"
        lines.append(f"{number}. {where}: {_one_line(step.step)}")
    if thread_map.open_questions:
        lines += ["", "## Open questions", ""]
        lines += [f"- {_one_line(q)}" for q in thread_map.open_questions]
    frontmatter = {"id": nid, "type": "thread", "tier": "chat", "thread": key}
    return Note(nid, "thread", "threads", safe_stem(title, nid), frontmatter, "\n".join(lines) + "\n")


def topic_hub(topic: str, atomic_stems: Iterable[str]) -> Note:
    """A topic hub linking its atomic notes (sorted, deduplicated; pass old links to keep them)."""
    nid = topic_id(topic)
    title = _one_line(topic) or "Topic"
    links = [f"- {wikilink(stem)}" for stem in sorted(set(atomic_stems))]
    body = "\n".join([f"# {title}", "", *links]) + "\n"
    frontmatter = {"id": nid, "type": "topic", "tier": "chat"}
    return Note(nid, "topic", "topics", safe_stem(title, nid), frontmatter, body)


# --------------------------------------------------------------------------- transcript

_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})(.*)$")
# HTML blocks that, left open, run to the end of the document (CommonMark types 1 and 2).
_HTML_OPEN = re.compile(r"^ {0,3}<(pre|script|style|textarea|!--)(?=[\s>]|$|(?<=--))", re.I)
_HTML_END = {"pre": "</pre>", "script": "</script>", "style": "</style>", "textarea": "</textarea>", "!--": "-->"}
# Lines that start something other than a plain paragraph: indented code, quote, heading,
# table, HTML, list item, thematic break or setext underline, math block.
_STRUCTURAL = re.compile(
    r"^(?: {4}|\t| {0,3}(?:[>#|<]|[-+*](?:\s|$)|\d{1,9}[.)](?:\s|$)"
    r"|(?:[-*_][ \t]*){3,}$|=+[ \t]*$|\$\$))"
)
_TRAILING_ID = re.compile(r"(^|\s)\^([A-Za-z0-9-]+)([ \t]*)$")


def render_transcript(messages: Sequence[Any], links: Mapping[str, Sequence[str]] | None = None) -> str:
    """Messages as paragraphs ``**Speaker:** text ^m-id``: every message id becomes a block id."""
    parts = []
    for message in messages:
        parts.append(_render_message(message))
        stems = list(dict.fromkeys((links or {}).get(message.id, ())))
        if stems:
            parts.append("Notes: " + ", ".join(wikilink(s) for s in stems))
    return "\n\n".join(parts) + "\n"


def _render_message(message: Any) -> str:
    lines, plain = _message_lines(str(message.text or ""))
    label = f"**{_speaker(message)}:**"
    if not lines:
        lines, plain = ["_(empty message)_"], [True]
    if _paragraph_is_plain(plain, first=True):
        lines[0] = f"{label} {lines[0]}"
    else:
        lines = [label, "", *lines]
    # Obsidian takes " ^id" at the end of a paragraph; structured blocks (lists, tables, code,
    # quotes) need the id on its own line after a blank line.
    if _paragraph_is_plain(plain, first=False):
        lines[-1] = f"{lines[-1].rstrip()} ^{block_id(message.id)}"
    else:
        lines += ["", f"^{block_id(message.id)}"]
    return "\n".join(lines)


def _speaker(message: Any) -> str:
    name = re.sub(r"[*_\[\]:`]", "", _one_line(getattr(message, "speaker", "")))
    return name or str(getattr(message, "role", "") or "speaker").capitalize()


def _message_lines(text: str) -> tuple[list[str], list[bool | None]]:
    """Lines with stray block ids escaped and open blocks closed; per line: plain, structural or blank."""
    raw = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    while raw and not raw[-1].strip():
        raw.pop()
    while raw and not raw[0].strip():
        raw.pop(0)
    lines: list[str] = []
    kinds: list[bool | None] = []
    closer: tuple[re.Pattern[str], str] | None = None  # how the open fence or HTML block ends
    for line in raw:
        if closer is not None:
            if closer[0].search(line):
                closer = None
            lines.append(line)
            kinds.append(False)
            continue
        closer = _opened_block(line)
        if closer is None and not _FENCE.match(line):
            line = _TRAILING_ID.sub(r"\1\\^\2\3", line)  # text that would pose as a block id
        lines.append(line)
        kinds.append(None if not line.strip() else not (closer or _FENCE.match(line) or _STRUCTURAL.match(line)))
    if closer is not None:  # left open, it would swallow every later message and its block id
        lines.append(closer[1])
        kinds.append(False)
    return lines, kinds


def _opened_block(line: str) -> tuple[re.Pattern[str], str] | None:
    """A fence or HTML block this line opens and does not close, as (end pattern, closing line)."""
    fence = _FENCE.match(line)
    if fence and not (fence[1][0] == "`" and "`" in fence[2]):
        mark, size = fence[1][0], len(fence[1])
        return re.compile(rf"^ {{0,3}}{re.escape(mark)}{{{size},}}[ \t]*$"), mark * size
    html = _HTML_OPEN.match(line)
    if html:
        end = _HTML_END[html[1].lower()]
        if end not in line[html.end() :].lower():
            return re.compile(re.escape(end), re.I), end
    return None


def _paragraph_is_plain(kinds: list[bool | None], *, first: bool) -> bool:
    """Whether the first (or last) paragraph consists of plain lines only."""
    seq = kinds if first else kinds[::-1]
    block = []
    for kind in seq:
        if kind is None:
            break
        block.append(kind)
    return bool(block) and all(block)
