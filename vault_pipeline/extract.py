"""The extraction operator: conversation -> atomic units, a session summary, thread maps.

Semantic extraction, not summarisation (seed 004): every discrete unit of meaning becomes one
declarative sentence of at most 15 words in a forced category, never combined, repetitions
collapsed, nothing judged unimportant. The validators below enforce the rules on whatever
answers, a real model or the offline backend; a violation is re-asked through the seam.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationInfo, field_validator, model_validator

from vault_pipeline.llm import StructuredLLM, load_prompt
from vault_pipeline.parse import Conversation, Message

Category = Literal["decision", "open-question", "constraint", "fact", "idea", "action-item", "topic", "provisional"]
MAX_WORDS = 15
MAX_CONTEXT_WORDS = 12
MAX_STEP_WORDS = 25
WINDOW_TOKENS = 2500
SUMMARY_MESSAGE_CHARS = 1500  # what the summary prompt sees of each message

_WORD = re.compile(r"\w", re.UNICODE)
_FENCED = re.compile(r"```.*?(?:```|\Z)", re.S)
_ABBREVIATIONS = r"(?<!\be\.g)(?<!\bi\.e)(?<!\bvs)(?<!\bDr)(?<!\bMr)(?<!\bMs)(?<!\bMrs)(?<!\betc)(?<!\bNo)(?<!\bSt)"
_SENTENCE_BREAK = re.compile(_ABBREVIATIONS + r"[.!?][\"')\]]*\s+(?=[A-Z0-9\"'(\[])")


def count_words(text: str) -> int:
    """Words as a person counts them: white-space tokens that hold a letter or digit."""
    return sum(1 for token in text.split() if _WORD.search(token))


def normalise(text: str) -> str:
    """Lower case, punctuation dropped, white space folded: the key for 'the same unit'."""
    return " ".join(re.sub(r"[^\w\s]", " ", text.lower()).split())


def _has_sentence_break(text: str) -> bool:
    """A sentence end inside the text; 'Prof. Motto', 'e.g. SQLite' and initials are not ends."""
    for match in _SENTENCE_BREAK.finditer(text):
        before = text[: match.start()].rsplit(" ", 1)[-1].strip("\"'([")
        if not (before[:1].isupper() and len(before) <= 4) and len(before) > 1:
            return True
    return False


def _ctx(info: ValidationInfo) -> dict[str, Any]:
    return info.context if isinstance(info.context, dict) else {}


class AtomicUnit(BaseModel):
    """One unit of meaning: a single sentence of at most 15 words, categorised, with its sources."""

    text: str
    category: Category
    source_ids: list[str] = Field(min_length=1)
    speaker: Literal["user", "assistant"]
    context: str | None = None

    @field_validator("text")
    @classmethod
    def _one_short_sentence(cls, value: str) -> str:
        text = " ".join(value.split())
        words = count_words(text)
        if not words:
            raise ValueError("empty unit text")
        if "```" in text or text.startswith(("#", "- ", "* ", "|")):
            raise ValueError(f"unit must be plain prose, not Markdown: {text!r}")
        if words > MAX_WORDS:
            raise ValueError(f"{words} words, at most {MAX_WORDS} allowed; split it into separate units: {text!r}")
        if _has_sentence_break(text):
            raise ValueError(f"one sentence per unit, never combined; split it: {text!r}")
        if not text.endswith((".", "!", "?")):
            raise ValueError(f"a unit is a declarative sentence ending in '.': {text!r}")
        return text

    @field_validator("context")
    @classmethod
    def _short_context(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        value = " ".join(value.split())
        if count_words(value) > MAX_CONTEXT_WORDS:
            raise ValueError(f"context has {count_words(value)} words, at most {MAX_CONTEXT_WORDS} allowed")
        return value

    @model_validator(mode="after")
    def _provenance(self, info: ValidationInfo) -> AtomicUnit:
        if self.text.endswith("?") and self.category != "open-question":
            raise ValueError(f"only an open-question unit may be a question; restate as a sentence: {self.text!r}")
        ctx = _ctx(info)
        known, roles = ctx.get("message_ids"), ctx.get("roles") or {}
        if known is not None:
            unknown = [i for i in self.source_ids if i not in set(known)]
            if unknown:
                raise ValueError(f"source_ids {unknown} are not message ids of this window")
        source_roles = {roles[i] for i in self.source_ids if i in roles}
        if source_roles and self.speaker not in source_roles:
            raise ValueError(f"speaker {self.speaker!r} does not match its source messages ({sorted(source_roles)})")
        if self.category == "decision" and (self.speaker != "user" or source_roles - {"user"}):
            raise ValueError(f"a decision must come from the user's own messages, not the assistant's: {self.text!r}; "
                             "use idea, fact or action-item for the assistant's proposals")
        return self


class UnitBatch(BaseModel):
    """Every unit of one window; repetitions collapse into one unit with merged sources."""

    units: list[AtomicUnit]

    @model_validator(mode="after")
    def _collapse_repetitions(self) -> UnitBatch:
        self.units = collapse(self.units)
        return self


def collapse(units: Sequence[AtomicUnit]) -> list[AtomicUnit]:
    """Same normalised text -> one unit (first category kept, source ids merged in order)."""
    kept: dict[str, AtomicUnit] = {}
    for unit in units:
        key = normalise(unit.text)
        if key not in kept:
            kept[key] = unit.model_copy()
            continue
        first = kept[key]
        merged = first.source_ids + [i for i in unit.source_ids if i not in first.source_ids]
        kept[key] = first.model_copy(update={"source_ids": merged})
    return list(kept.values())


class SessionSummary(BaseModel):
    """A 200-400 word session summary (shorter only when the session itself is short)."""

    summary: str

    @field_validator("summary")
    @classmethod
    def _length(cls, value: str, info: ValidationInfo) -> str:
        value = value.strip()
        words = count_words(value)
        # A short session gets a shorter summary: at least a quarter of its prose, at most 200 words.
        floor = min(200, int(_ctx(info).get("source_words", 800)) // 4)
        if words > 400:
            raise ValueError(f"summary has {words} words, at most 400 allowed")
        if words < max(floor, 1):
            raise ValueError(f"summary has {words} words, at least {max(floor, 1)} needed for this session")
        return value


class ThreadStep(BaseModel):
    """What moved forward in one session of a line of work."""

    session_id: str
    step: str

    @field_validator("step")
    @classmethod
    def _short(cls, value: str) -> str:
        value = " ".join(value.split())
        if not count_words(value) or count_words(value) > MAX_STEP_WORDS:
            raise ValueError(f"a step has 1-{MAX_STEP_WORDS} words, got {count_words(value)}: {value!r}")
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


def estimate_tokens(text: str) -> int:
    """Cheap, deterministic token estimate: UTF-8 bytes / 4."""
    return math.ceil(len(text.encode("utf-8")) / 4)


def windows(messages: Sequence[Message], max_tokens: int = WINDOW_TOKENS) -> list[tuple[Message, ...]]:
    """Consecutive messages packed into windows on message boundaries; an oversized message is split."""
    result: list[tuple[Message, ...]] = []
    current: list[Message] = []
    used = 0
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
    """A message over the window, cut at paragraph then sentence boundaries; each part keeps the id."""
    if estimate_tokens(message.text) <= max_tokens:
        return [message]
    pieces = [p for p in re.split(r"\n\s*\n", message.text) if p.strip()]
    pieces = [s for p in pieces for s in (_SENTENCE_BREAK.split(p) if estimate_tokens(p) > max_tokens else [p])]
    parts, buffer = [], ""
    for piece in pieces:
        if buffer and estimate_tokens(buffer + "\n\n" + piece) > max_tokens:
            parts.append(buffer)
            buffer = ""
        buffer = f"{buffer}\n\n{piece}" if buffer else piece
    parts.append(buffer)
    return [Message(message.id, message.role, message.speaker, p, message.created) for p in parts if p.strip()]


def _variables(title: str, messages: Sequence[Message], max_chars: int | None = None) -> dict[str, Any]:
    return {"title": title, "messages": [{"id": m.id, "role": m.role, "speaker": m.speaker,
                                          "text": m.text if max_chars is None else m.text[:max_chars]}
                                         for m in messages]}


def extract_conversation(conv: Conversation, llm: StructuredLLM) -> Extraction:
    """Extract every unit window by window, collapse repetitions, and summarise the session."""
    roles = {m.id: m.role for m in conv.messages}
    order = {m.id: i for i, m in enumerate(conv.messages)}
    prompt = load_prompt("extract")
    units: list[AtomicUnit] = []
    for window in windows(conv.messages):
        context = {"message_ids": sorted({m.id for m in window}), "roles": roles}
        units += llm.call(prompt, _variables(conv.title, window), UnitBatch, context=context).units
    ranked = sorted(enumerate(collapse(units)), key=lambda p: (min(order.get(i, 0) for i in p[1].source_ids), p[0]))
    source_words = sum(count_words(_FENCED.sub(" ", m.text)) for m in conv.messages)
    summary = llm.call(load_prompt("summarize"), _variables(conv.title, conv.messages, SUMMARY_MESSAGE_CHARS),
                       SessionSummary, context={"source_words": source_words})
    return Extraction(conv, tuple(unit for _, unit in ranked), summary.summary)


# --------------------------------------------------------------------------- thread maps

_STOP = frozenset("the a an and or of for to in on with about my our your how what why when is are be do does "
                  "can could should would new chat conversation session help question using use vs".split())


def _title_words(title: str) -> frozenset[str]:
    words = (w[:-1] if w.endswith("s") and len(w) > 4 else w for w in normalise(title).split())
    return frozenset(w for w in words if len(w) > 2 and w not in _STOP)


def group_threads(conversations: Sequence[Conversation]) -> list[tuple[str, list[Conversation]]]:
    """Sessions of one line of work: a shared thread id, else titles sharing >= 2 content words (Jaccard >= 1/3)."""
    groups: dict[str, list[Conversation]] = {}
    loose: list[Conversation] = []
    for conv in conversations:
        if conv.thread:
            groups.setdefault(f"thread:{conv.thread}", []).append(conv)
        else:
            loose.append(conv)
    for members in _title_clusters(loose):
        ids = "\x1f".join(sorted(c.id for c in members))
        groups[f"thread:{hashlib.sha1(ids.encode()).hexdigest()[:12]}"] = members
    return [(key, sorted(members, key=_when)) for key, members in sorted(groups.items()) if len(members) >= 2]


def _when(conv: Conversation) -> tuple[str, str]:
    return (conv.created.isoformat() if conv.created else "", conv.id)


def _title_clusters(convs: Sequence[Conversation]) -> list[list[Conversation]]:
    parent = list(range(len(convs)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    words = [_title_words(c.title) for c in convs]
    for i in range(len(convs)):
        for j in range(i + 1, len(convs)):
            shared = words[i] & words[j]
            if len(shared) >= 2 and len(shared) / len(words[i] | words[j]) >= 1 / 3:
                parent[find(j)] = find(i)
    clusters: dict[int, list[Conversation]] = {}
    for i, conv in enumerate(convs):
        clusters.setdefault(find(i), []).append(conv)
    return list(clusters.values())


def map_thread(key: str, sessions: Sequence[tuple[Conversation, str]], llm: StructuredLLM) -> ThreadMap:
    """The arc of a line of work: one step per session, and what is still open."""
    variables = {"title": sessions[0][0].title,
                 "sessions": [{"id": conv.id, "date": conv.created.date().isoformat() if conv.created else "",
                               "title": conv.title, "summary": summary} for conv, summary in sessions]}
    return llm.call(load_prompt("thread_map"), variables, ThreadMap,
                    context={"session_ids": [conv.id for conv, _ in sessions]})
