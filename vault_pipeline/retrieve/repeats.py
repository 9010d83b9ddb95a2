"""What a package would say twice, left out: turns of transcript chunks and summaries that another
block shows, and a session's statements another block holds.

Each function reads the blocks of an assembly (``Kept``: its item, its text now, whether it was cut
or left out) and returns the chunk ids it left out, each with the block it repeats.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Protocol

from vault_pipeline.retrieve.items import Part, Selected, is_statement


class Kept(Protocol):
    """A block on its way through the assembly (``package._Work``), as these functions read it."""

    item: Selected
    text: str
    truncated: bool
    dropped: bool
    messages: tuple[str, ...] | None

    def drop(self) -> None: ...

    def set_text(self, text: str) -> None: ...


PARAGRAPH_BREAK = re.compile(r"\n[ \t]*\n")

SPEAKER = re.compile(r"^[^\W\d][\w .'-]{0,39}: ")  # "Caroline: ...", "User: ...": a turn's label
_WORDS = re.compile(r"\w+")


def words(text: str) -> str:
    return " ".join(_WORDS.findall(text.lower()))


def summary_repeats(work: Sequence[Kept]) -> dict[str, str]:
    """Take out of the kept summaries the turns another kept block holds word for word.

    A session's summary repeats the first sentences of its turns; when a transcript chunk or a
    verbatim turn of the same conversation is in the package too, the summary's copy only costs
    tokens. A summary left with nothing but its opening line is left out (listed, with
    ``repeats``: the block that holds its turns). Returns summary chunk id -> that block's chunk id.
    """
    kept = [w for w in work if not w.dropped]
    # The blocks that may hold a summary's turn: those citing turns (a note, a verbatim turn, a
    # transcript chunk), never another summary; their words are read once.
    holders = [(o, f" {words(o.text)} ") for o in kept if o.messages or o.item.messages]
    repeats: dict[str, str] = {}
    for w in kept:
        if w.item.parts and not w.item.messages:  # a summary cites no turn; a transcript chunk does
            others = [(o.item.chunk_id, text) for o, text in holders if o.item.conversation == w.item.conversation]
            holder = _repeat_in_summary(w, others)
            if holder:
                repeats[w.item.chunk_id] = holder
    return repeats


def _repeat_in_summary(w: Kept, others: list[tuple[str, str]]) -> str | None:
    """Cut from summary ``w`` the turns that ``others`` ((chunk id, words)) hold; when nothing but
    its framing is left, drop it and return the chunk id of a block that holds its turns."""
    lead = w.item.lead
    body = w.text[len(lead) :].lstrip() if lead and w.text.startswith(lead) else w.text
    paragraphs = [p for p in PARAGRAPH_BREAK.split(body) if p.strip()]  # a summary's parts are paragraphs
    holder = _held_turns(paragraphs, {p.text for p in w.item.parts if p.turn}, others)
    if not holder:
        return None
    framing = {p.text for p in w.item.parts if not p.turn}
    rest = [p for i, p in enumerate(paragraphs) if i not in holder]
    if all(p in framing for p in rest):
        w.drop()  # nothing left but the opening line
        return next(iter(holder.values()))
    w.set_text(f"{lead} " + "\n\n".join(rest) if lead else "\n\n".join(rest))
    return None


def _held_turns(paragraphs: list[str], turns: set[str], others: list[tuple[str, str]]) -> dict[int, str]:
    """Paragraph number -> the chunk id of another block holding that turn's words (turns only)."""
    holder: dict[int, str] = {}
    for i, paragraph in enumerate(paragraphs):
        said = words(SPEAKER.sub("", paragraph, count=1)) if paragraph in turns else ""
        found = next((chunk_id for chunk_id, text in others if said and f" {said} " in text), None)
        if found:
            holder[i] = found
    return holder


def statement_repeats(work: Sequence[Kept]) -> dict[str, str]:
    """Leave out each statement of a session (an index row: one sentence of one turn) whose words
    another kept block of its conversation holds: the turn shown whole, a summary or transcript
    chunk showing it, a note written from it or carrying it as context. Returns its chunk id -> the
    chunk id of that block."""
    kept = [w for w in work if not w.dropped]
    said_by = {o.item.chunk_id: f" {words(o.text)} " for o in kept}  # texts do not change here, only drops
    repeats: dict[str, str] = {}
    for w in kept:
        said = _statement_words(w) if is_statement(w.item) else ""
        if len(said.split()) < 3:
            continue
        holder = next(
            (
                o
                for o in kept
                if o is not w
                and not o.dropped
                and o.item.conversation == w.item.conversation
                and f" {said} " in said_by[o.item.chunk_id]
            ),
            None,
        )
        if holder is not None:
            w.drop()
            repeats[w.item.chunk_id] = holder.item.chunk_id
    return repeats


_LEAD = re.compile(r"^\[[^\]]*\]\s*")  # a block's "[speaker, day]" header


def _statement_words(w: Kept) -> str:
    """The words of a statement block's sentence: its header left out, and the added context in
    brackets at its end (``atomic_text``) too."""
    sentence = _LEAD.sub("", w.text.strip(), count=1)
    if sentence.endswith(").") and " (" in sentence:
        sentence = sentence[: sentence.rindex(" (")]
    return words(sentence)


def transcript_repeats(work: Sequence[Kept]) -> dict[str, str]:
    """Take out of the kept transcript chunks the turns another kept block already carries: a
    verbatim turn block that shows it whole, or an atomic note drawn from it (nothing is said twice).

    Only whole turns go (a chunk cut inside a turn is left as it is), the chunk then cites only
    the turns it still shows, and a chunk left with none is left out (listed, with ``repeats``).
    """
    kept = [w for w in work if not w.dropped]
    whole = {  # (conversation, message) -> the uncut verbatim turn block, or the note, that carries it
        (o.item.conversation, m): o.item.chunk_id
        for o in kept
        if (o.item.type == "turn" and not o.truncated) or (o.item.type == "atomic" and not is_statement(o.item))
        for m in o.item.messages
    }
    repeats: dict[str, str] = {}
    for w in kept:
        if w.item.parts and w.item.messages and w.item.type != "turn":
            holder = _repeat_in_transcript(w, whole)
            if holder:
                repeats[w.item.chunk_id] = holder
    return repeats


def _repeat_in_transcript(w: Kept, whole: dict[tuple[str, str], str]) -> str | None:
    """Cut from transcript chunk ``w`` the whole turns a verbatim turn block shows; when none is
    left, drop it and return that block's chunk id."""
    item = w.item
    shown = [p for p in item.parts if p.text in w.text]
    body = "\n\n".join(p.text for p in shown)
    if w.text != (f"{item.lead} {body}" if item.lead else body):
        return None  # cut inside a turn: not a run of whole turns
    held = _shown_whole(item.conversation, shown, whole)
    if not held:
        return None
    rest = [p for i, p in enumerate(shown) if i not in held]
    if not rest:
        w.drop()
        return next(iter(held.values()))
    body = "\n\n".join(p.text for p in rest)
    w.set_text(f"{item.lead} {body}" if item.lead else body)
    w.messages = tuple(dict.fromkeys(m for p in rest for m in p.messages))
    return None


def _shown_whole(conversation: str, parts: list[Part], whole: dict[tuple[str, str], str]) -> dict[int, str]:
    """Part number -> the verbatim turn block showing all of that part's turns."""
    return {
        i: whole[(conversation, p.messages[0])]
        for i, p in enumerate(parts)
        if p.messages and all((conversation, m) in whole for m in p.messages)
    }
