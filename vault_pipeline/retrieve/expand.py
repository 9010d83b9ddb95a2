"""Associative recall, bounded: one hop from the strongest survivors, and pseudo-relevance feedback.

* ``neighbours``: the atomic notes that cite a seed's own turns (its sibling sentences) or the
  turns next to them in the same session (``radius`` turns either side, in the order the
  session note lists its messages). A question's answer is often the rest of the turn that
  matches its words, or the reply to it.
* ``feedback_terms``: the kept notes' most frequent content words that the prompt lacks, for a
  prompt whose own words find little (Rocchio-style pseudo-relevance feedback, terms only).

Both are deterministic (ties broken by id or first appearance) and bounded by the caller's beam.
The funnel sends what they find through the same floor and gate as every other candidate.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import is_dataclass, replace
from datetime import date
from functools import lru_cache

from vault_pipeline.retrieve.blocks import anchor, cited_messages, mark_times, parse_atomic
from vault_pipeline.retrieve.types import Hit
from vault_pipeline.text import QUERY_STOPWORDS, STOPWORDS, prompt_stopwords, tokens
from vault_pipeline.vault.format import BLOCK_PREFIX, MESSAGE_ID, TURN
from vault_pipeline.vault.times import resolve_times

Order = dict[str, dict[str, int]]  # conversation -> message id -> its place in the session


def neighbours(seeds: Sequence[Hit], rows: Sequence[Hit], radius: int, *, ahead: bool = False) -> list[tuple[Hit, str]]:
    """(row, seed note id) for each note citing a seed's turns or one within ``radius`` of them, and
    for each of those turns itself where the index keeps it as a chunk of its own (``as_turn``).

    ``rows`` are every chunk of the seeds' conversations; the session rows among them give the
    turn order. A seed is an atomic note or a turn. Seeds come in rank order; a neighbour is
    credited to the first seed that reaches it; a seed is never its own neighbour. Sorted by seed
    order, then chunk id. ``ahead``: only the seeds' own turns and the ``radius`` turns after them
    (the reply to a question), none before.
    """
    order = _turn_order(rows)
    offsets = range(0 if ahead else -radius, radius + 1)
    reached = {(seed.source_conversation, p + d) for seed in seeds for p in _places(seed, order) for d in offsets}
    by_turn = _rows_by_turn(rows, order, reached)
    seen = {s.chunk_id for s in seeds}
    out: list[tuple[Hit, str]] = []
    for seed in seeds:
        near = sorted({p + d for p in _places(seed, order) for d in offsets})
        found = [r for p in near for r in by_turn.get((seed.source_conversation, p), [])]
        for row in sorted(found, key=lambda r: r.chunk_id):
            if row.chunk_id not in seen:
                seen.add(row.chunk_id)
                out.append((row, seed.note_id))
    return out


def _turn_order(rows: Sequence[Hit]) -> Order:
    """Each conversation's messages in the order its session note lists them."""
    order: Order = {}
    read: set[tuple[str, str]] = set()  # every chunk of a session lists the same messages: read once
    for row in rows:
        if row.type == "session" and (row.source_conversation, row.source_messages) not in read:
            read.add((row.source_conversation, row.source_messages))
            positions = order.setdefault(row.source_conversation, {})
            for position, message in enumerate(cited_messages(row.source_messages)):
                positions.setdefault(message, position)
    return order


def _places(row: Hit, order: Order) -> list[int]:
    """The places in its session of the turns a row cites."""
    turns = order.get(row.source_conversation, {})
    return [turns[m] for m in cited_messages(row.source_messages) if m in turns]


def _rows_by_turn(rows: Sequence[Hit], order: Order, reached: set[tuple[str, int]]) -> dict[tuple[str, int], list[Hit]]:
    """(conversation, place) -> the notes and turns citing that turn; a message's own session chunk
    counts as its turn, and only those in reach are read."""
    by_turn: dict[tuple[str, int], list[Hit]] = {}
    for row in rows:
        if row.type == "session":
            own = own_message(row)
            if own is None or (row.source_conversation, order[row.source_conversation][own]) not in reached:
                continue
            row = as_turn(row)
        if row.type in ("atomic", "turn"):
            for place in _places(row, order):
                by_turn.setdefault((row.source_conversation, place), []).append(row)
    return by_turn


def asks(row: Hit) -> bool:
    """Whether a turn, or an atomic note's sentence, ends on a question: the speaker hands the floor
    over, and the next turn is the answer (a question-answer adjacency pair)."""
    text = parse_atomic(row.text).sentence if row.type == "atomic" else row.text
    return text.rstrip().endswith("?")


def feedback_terms(query: str, kept: Sequence[Hit], limit: int) -> list[str]:
    """Up to ``limit`` content words of the kept notes' sentences that the query lacks, most frequent first."""
    if limit <= 0:
        return []
    have = set(tokens(query)) | prompt_stopwords(query)  # nor the function words of the prompt's language
    counts: Counter[str] = Counter()
    first: dict[str, int] = {}
    for row in kept:
        text = parse_atomic(row.text).sentence if row.type == "atomic" else row.text
        for word in dict.fromkeys(tokens(text)):  # a word counts once per note
            if len(word) < 3 or word.isdigit() or word in have or word in STOPWORDS or word in QUERY_STOPWORDS:
                continue
            counts[word] += 1
            first.setdefault(word, len(first))
    ranked = sorted(counts, key=lambda w: (-counts[w], first[w]))
    return ranked[:limit]


# A verbatim turn enters only when it carries at least this many content words that the atomic
# notes citing it do not: the rest of a sentence too long to be a note, a list, a name.
TURN_NEW_WORDS = 3


def turn_excerpts(seeds: Sequence[Hit], rows: Sequence[Hit]) -> list[tuple[Hit, str]]:
    """(turn row, seed note id): each seed's own turns, verbatim from the session transcript, when
    they carry words the turn's atomic notes lack. A turn row is the transcript chunk's row with
    ``type`` "turn", the turn's text (``Speaker: text``) and the one message it cites."""
    wanted = {(s.source_conversation, m) for s in seeds for m in cited_messages(s.source_messages)}
    turns = turn_rows(rows, wanted)
    noted = _noted_words(rows, set(turns))
    out, seen = [], set()
    for seed in seeds:
        for message in cited_messages(seed.source_messages):
            key = (seed.source_conversation, message)
            turn = turns.get(key)
            if turn is None or key in seen:
                continue
            seen.add(key)
            new = {w for w in tokens(turn.text) if w not in STOPWORDS} - noted.get(key, set())
            if len(new) >= TURN_NEW_WORDS:
                out.append((turn, seed.note_id))
    return out


def _noted_words(rows: Sequence[Hit], turns: set[tuple[str, str]]) -> dict[tuple[str, str], set[str]]:
    """(conversation, message) -> the words the atomic notes citing that turn hold (only ``turns``)."""
    noted: dict[tuple[str, str], set[str]] = {}
    for row in rows:
        if row.type != "atomic":
            continue
        keys = [(row.source_conversation, m) for m in cited_messages(row.source_messages)]
        if any(k in turns for k in keys):
            words = set(tokens(row.text))
            for key in keys:
                noted.setdefault(key, set()).update(words)
    return noted


def turn_rows(rows: Sequence[Hit], wanted: set[tuple[str, str]]) -> dict[tuple[str, str], Hit]:
    """The ``wanted`` (conversation, message) turns found in the session rows' transcripts, as turn
    rows; a relative time the turn's own notes resolved gets its date in brackets, as in a note block."""
    times = _resolved_times(rows, wanted)
    asked: dict[str, set[str]] = {}
    for conversation, message in wanted:
        asked.setdefault(conversation, set()).add(message)
    turns: dict[tuple[str, str], Hit] = {}
    for row in rows:
        if row.type != "session" or not is_dataclass(row) or row.source_conversation not in asked:
            continue
        # A session's chunks all cite its whole message list: of it, only the wanted messages are looked at.
        places = _message_places(row.source_messages)
        held = sorted((places[m], m) for m in asked[row.source_conversation] if m in places)
        ids = {anchor(m): m for _, m in held}
        if not ids or f"^{BLOCK_PREFIX}" not in row.text:
            continue
        found = _turn_matches(row.text)
        for block, message in ids.items():
            if (m := found.get(block)) is not None:
                turns[(row.source_conversation, message)] = _turn_row(row, message, m, times)
    return turns


@lru_cache(maxsize=4096)
def _turn_matches(text: str) -> dict[str, re.Match[str]]:
    """Block id -> the (last) transcript turn of a session chunk's text that ends on it: a chunk is
    parsed once, however many of its turns the walk, the hop and the next query look for."""
    found: dict[str, re.Match[str]] = {}
    for paragraph in re.split(r"\n\s*\n", text):
        if m := TURN.match(paragraph.strip()):
            found[m["block"]] = m
    return found


def _resolved_times(rows: Sequence[Hit], wanted: set[tuple[str, str]]) -> dict[tuple[str, str], list[tuple[str, str]]]:
    """(conversation, message) -> the relative times the turn's notes resolved ("yesterday" is 7 May 2023)."""
    times: dict[tuple[str, str], list[tuple[str, str]]] = {}
    conversations = {conversation for conversation, _ in wanted}
    for row in rows:
        if row.type != "atomic" or row.source_conversation not in conversations:
            continue
        for message in cited_messages(row.source_messages):
            if (row.source_conversation, message) in wanted:
                found = times.setdefault((row.source_conversation, message), [])
                found += [t for t in parse_atomic(row.text).times if t not in found]
    return times


def _turn_row(row: Hit, message: str, m: re.Match[str], times: dict[tuple[str, str], list[tuple[str, str]]]) -> Hit:
    """The session chunk's row as the turn ``m`` matched: ``Speaker: text``, citing ``message``."""
    said = " ".join(m["text"].split())
    found = times.get((row.source_conversation, message)) or _own_times(said, row.created)
    said = mark_times(said, found)[0]
    # The chunk's stored vector is not the turn's: the turn has none.
    unembedded = {"vector": None} if hasattr(row, "vector") else {}
    return replace(  # type: ignore[type-var]
        row,
        chunk_id=f"{row.chunk_id}@{message}",
        type="turn",
        text=f"{' '.join(m['speaker'].split())}: {said}",
        source_messages=json.dumps([message]),
        **unembedded,
    )


def _own_times(text: str, created: str) -> list[tuple[str, str]]:
    """The turn's relative times resolved by ingest's resolver against its session's first day (a
    note resolves against its message's own time, which the row does not carry): for a turn none of
    whose notes went on."""
    try:
        day = date.fromisoformat(str(created or "")[:10])
    except ValueError:
        return []
    return [(ref.text, ref.describe()) for ref in resolve_times(text, day)]


@lru_cache(maxsize=1024)
def _by_anchor(source_messages: str) -> dict[str, str]:
    """Block id -> message id of a session's messages (read once per session, not once per chunk)."""
    return {anchor(m): m for m in cited_messages(source_messages)}


def _message_places(source_messages: str) -> dict[str, int]:
    """Message id -> its (last) place in a chunk's message list; a session's list is read once."""
    if isinstance(source_messages, str):
        return _places_of(source_messages)
    return {m: i for i, m in enumerate(cited_messages(source_messages))}


@lru_cache(maxsize=1024)
def _places_of(source_messages: str) -> dict[str, int]:
    return {m: i for i, m in enumerate(cited_messages(source_messages))}


def own_message(row: Hit) -> str | None:
    """The one message a session chunk holds whole (its only block id), else None."""
    return _own_message(row.text, row.source_messages) if row.type == "session" else None


@lru_cache(maxsize=4096)
def _own_message(text: str, source_messages: str) -> str | None:
    """``own_message`` of a session chunk's text, found once: the one hop asks for every chunk of a
    session, for its seeds and again for its questions, and the next query often reads the same."""
    anchors = MESSAGE_ID.findall(text)
    return _by_anchor(source_messages).get(anchors[0]) if len(anchors) == 1 else None


def as_turn(row: Hit) -> Hit:
    """A session chunk holding exactly one transcript turn (the index keeps one chunk per message),
    as that turn's row: ``Speaker: text``, citing its one message, with the chunk's own vector."""
    message = own_message(row) if is_dataclass(row) else None
    if message is None:
        return row
    turns = list(turn_rows([row], {(row.source_conversation, message)}).values())
    if len(turns) != 1:
        return row
    return replace(turns[0], vector=row.vector) if hasattr(row, "vector") else turns[0]
