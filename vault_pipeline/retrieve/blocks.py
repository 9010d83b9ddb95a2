"""Blocks that carry their own context, cheaply: what a package block reads like.

An atomic note's indexed text is its sentence, a ``Context:`` line (the unit's own qualifier,
then who said it and when, then relative times made absolute, as ``ingest/context.py`` writes
it) and a ``Source:`` link line. In the package it becomes one line::

    [Caroline, 8 May 2023] I went to an LGBTQ support group yesterday (7 May 2023).

The date is the note's ``created`` day (written as the Context line writes it), the name the speaker the Context line names (else the
speaker's role); a resolved relative time goes in brackets after its words; the unit's own
qualifier stays. The links move to the block's JSON ``source`` and the Markdown reference list.

A session or transcript chunk loses its heading lines and Obsidian block ids and keeps its
turns; it cites the turns it actually holds (found by their block ids), never the whole session.
When the budget binds it is cut by whole turns, those that carry most of the query first
(``transcript_parts``, ``pick_parts``), and cites only the turns it kept.

This is the one home of a block's text, for every stage that needs it: ``block_content`` (a row's
block), ``transcript_content`` (its turns as parts), ``duplicate_key`` (what makes two blocks one),
``first_level`` and ``pick_parts`` (a structural block at its first level, a transcript cut by
turns). The walk's ``Pool`` weighs the evidence with them, ``rank`` deduplicates and selects with
them, and ``package`` cuts with them; this module imports no stage.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import PurePosixPath
from typing import Any

from vault_pipeline.retrieve.items import Part
from vault_pipeline.retrieve.repeats import PARAGRAPH_BREAK, SPEAKER
from vault_pipeline.retrieve.types import Hit
from vault_pipeline.text import estimate_tokens, exact_key, idf_overlap, query_runs, split_sentences, stem_runs
from vault_pipeline.vault.format import BLOCK_ID_AT_END as _BLOCK_ID
from vault_pipeline.vault.format import BOLD_SPEAKER as _BOLD_SPEAKER
from vault_pipeline.vault.format import block_id, context_parts, parse_atomic_body, short_day

_HEADING_LINE = re.compile(r"^#{1,6} .*$\n?", re.MULTILINE)
_PARAGRAPHS = re.compile(r"\n[ \t]*\n\s*")


@dataclass(frozen=True)
class Parsed:
    """An atomic note's body, taken apart: sentence, who, qualifiers, relative times, links."""

    sentence: str
    who: str
    own: str
    times: tuple[tuple[str, str], ...]
    links: tuple[str, ...]
    extra: tuple[str, ...] = ()  # paragraphs a user added to the note


@lru_cache(maxsize=4096)  # immutable; the same note is parsed by several steps of one query
def parse_atomic(text: str) -> Parsed:
    """The parts of an atomic note's indexed text (sentence, Context line, Source line)."""
    body = parse_atomic_body(text)
    who, own, times = context_parts(body.context)
    return Parsed(body.sentence, who, own, times, body.links, body.extra)


def atomic_text(text: str, created: str, speaker: str, query: str = "") -> tuple[str, tuple[str, ...]]:
    """(one-line block text, source links) of an atomic note's indexed text; what a user added to
    the note follows its sentence (``added_text``)."""
    parsed = parse_atomic(text)
    if not parsed.sentence:
        return text.strip(), parsed.links
    sentence, unplaced = mark_times(parsed.sentence, parsed.times)
    extra = ([parsed.own] if parsed.own else []) + [f"{words}: {value}" for words, value in unplaced]
    if extra:
        sentence = f"{sentence.rstrip('.')} ({'; '.join(extra)})."
    if added := added_text(parsed.extra, query):
        sentence = f"{sentence} {added}"
    return f"{header(created, parsed.who or speaker)} {sentence}", parsed.links


# What a user added to a note (the paragraphs after its sentence) goes into its block whole when it
# is this short; a longer addition gives the block the sentences that carry a word of the query,
# in the note's order, to about this many tokens more (a note is one block: the budget cuts whole
# blocks, so an addition must not make the note too large to be shown).
ADDED_WHOLE_TOKENS = 80
ADDED_MAX_TOKENS = 240


def added_text(extra: Sequence[str], query: str) -> str:
    """The part of a user's additions to a note that its block shows (see ``ADDED_WHOLE_TOKENS``)."""
    whole = " ".join(extra)
    if not whole or estimate_tokens(whole) <= ADDED_WHOLE_TOKENS:
        return whole
    asked = {t for run in query_runs(query) for t in run}
    shown, used = [], 0
    for sentence in (s for paragraph in extra for s in split_sentences(paragraph)):
        cost = estimate_tokens(sentence)
        if asked & {t for run in stem_runs(sentence) for t in run} and used + cost <= ADDED_MAX_TOKENS:
            shown.append(sentence)
            used += cost
    return " ".join(shown)


def mark_times(text: str, times: Sequence[tuple[str, str]]) -> tuple[str, list[tuple[str, str]]]:
    """``text`` with each resolved relative time's absolute value in brackets after its words
    ("yesterday (7 May 2023)"), and the (words, value) pairs whose words it does not hold."""
    unplaced = []
    for words, value in times:
        at = text.lower().find(words.lower())
        if at >= 0 and value not in text:
            end = at + len(words)
            text = f"{text[:end]} ({value}){text[end:]}"
        elif at < 0:
            unplaced.append((words, value))
    return text, unplaced


def header(created: str, who: str) -> str:
    """``[Caroline, 8 May 2023]``, ``[Maria, 16 Aug 2023]``: who said it and the day said (either may
    be missing), in the order of the note's own ``Context:`` line. The month is its three-letter
    abbreviation, so the day costs about what ISO 8601 does while a reader still reads a date (the
    header is a large share of a short block). Dates inside the text (a resolved "yesterday (7 May
    2023)") keep the month's whole name: they are what was said.
    """
    parts = [p for p in (" ".join(str(who or "").split()), short_day(created)) if p]
    return f"[{', '.join(parts)}]" if parts else ""


def structural_text(text: str, heading: str, created: str, messages: Sequence[str]) -> tuple[str, tuple[str, ...]]:
    """(compact text, messages it holds) of a session/transcript chunk: no heading lines or block ids.

    The messages are those of ``messages`` (the session's) whose Obsidian block ids the chunk
    holds; a chunk with no block ids (a summary) cites none: it stands for no particular turn.
    Turns stay apart by a blank line, so a cut keeps whole turns (``transcript_parts``).
    """
    parts = transcript_parts(text, heading, messages)
    body = "\n\n".join(part.text for part in parts)
    held = {m for part in parts for m in part.messages}
    lead = structural_lead(heading, created)
    return (f"{lead} {body}" if lead else body), tuple(m for m in messages if m in held)


def structural_lead(heading: str, created: str) -> str:
    """``[Caroline and Melanie, session 7, 12 July 2023]``: a transcript chunk's conversation and day."""
    return header(created, heading.rsplit(" > ", 1)[0] if heading else "")


def transcript_parts(text: str, heading: str, messages: Sequence[str], query: str = "") -> tuple[Part, ...]:
    """A session/transcript chunk's turns as cuttable parts, each citing the turns it holds.

    A turn opens with its speaker label and ends at the paragraph carrying its block id (the
    paragraphs between belong to the same message); a chunk without block ids (a summary) is cut
    by paragraph. With ``query``, each part's ``share`` is the part of the query's IDF-weighted
    content stems it carries, IDF taken over the chunk's own parts, so a word every turn shares
    weighs little; the words of the chunk's title do not count, since the lead shows them anyway.
    """
    pieces = _pieces(text, heading, tuple(messages))
    shares: Sequence[float] = [0.0] * len(pieces)
    shown = {t for run in stem_runs(heading.rsplit(" > ", 1)[0]) for t in run}  # the lead's title: always kept
    terms = [t for run in query_runs(query) for t in run if t not in shown]
    if terms and pieces:
        shares = idf_overlap(terms, _piece_stems(text, heading, tuple(messages)))
    return tuple(Part(p, held, share, bool(held) or bool(SPEAKER.match(p))) for (p, held), share in zip(pieces, shares))


# A query's funnel meets the same transcript chunks in its walk and again in its package, and the
# next query meets many of them again: their turns and stems are parsed once (the query's share is
# all that changes).
@lru_cache(maxsize=4096)
def _pieces(text: str, heading: str, messages: tuple[str, ...]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    body = text.strip()
    if heading and body.startswith(heading):  # chunk.py's heading-path line
        body = body[len(heading) :]
    paragraphs = [p for p in _PARAGRAPHS.split(_HEADING_LINE.sub("", body)) if p.strip()]
    if not any(_BLOCK_ID.search(p) for p in paragraphs):  # a summary: each paragraph stands alone
        return tuple((_BOLD_SPEAKER.sub(r"\1:", p).strip(), ()) for p in paragraphs)
    return _turns(paragraphs, messages)


def _turns(paragraphs: list[str], messages: tuple[str, ...]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """A transcript's turns: a turn opens with its **Speaker:** label and ends at its block id; a
    turn the chunk cuts off (its id in the next chunk) is still one part."""
    pieces: list[tuple[str, tuple[str, ...]]] = []
    turn: list[str] = []
    for paragraph in paragraphs:
        if turn and _BOLD_SPEAKER.match(paragraph.lstrip()):
            pieces.append(("\n\n".join(turn), ()))
            turn = []
        ids = set(_BLOCK_ID.findall(paragraph))
        clean = _BOLD_SPEAKER.sub(r"\1:", _BLOCK_ID.sub("", paragraph)).strip()
        if clean:
            turn.append(clean)
        if ids and turn:
            pieces.append(("\n\n".join(turn), tuple(m for m in messages if anchor(m) in ids)))
            turn = []
    return tuple(pieces + ([("\n\n".join(turn), ())] if turn else []))


@lru_cache(maxsize=4096)
def _piece_stems(text: str, heading: str, messages: tuple[str, ...]) -> tuple[frozenset[str], ...]:
    return tuple(frozenset(t for run in stem_runs(p) for t in run) for p, _ in _pieces(text, heading, messages))


@lru_cache(maxsize=65536)
def anchor(message: str) -> str:
    """``format.block_id`` of a message, computed once: a session's every chunk cites its whole
    message list, and the walk, the hop and the blocks look its turns up by block id."""
    return block_id(message)


def cited_messages(raw: Any) -> list[str]:
    """The message ids a chunk cites: the index stores them as a JSON list string."""
    if isinstance(raw, (list, tuple)):
        return [str(m) for m in raw]
    return list(_cited(raw)) if isinstance(raw, str) else _parse_cited(raw)


@lru_cache(maxsize=8192)
def _cited(raw: str) -> tuple[str, ...]:
    """``cited_messages`` of a stored string, parsed once: a session's chunks all carry its whole
    message list, and the one hop reads it for every chunk."""
    return tuple(_parse_cited(raw))


def _parse_cited(raw: Any) -> list[str]:
    try:
        value = json.loads(raw) if raw else []
    except (TypeError, ValueError):
        return [str(raw)]
    return [str(m) for m in value] if isinstance(value, list) else [str(value)]


# --------------------------------------------------------------------------- a row's block

STRUCTURAL_TYPES = frozenset({"session", "thread", "resource", "topic"})  # cut to a first level before core text
TRANSCRIPT_TYPES = frozenset({"session", "thread"})  # chunks made of a conversation's turns


def block_content(row: Hit, query: str = "") -> tuple[str, tuple[str, ...], tuple[str, ...]]:
    """(block text, cited message ids, source links) of a row: atomic notes as one dated line (with
    what a user added that matches ``query``), session and thread chunks without their markup,
    citing the turns they hold; others as stored."""
    messages = tuple(cited_messages(row.source_messages))
    if row.type == "atomic":
        text, links = atomic_text(row.text, row.created, getattr(row, "speaker", ""), query)
        return text, messages, links
    if row.type == "turn":  # a verbatim turn: "Speaker: text"
        who, _, said = row.text.partition(": ")
        links = tuple(f"{PurePosixPath(row.path).stem}#^{block_id(m)}" for m in messages)
        return f"{header(row.created, who)} {said}", messages, links
    if row.type in TRANSCRIPT_TYPES and row.source_conversation:
        text, held = structural_text(row.text, row.heading or "", row.created, messages)
        return text, held, ()
    return row.text, messages, ()


def transcript_content(row: Hit, query: str = "") -> tuple[str, tuple[Part, ...]]:
    """(lead, turns as parts) of a session or thread chunk, as ``block_content`` renders it;
    ("", ()) for any other row."""
    if row.type not in TRANSCRIPT_TYPES or not row.source_conversation:
        return "", ()
    messages = cited_messages(row.source_messages)
    return structural_lead(row.heading or "", row.created), transcript_parts(
        row.text, row.heading or "", messages, query
    )


def duplicate_key(row: Hit) -> str:
    """What makes two chunks one for the package: their text, and for an atomic note its sentence
    (the same sentence in two conversations, or pasted twice, is one block) with the person its
    ``Context:`` line names (the same words from two named people are two facts)."""
    if row.type == "atomic":
        parsed = parse_atomic(row.text)
        if parsed.sentence:
            return (
                f"{exact_key(parsed.who)}\n{exact_key(parsed.sentence)}" if parsed.who else exact_key(parsed.sentence)
            )
    return exact_key(row.text)


# --------------------------------------------------------------------------- a block's first level and its parts

_SENTENCE_END = re.compile(r"(?:[.!?;:][\"'\u201d\u2019)\]]*(?=\s)|[\u3002\uff01\uff1f][\u300d\u300f\uff09]*|\n)")


def _is_heading_paragraph(paragraph: str) -> bool:
    """A heading line, or the "A > B" heading path chunk.py prepends."""
    line = paragraph.strip()
    return line.startswith("#") or ("\n" not in line and " > " in line and not _SENTENCE_END.search(line))


def first_level(text: str) -> str:
    """A structural chunk's first level: its leading heading lines plus its first body paragraph."""
    paragraphs = [p for p in PARAGRAPH_BREAK.split(text.strip()) if p.strip()]
    kept: list[str] = []
    for paragraph in paragraphs:
        kept.append(paragraph.strip())
        if not _is_heading_paragraph(paragraph):
            break
    return "\n\n".join(kept)


def pick_parts(
    lead: str, parts: Sequence[Part], room: int, count: Callable[[str], int] = estimate_tokens
) -> tuple[str, tuple[str, ...]]:
    """(text, cited messages) of the run of whole parts that fits ``room`` tokens around the part
    with the highest ``share`` (ties: a turn before framing, then the earlier), which is kept even
    alone over ``room``.

    The run grows one neighbour at a time, the one carrying more of the query first (ties: the
    following turn, where a reply stands), so a cut keeps the thread around what matched."""
    if not parts:
        return lead, ()
    best = min(range(len(parts)), key=lambda i: (-parts[i].share, not parts[i].turn, i))
    lo = hi = best
    while True:
        sides = [i for i in (hi + 1, lo - 1) if 0 <= i < len(parts)]
        sides.sort(key=lambda i: -parts[i].share)  # stable: the following turn first on a tie
        fits = [i for i in sides if count(_run(lead, parts, min(lo, i), max(hi, i))) <= room]
        if not fits:
            break
        lo, hi = min(lo, fits[0]), max(hi, fits[0])
    cited = tuple(dict.fromkeys(m for part in parts[lo : hi + 1] for m in part.messages))
    return _run(lead, parts, lo, hi), cited


def _run(lead: str, parts: Sequence[Part], lo: int, hi: int) -> str:
    body = "\n\n".join(part.text for part in parts[lo : hi + 1])
    return f"{lead} {body}" if lead else body
