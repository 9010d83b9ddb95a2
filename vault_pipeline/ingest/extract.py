"""The extraction operator: conversation -> atomic units, a session summary, thread maps.

Semantic extraction, not summarisation: every discrete unit of meaning becomes one
declarative sentence of at most 15 words in a forced category, never combined, repetitions
collapsed, nothing judged unimportant. The validators below enforce the rules on whatever
answers, a real model or the offline backend; a violation is re-asked through the seam.
"""

from __future__ import annotations

import bisect
import hashlib
import itertools
import re
from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any, Literal, get_args

from pydantic import BaseModel, Field, ValidationInfo, field_validator, model_validator
from pydantic.json_schema import SkipJsonSchema

from vault_pipeline.ingest.parse import Conversation, Message
from vault_pipeline.models.offline.statements import is_verbatim, sentences
from vault_pipeline.models.prompts import load_prompt
from vault_pipeline.models.protocol import StructuredLLM
from vault_pipeline.text import TITLE_STOPWORDS, estimate_tokens, normalise_text, sentence_count, word_count

Category = Literal["decision", "open-question", "constraint", "fact", "idea", "action-item", "topic", "provisional"]
CATEGORIES: tuple[str, ...] = get_args(Category)
MAX_WORDS = 15
MAX_CONTEXT_WORDS = 12
# A unit that is its source's own sentence (or clause), word for word, may be longer: it is selected,
# never cut. Its context holds what it needs (a lead-in, a heading, a condition).
MAX_VERBATIM_WORDS = 25
MAX_VERBATIM_CONTEXT_WORDS = 25
# The limits as the extract prompt states them; the offline backend reads them from there too.
PROMPT_LIMITS = {
    "max_words": MAX_WORDS,
    "max_context_words": MAX_CONTEXT_WORDS,
    "max_verbatim_words": MAX_VERBATIM_WORDS,
    "max_verbatim_context_words": MAX_VERBATIM_CONTEXT_WORDS,
}
MAX_STEP_WORDS = 25
SUMMARY_MIN_WORDS, SUMMARY_MAX_WORDS = 200, 400
WINDOW_TOKENS = 2500
# What the summary prompt sees: each message up to 1500 characters, a whole session up to ~12k tokens
# (a 16k-context model keeps room to answer), so a long session's messages shrink, to 200 at least.
SUMMARY_MESSAGE_CHARS, SUMMARY_INPUT_CHARS, SUMMARY_MESSAGE_FLOOR = 1500, 48_000, 200

_ENDS_SENTENCE = re.compile(r"[.!?][\"'”’)\]]*$")
_MARKDOWN = re.compile(r"```|(\*\*|~~)(?=\S)[^*~]+?(?<=\S)\1|\]\(|^#{1,6}\s|^(?:[-*+•]|\d+[.)])\s|^\|")


def prose_words(text: str) -> int:
    """Words of prose in a message, as summaries read it: code blocks and tables not counted."""
    return sum(word_count(s) for s in sentences(text))


def _ctx(info: ValidationInfo) -> dict[str, Any]:
    return info.context if isinstance(info.context, dict) else {}


class AtomicUnit(BaseModel):
    """One unit of meaning: a single sentence of at most 15 words, categorised, with its sources."""

    text: str
    category: Category
    source_ids: list[str] = Field(min_length=1)
    speaker: Literal["user", "assistant"]
    context: str | None = None

    @field_validator("category", mode="before")
    @classmethod
    def _known_category(cls, value: Any) -> Any:
        if value not in CATEGORIES:
            raise ValueError(f"category {value!r} is not allowed; use exactly one of: {', '.join(CATEGORIES)}")
        return value

    @field_validator("text")
    @classmethod
    def _one_short_sentence(cls, value: str) -> str:
        text = " ".join(value.split())
        words = word_count(text)
        if not words:
            raise ValueError("empty unit text")
        if _MARKDOWN.search(text):
            raise ValueError(f"unit must be plain prose, no Markdown, code fences or list markers: {text!r}")
        if words > MAX_VERBATIM_WORDS:
            raise ValueError(f"{words} words, at most {MAX_WORDS} allowed; split it into separate units: {text!r}")
        if sentence_count(text) > 1:
            raise ValueError(f"one sentence per unit, never combined; split it into separate units: {text!r}")
        if not _ENDS_SENTENCE.search(text):
            raise ValueError(f"a unit is a declarative sentence ending in '.': {text!r}")
        return text

    @field_validator("context")
    @classmethod
    def _short_context(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        value = " ".join(value.split())
        if word_count(value) > MAX_VERBATIM_CONTEXT_WORDS:
            raise ValueError(f"context has {word_count(value)} words, at most {MAX_CONTEXT_WORDS} allowed: {value!r}")
        return value

    @model_validator(mode="after")
    def _provenance(self, info: ValidationInfo) -> AtomicUnit:
        if self.text.rstrip("\"'”’)]").endswith("?") and self.category != "open-question":
            raise ValueError(f"only an open-question unit may be a question; restate it as a sentence: {self.text!r}")
        ctx = _ctx(info)
        self._check_limits(ctx.get("texts") or {})
        self._check_sources(ctx.get("message_ids"), ctx.get("roles") or {})
        return self

    def _check_sources(self, known: Collection[str] | None, roles: Mapping[str, str]) -> None:
        """Source ids of this window's messages (when it names them), a speaker of their roles, and a
        decision only from the user's own messages."""
        if known is not None:
            unknown = [i for i in self.source_ids if i not in set(known)]
            if unknown:
                raise ValueError(f"source_ids {unknown} are not message ids of this window; use only {sorted(known)}")
        source_roles = {roles[i] for i in self.source_ids if i in roles}
        if source_roles and self.speaker not in source_roles:
            raise ValueError(f"speaker {self.speaker!r} does not match its source messages ({sorted(source_roles)})")
        if self.category == "decision" and (self.speaker != "user" or source_roles - {"user"}):
            raise ValueError(
                f"a decision must come from the user's own messages, not the assistant's: {self.text!r}; "
                "use idea, fact or action-item for the assistant's proposals"
            )

    def _check_limits(self, texts: dict[str, str]) -> None:
        """At most MAX_WORDS words (a context of MAX_CONTEXT_WORDS), or the verbatim limits for a
        sentence that is a run of one of its source messages' own text."""
        sources = [texts[i] for i in self.source_ids if i in texts]
        if sources and any(is_verbatim(self.text, source) for source in sources):
            return
        words = word_count(self.text)
        if words > MAX_WORDS:
            raise ValueError(f"{words} words, at most {MAX_WORDS} allowed; split it into separate units: {self.text!r}")
        if self.context and word_count(self.context) > MAX_CONTEXT_WORDS:
            raise ValueError(
                f"context has {word_count(self.context)} words, at most {MAX_CONTEXT_WORDS} allowed: {self.context!r}"
            )


class UnitBatch(BaseModel):
    """Every unit of one window; repetitions collapse into one unit with merged sources."""

    units: list[AtomicUnit]
    skipped: SkipJsonSchema[int] = 0  # pieces the offline extractor left out rather than cut; not asked of a model

    @model_validator(mode="after")
    def _collapse_repetitions(self) -> UnitBatch:
        self.units = collapse(self.units)
        return self


def collapse(units: Sequence[AtomicUnit]) -> list[AtomicUnit]:
    """Same normalised text -> one unit: the first one's category, speaker and context, source ids merged in order."""
    kept: dict[str, AtomicUnit] = {}
    for unit in units:
        key = normalise_text(unit.text)
        if key not in kept:
            kept[key] = unit.model_copy()
            continue
        first = kept[key]
        merged = first.source_ids + [i for i in unit.source_ids if i not in first.source_ids]
        kept[key] = first.model_copy(update={"source_ids": merged})
    return list(kept.values())


class SessionSummary(BaseModel):
    """A 200-400 word session summary; fewer words only when the session itself has fewer than 200."""

    summary: str

    @field_validator("summary")
    @classmethod
    def _length(cls, value: str, info: ValidationInfo) -> str:
        value = value.strip()
        words = word_count(value)
        # The floor is the session's own prose (what the prompt showed), capped at 200 words.
        floor = max(1, min(SUMMARY_MIN_WORDS, int(_ctx(info).get("source_words", SUMMARY_MIN_WORDS))))
        if words > SUMMARY_MAX_WORDS:
            raise ValueError(f"summary has {words} words, at most {SUMMARY_MAX_WORDS} allowed; shorten it")
        if words < floor:
            raise ValueError(f"summary has {words} words, at least {floor} needed for this session; say more")
        return value


class ThreadStep(BaseModel):
    """What moved forward in one session of a line of work."""

    session_id: str
    step: str

    @field_validator("step")
    @classmethod
    def _short(cls, value: str) -> str:
        value = " ".join(value.split())
        if not word_count(value) or word_count(value) > MAX_STEP_WORDS:
            raise ValueError(f"a step has 1-{MAX_STEP_WORDS} words, got {word_count(value)}: {value!r}")
        return value


class ThreadMap(BaseModel):
    """The arc of one line of work across sessions."""

    title: str = Field(min_length=1)
    steps: list[ThreadStep] = Field(min_length=1)
    open_questions: list[str] = []

    @model_validator(mode="after")
    def _known_sessions(self, info: ValidationInfo) -> ThreadMap:
        known = _ctx(info).get("session_ids")
        if known is not None:
            unknown = [s.session_id for s in self.steps if s.session_id not in set(known)]
            if unknown:
                raise ValueError(f"steps name unknown session ids {unknown}; use only {list(known)}")
        return self


# --------------------------------------------------------------------------- the operator


@dataclass(frozen=True)
class Extraction:
    """A conversation's atomic units and its session summary."""

    conversation: Conversation
    units: tuple[AtomicUnit, ...]
    summary: str
    skipped: int = 0  # sentences no clause of which fits the word limit: left to the transcript, never cut
    scores: tuple[float | None, ...] = ()  # per unit, the selector's probability (None: not judged)


def windows(messages: Sequence[Message], max_tokens: int = WINDOW_TOKENS) -> list[tuple[Message, ...]]:
    """Consecutive messages packed into windows on message boundaries; an oversized message is split."""
    result: list[tuple[Message, ...]] = []
    current: list[Message] = []
    used = 0  # estimated tokens in ``current``
    for message in messages:
        for part in _parts(message, max_tokens):
            cost = estimate_tokens(part.text)
            if current and used + cost > max_tokens:
                result.append(tuple(current))
                current, used = [], 0
            current.append(part)
            used += cost
    if current:
        result.append(tuple(current))
    return result


def _parts(message: Message, max_tokens: int) -> list[Message]:
    """A message over the window, cut at paragraph, then sentence, then word ends; each part keeps the id."""
    if estimate_tokens(message.text) <= max_tokens:
        return [message]
    parts, buffer = [], ""
    for piece in _pieces(message.text, max_tokens):
        if buffer and estimate_tokens(buffer + piece) > max_tokens:
            parts.append(buffer)
            buffer = ""
        buffer += piece
    parts.append(buffer)
    return [Message(message.id, message.role, message.speaker, p, message.created) for p in parts if p.strip()]


_CUT_POINTS = (re.compile(r"\n[ \t]*\n\s*"), re.compile(r"[.!?][\"'”’)\]]*\s+"), re.compile(r"\s+"))


def _pieces(text: str, max_tokens: int, level: int = 0) -> list[str]:
    """Text cut into pieces of at most ``max_tokens`` that concatenate back to exactly ``text``."""
    if estimate_tokens(text) <= max_tokens:
        return [text]
    if level == len(_CUT_POINTS):  # one "word" over the window (a blob): cut by characters, <= 4 bytes each
        return [text[i : i + max_tokens] for i in range(0, len(text), max_tokens)]
    ends = [m.end() for m in _CUT_POINTS[level].finditer(text) if m.end() < len(text)]
    spans = [text[a:b] for a, b in zip([0, *ends], [*ends, len(text)]) if b > a]
    return [piece for span in spans for piece in _pieces(span, max_tokens, level + 1)]


def _variables(title: str, messages: Sequence[Message], max_chars: int | None = None) -> dict[str, Any]:
    return {
        "title": title,
        "messages": [
            {
                "id": m.id,
                "role": m.role,
                "speaker": m.speaker,
                "text": m.text if max_chars is None else shorten(m.text, max_chars),
            }
            for m in messages
        ],
    }


def shorten(text: str, max_chars: int) -> str:
    """The text, or its head cut at a sentence (else word) end within ``max_chars`` and marked with '…'."""
    if len(text) <= max_chars:
        return text
    head = text[:max_chars]
    end = max(head.rfind(". "), head.rfind(".\n"), head.rfind("? "), head.rfind("\n\n")) + 1
    if end < max_chars // 2:
        end = max(head.rfind(" "), max_chars // 2)
    return head[:end].rstrip() + " …"


def extract_conversation(conv: Conversation, llm: StructuredLLM) -> Extraction:
    """Extract every unit window by window, collapse repetitions, and summarise the session."""
    roles = {m.id: m.role for m in conv.messages}
    texts = {m.id: m.text for m in conv.messages}
    order = {m.id: i for i, m in enumerate(conv.messages)}
    units: list[AtomicUnit] = []
    skipped = 0
    parts = windows(conv.messages)
    for part, window in enumerate(parts, 1):
        context = {"message_ids": sorted({m.id for m in window}), "roles": roles, "texts": texts}
        variables = {
            **_variables(conv.title, window),
            "titled": conv.titled,
            "part": part,
            "parts": len(parts),
            **PROMPT_LIMITS,
        }
        batch = llm.call(load_prompt("extract"), variables, UnitBatch, context=context)
        units, skipped = units + batch.units, skipped + batch.skipped
    # Deterministic order: by the first source message, then by the order the windows gave.
    ranked = sorted(enumerate(collapse(units)), key=lambda p: (min(order.get(i, 0) for i in p[1].source_ids), p[0]))
    per_message = SUMMARY_INPUT_CHARS // max(1, len(conv.messages))
    shown = _variables(conv.title, conv.messages, max(SUMMARY_MESSAGE_FLOOR, min(SUMMARY_MESSAGE_CHARS, per_message)))
    source_words = sum(prose_words(m["text"]) for m in shown["messages"])
    summary = llm.call(load_prompt("summarize"), shown, SessionSummary, context={"source_words": source_words})
    return Extraction(conv, tuple(unit for _, unit in ranked), summary.summary, skipped)


# --------------------------------------------------------------------------- thread maps

TITLE_JACCARD, TITLE_SHARED = 0.5, 2
# Chats whose titles pass the rule continue each other only when close in time: within a day, or
# within CONTINUES_DAYS when the titles share a name (a word no dictionary knows: "django", "gcp")
# or the later one opens by pointing back at what they share ("our paper", "the garden essay");
# or when they open with the same ask (a request retried in a new chat). docs/decisions/0147.
CONTINUES_DAYS, SAME_DAY = 14.0, 1.0
OPENING_CHARS = 300  # what of a chat's first user message a thread map keeps to compare openings


def thread_header(conv: Conversation) -> Conversation:
    """What grouping reads of a conversation: title, times, thread, and its opening ask (cut to
    ``OPENING_CHARS``): an ingest keeps this much per conversation, never its messages."""
    first = next((m for m in conv.messages if m.role == "user"), None)
    opening = (replace(first, text=first.text[:OPENING_CHARS]),) if first else ()
    return replace(conv, messages=opening)


def _title_terms(title: str) -> tuple[frozenset[str], frozenset[tuple[str, str]]]:
    """A title's content words (plural 's' folded) and its adjacent content-word pairs."""
    words = (w[:-1] if w.endswith("s") and len(w) > 4 else w for w in normalise_text(title).split())
    seq = [w for w in words if len(w) > 2 and w not in TITLE_STOPWORDS]
    return frozenset(seq), frozenset(itertools.pairwise(seq))


def _same_line(a: tuple[frozenset, frozenset], b: tuple[frozenset, frozenset]) -> bool:
    shared = len(a[0] & b[0])
    if shared < TITLE_SHARED:
        return False
    return shared / len(a[0] | b[0]) >= TITLE_JACCARD or bool(a[1] & b[1])


def _continues(a: Conversation, b: Conversation, shared: frozenset[str]) -> bool:
    """Whether two chats whose titles pass the rule continue each other (see ``CONTINUES_DAYS``)."""
    if _opening(a) and _opening(a) == _opening(b):
        return True
    if a.created is None or b.created is None:
        return True  # no times (transcripts): the titles decide, as they always did
    days = abs((a.created - b.created).total_seconds()) / 86_400
    if days <= SAME_DAY:
        return True
    later = max(a, b, key=_when)
    return days <= CONTINUES_DAYS and (any(map(_is_name, shared)) or _points_back(_opening(later), shared))


# "our paper", "the related-work section of our paper", "mijn scriptie": a possessive or "the"
# at most two words before a word the titles share.
_BACK = re.compile(r"\b(?:our|my|the|this|ons|onze|mijn|deze)\s+(?:[\w-]+\s+){0,2}?([\w-]+)")


def _points_back(opening: str, shared: frozenset[str]) -> bool:
    """Whether a chat's opening refers to something the titles share as known ("our paper")."""
    folded = {w[:-1] if w.endswith("s") and len(w) > 4 else w for w in _BACK.findall(opening)}
    return bool(folded & shared)


def _opening(conv: Conversation) -> str:
    first = next((m for m in conv.messages if m.role == "user"), None)
    return normalise_text(first.text[:OPENING_CHARS]) if first else ""


@lru_cache(maxsize=1)
def _lexicon() -> Any:
    from textblob.en import lexicon  # the tagger's word list, imported on first use

    return lexicon


def _is_name(word: str) -> bool:
    return _lexicon().get(word) is None


def group_threads(conversations: Sequence[Conversation]) -> list[tuple[str, list[Conversation]]]:
    """Sessions of one line of work, groups of 2+ only, sorted by key; members by (created, id).

    Rule: conversations with the same ``thread`` form one group (key ``thread:<thread>``). The others
    join when their titles share at least 2 content words (stop words and generic verbs such as
    "fix" or "create" left out, a plural "s" folded) and either the Jaccard index of those word
    sets is at least 0.5 or both titles hold the same two-word phrase ("retrieval paper",
    "garden essay"), and they continue each other (``_continues``: the same opening ask, or close
    in time); joining is transitive. Key: ``title:`` + a hash of the group's earliest session, so a
    group keeps its key when later sessions join it.
    """
    groups: dict[str, list[Conversation]] = {}
    for conv in conversations:
        if conv.thread:
            groups.setdefault(f"thread:{conv.thread}", []).append(conv)
    loose = [conv for conv in conversations if not conv.thread]
    for members in _title_clusters(loose):
        first = min(members, key=_when)
        groups[f"title:{hashlib.sha1(f'{first.kind}:{first.id}'.encode()).hexdigest()[:12]}"] = members
    return [(key, sorted(members, key=_when)) for key, members in sorted(groups.items()) if len(members) >= 2]


def _when(conv: Conversation) -> tuple[str, str]:
    return conv.created.isoformat() if conv.created else "", conv.id


def _title_clusters(convs: Sequence[Conversation]) -> list[list[Conversation]]:
    """Union-find over title pairs that pass the rule; only pairs sharing a word are compared."""
    parent = list(range(len(convs)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    terms = [_title_terms(c.title) for c in convs]
    postings: dict[str, list[int]] = {}
    for i, (words, _) in enumerate(terms):
        for w in words:
            postings.setdefault(w, []).append(i)
    # Each title against the later titles it shares TITLE_SHARED or more words with, in order; the
    # pairs are counted per title, never all held at once (5,000 titles that share one word are
    # 12.5 million pairs), and a pair already in one cluster is not judged again.
    for i, (words, _) in enumerate(terms):
        later = (ids[bisect.bisect_right(ids, i) :] for ids in (postings[w] for w in words))
        shared = Counter(itertools.chain.from_iterable(later))
        for j in sorted(j for j, n in shared.items() if n >= TITLE_SHARED):
            if find(i) == find(j):
                continue
            if _same_line(terms[i], terms[j]) and _continues(convs[i], convs[j], terms[i][0] & terms[j][0]):
                parent[find(j)] = find(i)
    clusters: dict[int, list[Conversation]] = {}
    for i, conv in enumerate(convs):
        clusters.setdefault(find(i), []).append(conv)
    return list(clusters.values())


def map_thread(key: str, sessions: Sequence[tuple[Conversation, str]], llm: StructuredLLM) -> ThreadMap:
    """The arc of a line of work: one step per session, and what is still open."""
    variables = {
        "title": sessions[0][0].title,
        "sessions": [
            {
                "id": conv.id,
                "date": conv.created.date().isoformat() if conv.created else "",
                "title": conv.title,
                "summary": summary,
            }
            for conv, summary in sessions
        ],
    }
    return llm.call(
        load_prompt("thread_map"), variables, ThreadMap, context={"session_ids": [conv.id for conv, _ in sessions]}
    )
