"""The note builders: atomic notes, session notes with their transcript, thread maps and topic hubs.

Nothing here touches the file system; ``vault.files`` is the only module that writes.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from functools import lru_cache
from typing import Any

from vault_pipeline.ingest.context import unit_context
from vault_pipeline.ingest.extract import AtomicUnit, ThreadMap
from vault_pipeline.ingest.parse import Conversation
from vault_pipeline.text import normalise_text

# The formats live in vault/format.py; these names stay importable from here for older callers.
from vault_pipeline.vault.format import MESSAGE_ID as MESSAGE_ID
from vault_pipeline.vault.format import (
    NOTES_PREFIX,
    TRANSCRIPT_HEADING,
    AtomicBody,
    block_id,
    escape_block_ids,
    merge_context,
    render_atomic,
    turn_label,
)
from vault_pipeline.vault.format import transcript_turns as transcript_turns
from vault_pipeline.vault.note import Note, note_id, safe_stem, wikilink


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


# --------------------------------------------------------------------------- builders


# Obsidian's properties view shows flat scalars and lists of scalars, not nested mappings:
# the source is four flat keys (older notes had one nested ``source`` mapping; readers take both).
def _source(conv: Conversation, message_ids: Iterable[str]) -> dict:
    return {
        "source_kind": conv.kind,
        "source_conversation": conv.id,
        "source_title": _one_line(conv.title),
        "source_messages": [str(m) for m in message_ids],
    }


def created_stamp(value: Any) -> str:
    """``created`` as Obsidian's date & time: ISO 8601 with offset, to the second; "" when unknown.

    Dates become midnight UTC and naive times are taken as UTC, so every note has one type."""
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value.strip().replace("Z", "+00:00")) if value.strip() else None
        except ValueError:
            return ""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            value = datetime.fromtimestamp(value, tz=UTC)
        except (OverflowError, OSError, ValueError):
            return ""
    if isinstance(value, date) and not isinstance(value, datetime):
        value = datetime(value.year, value.month, value.day, tzinfo=UTC)
    if not isinstance(value, datetime):
        return ""
    return (value if value.tzinfo else value.replace(tzinfo=UTC)).isoformat(timespec="seconds")


def conversation_created(conv: Conversation) -> str:
    """A conversation's ``created``: its own time, else its first message's."""
    return created_stamp(conv.created or next((m.created for m in conv.messages if m.created), None))


# Letters, combining marks and decimal digits: what an Obsidian tag may hold besides "_", "-", "/".
_TAG_CATEGORIES = {"Lu", "Ll", "Lt", "Lm", "Lo", "Mn", "Mc", "Me", "Nd"}


def obsidian_tag(text: str, prefix: str = "") -> str:
    """A valid Obsidian tag: lowercase words joined by "-" (no spaces or punctuation); "" when none is left."""
    lowered = re.sub(r"['’‘`]", "", unicodedata.normalize("NFC", str(text or "")).lower())
    kept = "".join(ch if ch == "_" or unicodedata.category(ch) in _TAG_CATEGORIES else "-" for ch in lowered)
    slug = re.sub(r"-{2,}", "-", kept).strip("-_")
    if len(slug) > 60:
        cut = slug[:60]
        slug = (cut[: cut.rfind("-")] if cut.rfind("-") > 30 else cut).strip("-_")
    if not slug or (not prefix and slug.isdigit()):  # a tag needs one non-digit
        return ""
    return f"{prefix}/{slug}" if prefix else slug


def topic_tag(topic: str) -> str:
    """The tag of a topic hub and of the notes it links: ``topic/<slug>``."""
    return obsidian_tag(topic, "topic")


def _tags(*tags: str) -> list[str]:
    return list(dict.fromkeys(t for t in tags if t))


def _one_line(text: str | None) -> str:
    return " ".join(str(text or "").split())


_MARKUP = re.compile(r"([\\\[\]])")


def heading_text(title: str) -> str:
    """A title as literal Markdown text: backslash and brackets escaped, so ``[[../x]]`` in a
    conversation's title is shown as written and never becomes a link (Obsidian reads the escapes)."""
    return _MARKUP.sub(r"\\\1", title)


def atomic_note(
    unit: AtomicUnit,
    conv: Conversation,
    session_stem: str,
    created_iso: str,
    topics: Iterable[str] = (),
    position: int = 0,
    score: float | None = None,
) -> Note:
    """A provisional atomic note in inbox/, linked to its source messages in the session note.

    Tagged with its category and a ``topic/<slug>`` per topic hub that links it. ``position`` is the
    unit's place among the units drawn from its first source message (1 = first; 0 = not known):
    ``source_position``, so a package can give a procedure's steps in their source's order.
    ``score`` is the selector's probability that a reader finds the note good (``quality_score``)."""
    nid = atomic_id(conv.kind, conv.id, unit.category, unit.text)
    sentence = _one_line(unit.text)
    who_when, context = unit_context(unit, conv)  # speaker_name, when: the note answers who and when on its own
    frontmatter = {
        "id": nid,
        "type": "atomic",
        "category": unit.category,
        "status": "provisional",
        "tier": "chat",
        **({"quality_score": score} if score is not None else {}),
        "speaker": unit.speaker,
        **who_when,
        **_source(conv, unit.source_ids),
        **({"source_position": position} if position > 0 else {}),
        "session": wikilink(session_stem),
        "created": created_stamp(created_iso),
        "tags": _tags(obsidian_tag(unit.category), *(topic_tag(t) for t in topics)),
    }
    body = AtomicBody(
        sentence,
        _one_line(merge_context(unit.context, context)),
        tuple(f"{session_stem}#^{block_id(m)}" for m in unit.source_ids),
    )
    return Note(nid, "atomic", "inbox", safe_stem(sentence, nid), frontmatter, render_atomic(body) + "\n")


def positions(units: Sequence[AtomicUnit]) -> list[int]:
    """Each unit's place among the units drawn from its first source message, in the order the
    extractor gave them (1 = first): the offline extractor reads a message sentence by sentence."""
    seen: Counter[str] = Counter()
    out = []
    for unit in units:
        seen[unit.source_ids[0]] += 1
        out.append(seen[unit.source_ids[0]])
    return out


def session_note(conv: Conversation, summary: str, units_by_message: Mapping[str, Sequence[Any]] | None = None) -> Note:
    """One note per conversation: title, summary, and the transcript with a block id per message."""
    nid = session_id(conv.kind, conv.id)
    title = _one_line(conv.title) or "Untitled conversation"
    frontmatter = {
        "id": nid,
        "type": "session",
        "tier": "chat",
        **_source(conv, (m.id for m in conv.messages)),
        "created": conversation_created(conv),
        "tags": _tags("session", obsidian_tag(conv.kind)),
    }
    links = {mid: [_stem_of(u) for u in units] for mid, units in (units_by_message or {}).items()}
    # The offline summary quotes the title: escaped there too, as in the heading.
    said = (
        str(summary or "").strip().replace(title, heading_text(title))
        if _MARKUP.search(title)
        else str(summary or "").strip()
    )
    body = f"# {heading_text(title)}\n\n## Summary\n\n{said}\n\n## {TRANSCRIPT_HEADING}\n\n" + render_transcript(
        conv.messages, links
    )
    return Note(nid, "session", "sessions", safe_stem(title, nid), frontmatter, body)


def _stem_of(unit: Any) -> str:
    return unit if isinstance(unit, str) else unit.stem


def thread_note(key: str, thread_map: ThreadMap, session_stems: Mapping[str, str]) -> Note:
    """A thread map across the sessions of one line of work, each step linking its session."""
    nid = thread_id(key)
    title = _one_line(thread_map.title) or _one_line(key) or "Thread"
    lines = [f"# {heading_text(title)}", "", "## Steps", ""]
    for number, step in enumerate(thread_map.steps, 1):
        stem = session_stems.get(step.session_id)
        where = wikilink(stem) if stem else f"session {step.session_id}"
        lines.append(f"{number}. {where}: {_one_line(step.step)}")
    if thread_map.open_questions:
        lines += ["", "## Open questions", ""]
        lines += [f"- {_one_line(q)}" for q in thread_map.open_questions]
    frontmatter = {"id": nid, "type": "thread", "tier": "chat", "thread": key, "tags": ["thread"]}
    return Note(nid, "thread", "threads", safe_stem(title, nid), frontmatter, "\n".join(lines) + "\n")


def topic_hub(topic: str, atomic_stems: Iterable[str]) -> Note:
    """A topic hub linking its atomic notes (sorted, deduplicated; pass old links to keep them)."""
    nid = topic_id(topic)
    title = _one_line(topic) or "Topic"
    links = [f"- {wikilink(stem)}" for stem in sorted(set(atomic_stems))]
    body = "\n".join([f"# {heading_text(title)}", "", *links]) + "\n"
    frontmatter = {"id": nid, "type": "topic", "tier": "chat", "tags": _tags("hub", topic_tag(topic))}
    return Note(nid, "topic", "topics", safe_stem(title, nid), frontmatter, body)


# --------------------------------------------------------------------------- transcript

# Lines that start something other than a plain paragraph: indented code, quote, heading,
# table, HTML, list item, thematic break or setext underline, math block.
_STRUCTURAL = re.compile(
    r"^(?: {4}|\t| {0,3}(?:[>#|<]|[-+*](?:\s|$)|\d{1,9}[.)](?:\s|$)"
    r"|(?:[-*_][ \t]*){3,}$|=+[ \t]*$|\$\$))"
)
# What can open a block that outlives a blank line (a fence, raw HTML) or make a line other than
# it looks (a table's delimiter row). A message without any of these needs no Markdown parser.
# No two adjacent runs that can both take the same spaces (``[ \t]*\|?[ \t]*`` backtracks quadratically
# on a line of spaces or a deeply indented list); each run here is followed by a character it cannot take.
_RISKY = re.compile(r"```|~~~|^[ \t>*+\-\d.)]*<|^[ \t]*(?:\|[ \t]*)?:?-+:?[ \t]*\|", re.M)
_LITERAL = frozenset({"fence", "code_block", "html_block"})  # tokens whose lines are shown as written
_BACKTICKS = re.compile(r"`+")


def render_transcript(messages: Sequence[Any], links: Mapping[str, Sequence[str]] | None = None) -> str:
    """Messages as paragraphs ``**Speaker:** text ^m-id``: every message id becomes a block id.

    Each message is closed off, so its Markdown cannot leak into the next: a fence it leaves open
    is closed and raw HTML is shown as code. Where a message does not end in a plain paragraph
    its block id stands on its own line after a blank line."""
    parts = []
    for message in messages:
        parts.append(_render_message(message))
        stems = list(dict.fromkeys((links or {}).get(message.id, ())))
        if stems:
            parts.append(NOTES_PREFIX + ", ".join(wikilink(s) for s in stems))
    return "\n\n".join(parts) + "\n"


def _render_message(message: Any) -> str:
    lines, plain = _message_lines(str(message.text or ""))
    label = turn_label(_speaker(message))
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
    """Lines with stray block ids escaped and open blocks closed; per line: plain, structural or blank.

    A message with a fence, raw HTML or a table is parsed as CommonMark: raw HTML at its top level
    is fenced as code, a fence it leaves open is closed, and the first and last blocks count as
    plain only when they are paragraphs. Any other message renders line by line as it always did.
    """
    raw = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    while raw and not raw[-1].strip():
        raw.pop()
    while raw and not raw[0].strip():
        raw.pop(0)
    if not _RISKY.search("\n".join(raw)):
        lines = [escape_block_ids(line) for line in raw]  # text that would pose as a block id
        return lines, [None if not line.strip() else not _STRUCTURAL.match(line) for line in lines]
    return _parsed_message_lines(raw)


def _parsed_message_lines(raw: list[str]) -> tuple[list[str], list[bool | None]]:
    """``_message_lines`` for a message CommonMark must read: the top-level blocks copied in order,
    raw HTML fenced as code, a fence left open closed."""
    tokens = markdown_blocks("\n".join(raw))
    out = _Rendered(raw, literal_lines(tokens, len(raw)))
    top = [t for t in tokens if t.level == 0 and t.nesting >= 0 and t.map]
    for index, token in enumerate(top):
        start = token.map[0]
        if start < out.done:
            continue  # raw HTML joined to the block before it
        out.copy(start)
        if token.type == "html_block":
            out.html(top, index)
        else:
            out.block(token)
    out.copy(len(raw))
    # Plain only where CommonMark agrees: the label and the " ^id" go on paragraphs alone.
    if top and top[0].type != "paragraph_open":
        out.kinds[0] = False
    if top and top[-1].type != "paragraph_open":
        out.kinds[-1] = False
    return out.lines, out.kinds


@dataclass
class _Rendered:
    """A message's lines as rendered so far, and per line plain, structural or blank."""

    raw: list[str]
    literal: list[bool]  # per raw line: inside a code block, a fence or raw HTML
    lines: list[str] = field(default_factory=list)
    kinds: list[bool | None] = field(default_factory=list)
    done: int = 0  # raw lines copied so far

    def copy(self, end: int) -> None:
        """Copy the raw lines up to ``end``, a stray block id escaped where it is not literal text."""
        for number in range(self.done, end):
            line = self.raw[number]
            if not self.literal[number]:
                line = escape_block_ids(line)
            self.lines.append(line)
            self.kinds.append(None if not line.strip() else not (self.literal[number] or _STRUCTURAL.match(line)))
        self.done = max(self.done, end)

    def html(self, top: Sequence[Any], index: int) -> None:
        """The raw HTML block ``top[index]``, with the HTML blocks right after it, as one fenced code
        block: raw HTML would run on over the next messages."""
        start, end = top[index].map
        for after in top[index + 1 :]:
            if after.type != "html_block" or after.map[0] != end:
                break
            end = after.map[1]
        block = self.raw[start:end]
        fence = _long_fence(block)
        self.lines.extend([fence + _html_info(block[0]), *block, fence])
        self.kinds.extend([False] * (len(block) + 2))
        self.done = end

    def block(self, token: Any) -> None:
        """Any other block as it is; a fence it leaves open closed, or it would swallow every later message."""
        start, end = token.map
        self.copy(end)
        if token.type == "fence" and not _closes(token, self.raw[end - 1], end - start):
            self.lines.append(token.markup)
            self.kinds.append(False)


def _long_fence(block: list[str]) -> str:
    """A backtick fence longer than any backtick run inside ``block``, so nothing in it closes it."""
    longest = max((len(run) for line in block for run in _BACKTICKS.findall(line)), default=0)
    return "`" * max(3, longest + 1)


def _html_info(first_line: str) -> str:
    start = first_line.lstrip().lower()
    return "php" if start.startswith("<?php") else "xml" if start.startswith("<?xml") else "html"


def _closes(fence: Any, last_line: str, size: int) -> bool:
    """Whether a fence token ends on its closing line (not at the end of the text)."""
    mark = fence.markup
    return size > 1 and re.fullmatch(rf" {{0,3}}{re.escape(mark[0])}{{{len(mark)},}}[ \t]*", last_line) is not None


def _paragraph_is_plain(kinds: list[bool | None], *, first: bool) -> bool:
    """Whether the first (or last) paragraph consists of plain lines only."""
    seq = kinds if first else kinds[::-1]
    block = []
    for kind in seq:
        if kind is None:
            break
        block.append(kind)
    return bool(block) and all(block)


@lru_cache(maxsize=1)
def _markdown() -> Any:
    from markdown_it import MarkdownIt  # imported on first use: most messages never need it

    return MarkdownIt("commonmark").enable("table")


def markdown_blocks(text: str) -> list[Any]:
    """The block tokens of ``text`` as CommonMark with GFM tables (Obsidian's flavour) reads it.

    Inline content is left unparsed; each token's ``map`` is its [first, end) line range."""
    md = _markdown()
    tokens: list[Any] = []
    md.block.parse(text, md, {}, tokens)
    return tokens


def literal_lines(tokens: Sequence[Any], count: int) -> list[bool]:
    """Per line: whether it lies in a code block, a fence or raw HTML, where Obsidian finds no block id."""
    literal = [False] * count
    for token in tokens:
        if token.type in _LITERAL and token.map:
            start, end = token.map
            literal[start : min(end, count)] = [True] * (min(end, count) - start)
    return literal
