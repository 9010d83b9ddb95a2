"""Offline extraction, summaries and thread maps: deterministic rules, no model.

A baseline so the pipeline runs with no key: sentence segmentation, category cues per clause,
compression to the prompt's word limit (``max_words``, ``max_context_words``: the extraction
schema's limits, passed in the prompt variables), decisions only from the user's turns. Real
quality needs a model.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from vault_pipeline.models.offline.text import (
    complete,
    compress_units,
    finish,
    segments,
    sentences,
    unmask,
)
from vault_pipeline.text import PLEASANTRY, head_words, sentence_count, word_count

# The leads of the topic notes: filler the Note Quality Gate refuses to promote.
# Assistant turns that only manage the conversation: offers, sign-posts.
_META = re.compile(
    r"^(would you like|do you want me to|shall i|should i|want me to|if you(?:'d| would) like|"
    r"if you want|i can also|let me|let's (?:break|go through|go over|walk|take a look|look|start|dive)|"
    r"i'll (?:explain|show|walk|provide|give|help|outline|break|go through|write|now)|"
    r"i will (?:explain|show|walk|provide|give|help|outline|break|go through|write|now))\b",
    re.I,
)
# The user talking about the chat itself ("I will give you part of my CV"): no decision.
_USER_META = re.compile(
    r"^(i will|i'll|i am going to|i'm going to|next,? i will|i want you to|you will|now i will)"
    r"\s+(give|provide|send|share|paste|show|tell|ask|upload|copy|post|write|act|describe|"
    r"explain)\b",
    re.I,
)
# A hedge outranks every other cue: PROVISIONAL exists so an exploratory idea is never tightened.
_HEDGE = re.compile(
    r"\b(maybe|perhaps|might|possibly|probably|what if|i wonder|wondering|not sure|unsure|"
    r"i'm considering|i am considering|thinking about|could be|i guess|i suppose)\b"
    r"|(?<!\bwe )(?<!\byou )(?<!\bi )(?<!\bthey )\bcould\b(?! you\b)",
    re.I,
)
# A decision cue opens the sentence, or follows one short lead-in clause ("For the index, we'll use X").
_DECISION = re.compile(
    r"^(?:[^,.?!]{0,60},\s*)?(?:then |so |ok |okay |now |for now |instead )?"
    r"(i'll|i will|we'll|we will|let's|let us|i decided|we decided|i've decided|"
    r"we've decided|going with|go with|i want to use|we chose|i chose|i'm going to|"
    r"we're going to|i choose|we choose|i prefer to use|my choice is|i settled on)\b",
    re.I,
)
_USER_ACTION = re.compile(
    r"^(todo|to do|next step|remember to|please|don't forget|make sure)\b|"
    r"^.{0,30}\b(i need to|we need to|i have to|we have to|i must|we must|i should|we should)\b",
    re.I,
)
_ASSISTANT_ACTION = re.compile(
    r"\b(you should|you need to|you'll need to|you will need to|you must|you have to|"
    r"make sure|remember to|don't forget)\b|^(run|install|create|add|configure|set|use|"
    r"open|make|check|write|update|remove|define|import|start|stop|enable|disable|"
    r"replace|edit|change|click|navigate|select|save|copy|enter)\b",
    re.I,
)
_CONSTRAINT = re.compile(
    r"\b(must|must not|cannot|can't|can not|(?<!not )only|at most|at least|never|required|"
    r"requires|deadline|no more than|no later than|limits?|limited to|not allowed|should not|"
    r"shouldn't|mandatory|maximum|minimum)\b",
    re.I,
)
_IDEA = re.compile(
    r"\b(idea|how about|we could|you could|i could|one option|an option|another option|"
    r"alternatively|consider|i recommend|i suggest|i'd suggest|i would recommend|i'd recommend|"
    r"it's worth|it is worth|a good approach|a better approach)\b",
    re.I,
)
_ASKS_USER = re.compile(
    r"^(do|does|did|are|is|have|has|can|could|what|which|how|where|when|who|will)\b.*"
    r"\b(you|your|you're|you've)\b",
    re.I,
)
_LETTER_WORD = re.compile(r"[^\W\d_]{2,}", re.UNICODE)
_MARKUP = re.compile(r"</?[a-zA-Z][\w-]*(?:\s[^>]*)?/?>|\{[{%$*#/]|\{(?:if|else|foreach|block|include)\b")
# Code pasted without a fence: imports, arrows, $variables, quoted value lists, SQL rows and columns.
_CODE = re.compile(
    r"^[Ff]rom [\w.]+ import\b|\w->\w|\w::\w+\(|\)\s*=>|\$[a-z_]\w*\s*(?:=|\[)|'\s*,\s*'"
    r"|(?-i:\bVALUES\s*\()|\b(?:var)?char\(\d+\)|\b(?:int|integer|bigint|datetime|date|text|decimal|"
    r"boolean|bool)\s+(?:not\s+)?null\b",
    re.I,
)
_LOWER_AFTER_HEDGE = frozenset(
    "the a an this that these those it its it's that's there's here's we we'll you you'll "
    "they there our your their some any each one use add try run make keep if for when "
    "in on with to after before then also another such as by from be".split()
)


def classify(sentence: str, role: str) -> str | None:
    """The category of one sentence from its cues; None for an assistant question that asks nothing."""
    if _HEDGE.search(sentence):
        return "provisional"
    if sentence.rstrip("\"'”’)]").endswith("?"):
        return "open-question" if role == "user" or _ASKS_USER.match(sentence) else None
    if role == "user":
        if _DECISION.search(sentence):
            return "decision"
        if _USER_ACTION.search(sentence):
            return "action-item"
    elif _ASSISTANT_ACTION.search(sentence):
        return "action-item"
    if _CONSTRAINT.search(sentence):
        return "constraint"
    if _IDEA.search(sentence) or (role == "assistant" and _DECISION.search(sentence)):
        return "idea"  # what the assistant proposes is an idea; only the user decides
    return "fact"


def _is_prose(text: str) -> bool:
    """At least two real words, mostly words rather than numbers or symbols, and no markup or template code."""
    tokens = text.split()
    wordy = sum(1 for t in tokens if _LETTER_WORD.search(t))
    if wordy < 2 or wordy < 0.6 * len(tokens) or _MARKUP.search(text) or _CODE.search(text):
        return False
    return sum(text.count(c) for c in "{}<>;=$|") <= 2


def _hedged(text: str) -> str:
    """Keep an exploratory piece tentative after a split cut off its hedge word."""
    if _HEDGE.search(text):
        return text
    first, _, rest = text.partition(" ")
    common = first.lower() in _LOWER_AFTER_HEDGE or (first[1:].islower() and first.lower().endswith("ing"))
    first = first.lower() if common else first  # 'Possibly, having X' but 'Possibly, Django X'
    return f"Possibly, {first} {rest}".rstrip()


def _skip(sentence: str, role: str) -> bool:
    """Pleasantries and conversation management carry no unit of meaning."""
    if PLEASANTRY.search(sentence) and word_count(sentence) <= 12:
        return True
    return (_META if role == "assistant" else _USER_META).match(sentence) is not None


# Segments that are structure, not content: a heading or label, an option of a multiple-choice list,
# program output, a line that only introduces what follows (':'), a bracketed aside.
_NOT_UNITS = frozenset(("heading", "option", "log", "intro", "aside"))
_MARKDOWN_LEFT = re.compile(r"```|\]\(|\*\*|~~")


def _units_of(message: Mapping[str, Any], max_words: int, max_context_words: int) -> tuple[list[dict], int]:
    """The units of one message, each clause categorised on its own; (units, pieces skipped).

    A skipped piece is one that cannot be said in ``max_words`` words without cutting its point.
    """
    role = "user" if message.get("role") == "user" else "assistant"
    units: list[dict] = []
    skipped = 0
    for sentence, kind_of_line in segments(str(message.get("text", ""))):
        if kind_of_line in _NOT_UNITS or not _is_prose(sentence):
            continue  # judged whole, before a split or a dropped bracket hides that it is code
        kind = None if _skip(sentence, role) else classify(sentence, role)
        if kind is None:
            continue
        # A provisional piece keeps room for the "Possibly," a split may have to put back.
        limit = max_words - 2 if kind == "provisional" else max_words
        pieces, n = compress_units(
            sentence, question=kind == "open-question", limit=limit, context_limit=max_context_words
        )
        skipped += n
        hedged = False  # a hedge covers its own clause and the ones after it, not before
        for piece, context in pieces:
            if not _is_prose(piece) or not complete(piece):
                continue  # log lines, numbers, stray symbols, labels of three words: no unit of meaning
            hedged = hedged or (kind == "provisional" and _HEDGE.search(piece) is not None)
            text, category = piece, kind if piece.endswith("?") else classify(piece, role) or "fact"
            if hedged and category != "provisional":
                text, category = _hedged(piece), "provisional"
            text = unmask(text)
            if word_count(text) > max_words or sentence_count(text) != 1 or _MARKDOWN_LEFT.search(text):
                skipped += 1  # a code span that reads as two sentences or carries Markdown: not sayable as one
                continue
            units.append(
                {
                    "text": text,
                    "category": category,
                    "source_ids": [str(message["id"])],
                    "speaker": role,
                    "context": context,
                }
            )
    for u in units:  # a qualifier attached as context is read as written too
        u["context"] = unmask(u["context"]) if u["context"] else None
    return units, skipped


def _topics(title: str, messages: list[Mapping[str, Any]], part: int, max_words: int) -> list[dict]:
    """What the conversation is about, once, in its first part: a sentence from its title, or none.

    No topic is made of words that merely recur: 'Recurring terms here are ...' says nothing.
    """
    if not messages or part != 1:
        return []
    first = str(messages[0]["id"])
    lead = "The conversation is about"
    name = " ".join(head_words(title, min(10, max_words - word_count(lead))).split()).strip().rstrip(".!?")
    if (
        not name
        or name.lower() in ("untitled conversation", "new chat", "untitled")
        or name != " ".join(title.split()).rstrip(".!?")
    ):
        return []  # no title, or one too long to name whole: no topic rather than a cut one
    speaker = "user" if messages[0].get("role") == "user" else "assistant"
    return [
        {
            "text": finish(f"{lead} {name}"),
            "category": "topic",
            "source_ids": [first],
            "speaker": speaker,
            "context": None,
        }
    ]


def extract_units(variables: Mapping[str, Any]) -> dict:
    """Every sentence-level unit of the window's messages, compressed and categorised.

    ``skipped`` counts the pieces that could not be said within ``max_words`` words and were left
    out rather than cut (the ingest report shows the total).
    """
    messages = list(variables.get("messages", []))
    limits = int(variables["max_words"]), int(variables["max_context_words"])
    title = str(variables.get("title", "")) if variables.get("titled", True) else ""  # a made-up title says nothing
    units = _topics(title, messages, int(variables.get("part", 1)), limits[0])
    skipped = 0
    for message in messages:
        found, n = _units_of(message, *limits)
        units, skipped = units + found, skipped + n
    return {"units": units, "skipped": skipped}


def truncation_rate(variables: Mapping[str, Any]) -> tuple[int, int]:
    """(pieces skipped, units) for a window: how often a piece could not be said in ``max_words`` words.

    Nothing is cut any more; a piece that does not fit is skipped, and this is how often.
    """
    skipped = total = 0
    limits = int(variables["max_words"]), int(variables["max_context_words"])
    for message in variables.get("messages", []):
        units, n = _units_of(message, *limits)
        skipped, total = skipped + n, total + len(units)
    return skipped, total


SUMMARY_BUDGET = 390  # words; the validator allows 400
SENTENCE_CAP = 25  # a long sentence enters a crowded summary cut to this many words


def summarize(variables: Mapping[str, Any]) -> dict:
    """An extractive summary: a title line, then the user's asks and the assistant's points in turn order.

    A session that fits is given whole. A longer one fills the budget breadth-first: first
    sentences before second ones, user turns before assistant turns, turns spread evenly over
    the session, pleasantries last.
    """
    messages = list(variables.get("messages", []))
    title = " ".join(str(variables.get("title", "")).split()[:20]) or "Untitled conversation"
    turns = [("user" if m.get("role") == "user" else "assistant", sentences(str(m.get("text", "")))) for m in messages]
    labels = [_speaker_label(m, role) for m, (role, _) in zip(messages, turns)]  # named people keep their names
    people = list(dict.fromkeys(label if label not in _ROLE_LABELS else f"the {label.lower()}" for label in labels))
    named = [p for p in people if not p.startswith("the ")]
    who = "between " + " and ".join(people) if len(people) > 1 else f"by {named[0]}" if named else ""
    opening = f"Session “{title}”: {len(messages)} turns {who or 'between the user and the assistant'}."
    budget = SUMMARY_BUDGET - word_count(opening)
    whole = sum(word_count(s) for _, ss in turns for s in ss) + sum(1 for _, ss in turns if ss)
    chosen = [list(ss) for _, ss in turns] if whole <= budget else _select(turns, budget)
    lines = [opening]
    for label, picked in zip(labels, chosen):
        if picked:
            lines.append(f"{label}: " + " ".join(picked))
    return {"summary": "\n\n".join(lines)}


_ROLE_LABELS = ("User", "Assistant")


def _speaker_label(message: Mapping[str, Any], role: str) -> str:
    """The speaker's name ('Caroline') when the export names people, else 'User' / 'Assistant'."""
    name = " ".join(str(message.get("speaker") or "").split()).strip("*_:")
    if name and name.lower() not in (role, "user", "assistant", "speaker", "human", "ai", "bot"):
        return name
    return role.capitalize()


def _select(turns: list[tuple[str, list[str]]], budget: int) -> list[list[str]]:
    """Greedy fill in priority order; every picked sentence goes back to its place in its turn."""
    pairs = range((len(turns) + 1) // 2)
    spread = {p: rank for rank, p in enumerate(sorted(pairs, key=lambda p: (_bit_reverse(p), p)))}
    candidates = sorted(  # exchanges (a user turn and its answer) spread evenly, the user's ask first
        (
            (_skip(s, role) or not _is_prose(s), depth, spread[i // 2], i, depth)
            for i, (role, ss) in enumerate(turns)
            for depth, s in enumerate(ss)
        )
    )
    picked: dict[int, dict[int, str]] = {}
    for *_, i, depth in candidates:
        text = _fit(turns[i][1][depth], SENTENCE_CAP)
        cost = word_count(text) + (0 if i in picked else 1)  # the "User:" label
        if cost <= budget:
            picked.setdefault(i, {})[depth] = text
            budget -= cost
        if budget < 3:
            break
    return [[picked[i][d] for d in sorted(picked[i])] if i in picked else [] for i in range(len(turns))]


def _bit_reverse(i: int, bits: int = 16) -> int:
    """Van der Corput order: 0, 8, 4, 12, ... visits a long session evenly instead of front first."""
    return int(format(i % (1 << bits), f"0{bits}b")[::-1], 2)


def _fit(sentence: str, limit: int) -> str:
    """The sentence, or its first ``limit`` words marked as cut."""
    if word_count(sentence) <= limit:
        return sentence
    return " ".join(head_words(sentence, limit).split()) + " …"


_LABEL = re.compile(r"^(?:The )?(?:user|assistant)\s*:\s*", re.I)


def thread_map(variables: Mapping[str, Any]) -> dict:
    """One step per session (its title and first ask, at most 25 words), and the questions it left."""
    steps, questions = [], []
    for session in variables.get("sessions", []):
        summary = sentences(str(session.get("summary", "")))
        body = [_LABEL.sub("", s) for s in summary if not s.startswith("Session “")]
        title = str(session.get("title", "")).strip()
        lead = next((s for s in body if word_count(s) >= 3), "")
        step = f"{title}: {lead}" if title and lead else (title or lead or "Session held.")
        steps.append({"session_id": str(session.get("id")), "step": _fit(step, 25)})
        questions += [s for s in body if s.endswith("?")]
    return {
        "title": str(variables.get("title", "")).strip() or "Line of work",
        "steps": steps,
        "open_questions": list(dict.fromkeys(questions)),
    }


# --------------------------------------------------------------------------- selection (verbatim statements)

# A selected statement may be longer than a rewritten one: it is the source's own sentence, never cut.
MAX_SELECTED_WORDS = 25
MAX_SELECTED_CONTEXT_WORDS = 25


MIN_SELECTED_WORDS = 5
_ENDED = re.compile(r"[.!?][\"'”’)\]]*$")
_OPTION_ITEM = re.compile(r"^\(?[A-Ea-e][.)]\s")


def _stands(s: Any) -> bool:
    """Whether a statement can be a note at all: a sentence (it ends as one) of a few words, not a
    quiz option, and not pointing back at a sentence it does not have beside it."""
    return (
        word_count(s.text) >= MIN_SELECTED_WORDS
        and _ENDED.search(s.text) is not None
        and not _OPTION_ITEM.match(s.text)
        and (not s.points_back or _resolvable(s.before))
    )


def _resolvable(before: str | None) -> bool:
    """Whether the sentence a pointing opener refers to can be its context: there, short enough, and
    not pointing back itself."""
    from vault_pipeline.models.offline.statements import points_back

    return before is not None and word_count(before) <= MAX_SELECTED_CONTEXT_WORDS and not points_back(before)


def statement_units(message: Mapping[str, Any]) -> tuple[list[dict], int]:
    """Every candidate statement of one message as a unit (verbatim, with its context and category),
    and how many sentences no clause of which fits the limit."""
    from vault_pipeline.models.offline.statements import read_message

    role = "user" if message.get("role") == "user" else "assistant"
    reading = read_message(str(message.get("text", "")), MAX_SELECTED_WORDS, MAX_SELECTED_CONTEXT_WORDS)
    units = []
    for s in reading.statements:
        if not _is_prose(s.text) or not _stands(s):
            continue
        category = classify(s.text, role)
        if category is None:
            continue
        units.append(
            {
                "text": s.text,
                "category": category,
                "source_ids": [str(message["id"])],
                "speaker": role,
                "context": s.full_context(MAX_SELECTED_CONTEXT_WORDS),
                "verbatim": True,
                "structure": {
                    "kind": s.kind,
                    "clause": s.clause,
                    "lead": s.lead is not None,
                    "heading": s.heading is not None,
                    "label": s.label is not None,
                    "sentence": s.sentence,
                    "sentences": reading.sentences,
                    "depth": s.depth,
                    "code_blocks": reading.code_blocks,
                    "points_back": s.points_back,
                },
            }
        )
    return units, reading.long
