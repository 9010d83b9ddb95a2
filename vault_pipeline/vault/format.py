"""The vault's text formats, written and read in one place.

Every writer and every reader of these shapes goes through this module, so a reader can never
drift from what was written (a reader that fails falls back to raw text and retrieval gets worse
without an error):

* **The atomic note body**: the sentence, an optional ``Context:`` line, the ``Source:`` line of
  links, each a paragraph of its own. ``render_atomic`` writes it; ``parse_atomic_body`` reads it
  back, and keeps what a user added to the note (``AtomicBody.extra``)::

      The shipment leaves on Friday.

      Context: Caroline, 8 May 2023; “yesterday” is 7 May 2023.

      Source: [[session-stem#^m-42]]

* **The Context line's grammar**: ``<own qualifier>. <who>, <day>; “<words>” is <when>; ...``
  (each part optional): ``context_line`` and ``merge_context`` write it, ``context_parts`` reads it.
* **Block ids**: ``^m-<id>`` closing a transcript message (``block_id``, ``MESSAGE_ID``).
* **Transcript turns**: ``**Speaker:** text ^m-id`` under the ``## Transcript`` heading, with an
  optional ``Notes:`` line of links back; ``transcript_turns`` reads them (``ingest/notes.py``
  renders a message's Markdown safely and then writes the turn with ``turn_label``).
* **The text a row is embedded as**: ``embedding_text`` (a row's text without the machine ids the
  grammar above writes: ``Source:`` lines of links, ``Notes:`` lines, block ids), versioned by
  ``EMBEDDING_TEXT_VERSION``.
* **Days**: ``long_date`` ("16 August 2023", in notes) and ``short_day`` ("16 Aug 2023", in
  package headers).

Nothing here touches the file system or imports another stage.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date

# --------------------------------------------------------------------------- days

MONTHS = "January February March April May June July August September October November December".split()


def long_date(day: date) -> str:
    """'8 May 2023' in any locale: the day as a note's Context line writes it."""
    return f"{day.day} {MONTHS[day.month - 1]} {day.year}"


def short_day(created: str) -> str:
    """'16 Aug 2023' (the month's three-letter abbreviation) from an ISO stamp; "" when unreadable."""
    try:
        day = date.fromisoformat(str(created or "")[:10])
    except ValueError:
        return ""
    return f"{day.day} {MONTHS[day.month - 1][:3]} {day.year}"


# --------------------------------------------------------------------------- block ids

BLOCK_PREFIX = "m-"
_BLOCK = r"m-[A-Za-z0-9-]+"  # what ``block_id`` yields
# A message's block id where a transcript writes it: closing its paragraph (" ^m-id") or on a
# line of its own. Text that would pose as one is escaped ("\^m-x"), so it never matches.
MESSAGE_ID = re.compile(rf"(?:^|[ \t])\^({_BLOCK})[ \t]*$", re.M)
# A block id ending a line, with the space before it: what a package block strips.
BLOCK_ID_AT_END = re.compile(rf"\s*\^({_BLOCK})\s*$", re.M)
# Any Obsidian block id ending a line (not only ours): the renderer escapes one in a message's own
# text; ``vault check`` resolves links to them.
_ANY_BLOCK = r"[A-Za-z0-9-]+"
TRAILING_ID = re.compile(rf"(^|\s)\^({_ANY_BLOCK})([ \t]*)$")
ANY_BLOCK_ID = re.compile(rf"\s\^({_ANY_BLOCK})\s*$", re.M)


def block_id(message_id: str) -> str:
    """Obsidian block id for a message: ``m-`` + id reduced to [A-Za-z0-9-] (+ hash if reduced)."""
    raw = str(message_id)
    reduced = re.sub(r"[^A-Za-z0-9-]+", "-", raw)
    if reduced == raw and raw:
        return f"{BLOCK_PREFIX}{raw}"
    tag = hashlib.sha256(raw.encode("utf-8")).hexdigest()[:4]
    reduced = reduced.strip("-")
    return f"{BLOCK_PREFIX}{reduced}-{tag}" if reduced else f"{BLOCK_PREFIX}{tag}"


def escape_block_ids(line: str) -> str:
    """``line`` with a trailing ``^id`` escaped (``\\^id``), so a message's text never poses as a block id."""
    return TRAILING_ID.sub(r"\1\\^\2\3", line)


# --------------------------------------------------------------------------- transcript turns

TRANSCRIPT_HEADING = "Transcript"  # a session note's messages sit under this H2 (the index chunks it per message)
NOTES_PREFIX = "Notes: "  # the line after a message linking the atomic notes drawn from it
NOTES_LINE = re.compile(r"^Notes: \[\[.*$", re.M)  # links back to atomic notes: not the message
SPEAKER_LABEL = re.compile(r"^\s*\*\*([^*\n]+):\*\*[ \t]*\n?")  # "**Assistant:** ": the transcript's, not the message's
# A speaker label opening a line (a turn's first paragraph), and a whole one-paragraph turn.
BOLD_SPEAKER = re.compile(r"^\*\*([^*\n]{1,80}):\*\*", re.M)
TURN = re.compile(rf"^\*\*(?P<speaker>[^*\n]{{1,80}}):\*\*\s*(?P<text>.*?)\s*\^(?P<block>{_BLOCK})\s*$", re.DOTALL)


def turn_label(speaker: str) -> str:
    """The bold label opening a transcript turn: ``**Caroline:**``."""
    return f"**{speaker}:**"


def transcript_turns(body: str) -> dict[str, tuple[str, str]]:
    """Block id -> (speaker label, message text) of a session note's transcript: the label and the
    links back to atomic notes are the transcript's, not the message's."""
    text = body.split(f"\n## {TRANSCRIPT_HEADING}\n", 1)[-1]
    turns, start = {}, 0
    for match in MESSAGE_ID.finditer(text):
        raw = NOTES_LINE.sub("", text[start : match.start()]).lstrip("\n")
        label = SPEAKER_LABEL.match(raw)
        turns[match[1]] = (label[1].strip() if label else "", raw[label.end() :] if label else raw)
        start = match.end()
    return turns


# --------------------------------------------------------------------------- the atomic note body

CONTEXT_LABEL = "Context:"
SOURCE_LABEL = "Source:"
LINK = re.compile(r"\[\[([^\]|]+)(?:\|[^\]]*)?\]\]")  # a wikilink's target (an alias dropped)
# A heading, or a line of tags only: neither is the note's sentence.
_NOT_TEXT = re.compile(r"^(?:#{1,6}(?:\s|$)|#[^\s#]+(?:\s+#[^\s#]+)*$)")


@dataclass(frozen=True)
class AtomicBody:
    """An atomic note's body: its sentence, Context text, link targets (``stem#^m-id``) and the
    paragraphs a user added (in their order; each with its lines joined by a space)."""

    sentence: str
    context: str = ""
    links: tuple[str, ...] = ()
    extra: tuple[str, ...] = ()


def render_atomic(body: AtomicBody) -> str:
    """The body as the vault holds it (no final line break): sentence, Context line, Source line,
    then any added paragraphs, a blank line between each."""
    lines = [body.sentence, ""]
    if body.context:
        lines += [f"{CONTEXT_LABEL} {body.context}", ""]
    lines.append(f"{SOURCE_LABEL} " + ", ".join(f"[[{target}]]" for target in body.links))
    for paragraph in body.extra:
        lines += ["", paragraph]
    return "\n".join(lines)


def _label(line: str) -> str | None:
    low = line.lower()
    return "context" if low.startswith("context:") else "source" if low.startswith("source:") else None


def context_text(line: str) -> str | None:
    """The text of one Context line (its label read in any case, as ``parse_atomic_body`` reads it);
    None for any other line."""
    return line[len(CONTEXT_LABEL) :].strip() if _label(line) == "context" else None


def _groups(text: str) -> list[tuple[str, list[str]]]:
    """The body's lines in groups (kind, lines): a blank line or a label line ends a group; a
    Source group goes on over lines holding links only (a line without one is text a user added)."""
    groups: list[tuple[str, list[str]]] = []
    current: tuple[str, list[str]] | None = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line or _NOT_TEXT.match(line):
            current = None
            continue
        kind = _label(line)
        if kind is None and current is not None and (current[0] != "source" or LINK.search(line)):
            current[1].append(line)
            continue
        current = (kind or "text", [line])
        groups.append(current)
    return groups


def parse_atomic_body(text: str) -> AtomicBody:
    """An atomic note's body (or its indexed text) taken apart; labels are read in any case.

    The sentence is the first text paragraph; the first Context line is the context; every Source
    line's links are the links; any other text paragraph is a user's addition (``extra``)."""
    sentence, context, links, extra = "", "", [], []
    for kind, lines in _groups(text):
        joined = " ".join(" ".join(lines).split())
        if kind == "context":
            context = context or " ".join(joined[len(CONTEXT_LABEL) :].split())
        elif kind == "source":
            links += LINK.findall(" ".join(lines))
        elif not sentence:
            sentence = joined
        else:
            extra.append(joined)
    return AtomicBody(sentence, context, tuple(links), tuple(extra))


# --------------------------------------------------------------------------- the Context line

# The who/when lead: "Caroline, 8 May 2023" or just "8 May 2023".
_LEAD = re.compile(r"^(?:(?P<who>[^;]+?), )?(?P<date>\d{1,2} [A-Z][a-z]+ \d{4})$")
# "“yesterday” is 7 May 2023".
_TIME = re.compile(r"^\u201c(?P<text>[^\u201d]+)\u201d is (?P<value>.+)$")


def context_line(who: str, day: date | None, times: Sequence[tuple[str, str]]) -> str | None:
    """The who/when Context text: who said it and on which day, then what each relative time means
    (``times``: (words as written, what they mean)); None when there is nothing to say."""
    lead = ", ".join(filter(None, [who, long_date(day) if day and (who or times) else ""]))
    parts = [lead] if lead else []
    parts += [f"\u201c{words}\u201d is {value}" for words, value in times]
    return ("; ".join(parts) + ".") if parts else None


def merge_context(existing: str | None, extra: str | None) -> str | None:
    """The unit's own context and the who/when context in one line."""
    own = " ".join(str(existing or "").split()).rstrip(". ")
    if not extra:
        return own or None
    return f"{own}. {extra}" if own else extra


def context_parts(context: str) -> tuple[str, str, tuple[tuple[str, str], ...]]:
    """(who, own qualifier, ((time words, absolute), ...)) of a Context line: ``context_line``
    and ``merge_context`` read back."""
    parts = [p.strip() for p in context.rstrip(".").split("; ") if p.strip()]
    who, own, times = "", [], []
    for position, part in enumerate(parts):
        if m := _TIME.match(part):
            times.append((m["text"], m["value"].rstrip(".")))
            continue
        head, _, last = part.rpartition(". ")
        lead = _LEAD.match(last) if position == 0 else None
        if lead:
            who = (lead["who"] or "").strip()
            if head:
                own.append(head)
        else:
            own.append(part)
    return who, "; ".join(own), tuple(times)


# --------------------------------------------------------------------------- the text a row is embedded as

# Bumped when ``embedding_text`` changes what it yields: an index embedded by another version holds
# vectors of other texts, so the next sync embeds every row again (``index.table.outdated_embedding``).
# 1 (never written): a row's whole text; 2: without its machine ids.
EMBEDDING_TEXT_VERSION = 2
# A line of links written by the grammar (a Source line, its continuation lines, a Notes line);
# any case, as ``parse_atomic_body`` reads the labels.
_LINKS = r"\[\[[^\]\n]*\]\](?:[ \t]*,?[ \t]*\[\[[^\]\n]*\]\])*[ \t]*,?"
_LINK_LINES = re.compile(
    rf"^[ \t]*(?:(?i:{SOURCE_LABEL}|{NOTES_PREFIX.strip()})[ \t]*{_LINKS}[ \t]*(?:\n[ \t]*{_LINKS}[ \t]*)*)$", re.M
)
# Any block id closing a line (ours, ``^m-<id>``, or a user's ``^abc``), or on a line of its own;
# an escaped one (``\\^x``, a message's own text) is text and stays.
_BLOCK_IDS = re.compile(rf"(?:^|[ \t]+)\^{_ANY_BLOCK}[ \t]*$", re.M)
_BLANK_LINES = re.compile(r"\n(?:[ \t]*\n)+")
# A link's block reference ("[[stem#^m-<id>]]" in a hub's or a people page's list): the stem stays.
_LINKED_BLOCK = re.compile(rf"#\^{_ANY_BLOCK}(?=\]\]|\|)")


def embedding_text(text: str) -> str:
    """What the index embeds for a row's ``text``: the text without the machine ids the note grammar
    writes (``Source:`` and ``Notes:`` lines of links, block ids, a link's ``#^block``), so the
    vector is the sentence's, not its provenance's; ``text`` itself when it holds none, or when
    nothing but ids is left. The row keeps ``text`` (what a package prints); every side that
    compares a row's vector with its own calls this."""
    if "[[" not in text and "^" not in text:
        return text  # the common long-note chunk: nothing to take out
    cut = _LINKED_BLOCK.sub("", _BLOCK_IDS.sub("", _LINK_LINES.sub("", text)))
    if cut == text:
        return text
    cut = _BLANK_LINES.sub("\n\n", cut).strip()
    return cut or text
