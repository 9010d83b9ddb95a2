"""Offline extraction, summaries and thread maps: deterministic rules, no model.

A baseline so the pipeline runs with no key: sentence segmentation, category cues,
compression to 15 words, decisions only from the user's turns. Real quality needs a model.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from vault_pipeline.offline.text import compress, count_words, finish, sentences

_PLEASANTRY = re.compile(
    r"^(sure|certainly|of course|absolutely|great|thanks|thank you|you're welcome|hi|hello|hey|ok|okay|"
    r"good question|no problem|glad to help|happy to help)\b[^.!?]*[.!?]?$"
    r"|^(i hope (this|that) helps|let me know if|feel free to|here is|here's|here are|below is|"
    r"i'd be happy to|i'm happy to|i can help)\b", re.I)
_CUES: list[tuple[str, re.Pattern[str]]] = [
    ("decision", re.compile(r"\b(i'll|i will|we'll|we will|let's|let us|i decided|we decided|i've decided|"
                            r"going with|i want to use|we chose|i chose|i'm going to|we're going to|i choose|"
                            r"we choose|i prefer to use|my choice is)\b", re.I)),
    ("action-item", re.compile(r"^(todo|to do|next step|remember to|please|don't forget|make sure)\b|"
                               r"\b(i need to|we need to|i have to|we have to|you should|you need to|"
                               r"you'll need to|you will need to)\b", re.I)),
    ("constraint", re.compile(r"\b(must|must not|cannot|can't|can not|only|at most|at least|never|required|"
                              r"requires|deadline|no more than|no later than|limit|not allowed|should not|shouldn't)\b", re.I)),
    ("provisional", re.compile(r"\b(maybe|perhaps|might|i wonder|not sure|possibly|what if|could be|"
                               r"i'm considering|thinking about|probably)\b", re.I)),
    ("idea", re.compile(r"\b(idea|how about|we could|you could|one option|an option|alternatively|consider|"
                        r"i recommend|i suggest|i would recommend|it's worth|it is worth)\b", re.I)),
]
_ASKS_USER = re.compile(r"^(do|does|would|could|can|what|which|how|are|is) (you|your)\b", re.I)
_ACTION_VERB_START = re.compile(r"^(run|install|create|add|configure|set|use|open|make|check|write|update|"
                                r"remove|define|import|call|start|stop|enable|disable)\b", re.I)
def classify(sentence: str, role: str) -> str | None:
    """The category of one sentence from its cues; None for a question that is only rhetorical."""
    if sentence.rstrip().endswith("?"):
        if role == "user" and _CUES[3][1].match(sentence):
            return "provisional"  # "Maybe we could ...?" is an exploratory idea, kept tentative
        return "open-question" if role == "user" or _ASKS_USER.match(sentence) else None
    for category, pattern in _CUES:
        if not pattern.search(sentence):
            continue
        if category == "decision" and role != "user":
            continue  # the assistant proposes; only the user decides
        if category == "action-item" and role == "user" and not pattern.search(sentence[:40]):
            continue
        return category
    if role == "assistant" and _ACTION_VERB_START.match(sentence):
        return "action-item"
    return "fact"


_LETTER_WORD = re.compile(r"[^\W\d_]{2,}", re.UNICODE)


def _is_prose(text: str) -> bool:
    """At least two real words, and mostly words rather than numbers or symbols."""
    tokens = text.split()
    wordy = sum(1 for t in tokens if _LETTER_WORD.search(t))
    return wordy >= 2 and wordy >= 0.6 * len(tokens)


def _hedged(text: str) -> str:
    """Keep an exploratory piece tentative after a split cut off its hedge word."""
    return text if _CUES[3][1].search(text) else "Possibly, " + text[0].lower() + text[1:]


def _units_of(message: Mapping[str, Any]) -> tuple[list[dict], int]:
    role = "user" if message.get("role") == "user" else "assistant"
    units, cuts = [], 0
    for sentence in sentences(str(message.get("text", ""))):
        if _PLEASANTRY.search(sentence) and count_words(sentence) <= 12:
            continue
        category = classify(sentence, role)
        if category is None:
            continue
        limit = 13 if category == "provisional" else 15
        pieces, n = compress(sentence, question=category == "open-question", limit=limit)
        cuts += n
        for piece in pieces:
            if not _is_prose(piece):
                continue  # log lines, numbers, stray symbols: no unit of meaning
            text = _hedged(piece) if category == "provisional" else piece
            if category == "open-question" and not text.endswith("?"):
                category_piece = classify(text, role) or "fact"
            else:
                category_piece = category
            units.append({"text": text, "category": category_piece, "source_ids": [str(message["id"])],
                          "speaker": role, "context": None})
    return units, cuts


def _topics(title: str, messages: list[Mapping[str, Any]]) -> list[dict]:
    """The topic unit: what the conversation is about, from its title."""
    if not messages:
        return []
    first = str(messages[0]["id"])
    speaker = "user" if messages[0].get("role") == "user" else "assistant"
    units = []
    name = " ".join(title.split()[:10]).strip().rstrip(".!?")
    if name and name.lower() != "untitled conversation":
        units.append({"text": finish(f"The conversation is about {name}"), "category": "topic",
                      "source_ids": [first], "speaker": speaker, "context": None})
    return units


def extract_units(variables: Mapping[str, Any]) -> dict:
    """Every sentence-level unit of the window's messages, compressed and categorised."""
    messages = list(variables.get("messages", []))
    units = _topics(str(variables.get("title", "")), messages)
    for message in messages:
        units += _units_of(message)[0]
    return {"units": units}


def truncation_rate(variables: Mapping[str, Any]) -> tuple[int, int]:
    """(hard cuts, units) for a window: how often compression had to cut at 15 words."""
    cuts = total = 0
    for message in variables.get("messages", []):
        units, n = _units_of(message)
        cuts, total = cuts + n, total + len(units)
    return cuts, total


def summarize(variables: Mapping[str, Any]) -> dict:
    """An extractive 200-400 word summary: first sentences of each turn in order, then later ones."""
    messages = list(variables.get("messages", []))
    title = str(variables.get("title", "")).strip() or "Untitled conversation"
    opening = f"Session “{title}”: {len(messages)} turns between the user and the assistant."
    per_turn = [sentences(str(m.get("text", ""))) for m in messages]
    chosen: list[list[str]] = [[] for _ in messages]
    budget = 390 - count_words(opening)
    for depth in range(max((len(s) for s in per_turn), default=0)):
        for i, turn in enumerate(per_turn):
            label = 0 if chosen[i] else 3  # "The assistant:" opens a turn's line
            if depth < len(turn) and budget > label:
                picked = _fit(turn[depth], budget - label)
                chosen[i].append(picked)
                budget -= count_words(picked) + label
        if budget <= 390 - 300:  # about 300 words: a good length, stop adding depth
            break
    lines = [opening]
    for message, picked in zip(messages, chosen):
        if picked:
            who = "The user" if message.get("role") == "user" else "The assistant"
            lines.append(f"{who}: " + " ".join(picked))
    return {"summary": "\n\n".join(lines)}


def _fit(sentence: str, budget: int) -> str:
    """The sentence, or its first ``budget`` words marked as cut."""
    if count_words(sentence) <= budget:
        return sentence
    return " ".join(sentence.split()[:budget]) + " …"


def thread_map(variables: Mapping[str, Any]) -> dict:
    """One step per session from its summary, and the questions still open."""
    steps, questions = [], []
    for session in variables.get("sessions", []):
        summary = str(session.get("summary", ""))
        body = [s for s in sentences(summary) if not s.startswith("Session “")]
        first = (body[0] if body else session.get("title", "")) or "Session held."
        words = first.split()
        step = " ".join(words[:25]) if count_words(first) > 25 else first
        steps.append({"session_id": str(session.get("id")), "step": step})
        questions += [s for s in body if s.endswith("?")]
    return {"title": str(variables.get("title", "Line of work")) or "Line of work", "steps": steps,
            "open_questions": list(dict.fromkeys(questions))[:8]}
