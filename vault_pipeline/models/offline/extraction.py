"""Offline extraction, summaries and thread maps: deterministic rules, no model.

The offline extractor selects, it does not rewrite: a note's sentence is a sentence (or a whole
clause) of its message in the message's own words, with the structure it came from (a list's
lead-in, a heading, the sentence a pointing word refers to, a condition) as its context
(``statements.py``). Each candidate gets a category from its cues; which candidates become notes
is the ingest stage's fitted selector's call (``ingest/select.py``). Decisions come only from
the user's turns. Rewriting and compressing is what a real model does on the model path.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from vault_pipeline.models.offline.statements import points_back, read_message, sentences
from vault_pipeline.text import FUNCTION_WORDS, PLEASANTRY, head_words, sentence_count, split_sentences, word_count

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
# A requirement written as one: a spec's labels (Feature:, FR2.4:, a checklist box), a user story, "shall".
_REQUIREMENT = re.compile(
    r"^(?:feature|requirement|(?:n?fr|req)[\s-]?\d[\d.]*|acceptance criteri\w*)\b[^:]{0,20}:|^\[[ xX]\]\s"
    r"|^as an? [\w -]{2,30}, i (?:want|need)\b|\b(?:shall|must be able to)\b",
    re.I,
)
# A list standing under one of these holds requirements too.
_REQUIREMENT_FRAME = re.compile(
    r"\b(?:definition of done|requirements?|user stor(?:y|ies)|acceptance criteria|eisen|randvoorwaarden)\b", re.I
)


def classify(sentence: str, role: str, context: str | None = None) -> str | None:
    """The category of one sentence from its cues (and its context's: a list under "Definition of
    Done" holds requirements); None for an assistant question that asks nothing."""
    asks = sentence.rstrip("\"'”’)]").endswith("?")
    if _REQUIREMENT.search(sentence) or (context and _REQUIREMENT_FRAME.search(context)):
        return "open-question" if asks else "constraint"
    if asks:
        return "open-question" if role == "user" or _ASKS_USER.match(sentence) else None
    if _HEDGE.search(sentence):
        return "provisional"
    return _statement_category(sentence, role)


def _statement_category(sentence: str, role: str) -> str:
    """The category of a statement that is no requirement, question or hedge: the user's decision or
    to-do, the assistant's instruction, a limit, an idea, else a fact."""
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


# What the extraction validator reads as Markdown inside a sentence (code fences, bold, strike, links).
_INLINE_MARKUP = re.compile(r"```|(\*\*|~~)(?=\S)[^*~]+?(?<=\S)\1|\]\(")


def _one_sentence(name: str) -> str:
    """A title as one clause of the topic sentence: titles are data, so "What is Terraform? And Pulumi"
    or "Release v1.2. Notes" must not read as the extractor's own two sentences (its check refuses those)."""
    parts = split_sentences(name)
    if len(parts) <= 1:
        return name
    return "; ".join(part.strip().rstrip(".!?") for part in parts if part.strip())


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
    name = _one_sentence(name)
    if sentence_count(f"{lead} {name}.") != 1 or _INLINE_MARKUP.search(name):
        return []  # a title the unit's own checks would still read as markup or two sentences: no topic
    speaker = "user" if messages[0].get("role") == "user" else "assistant"
    return [
        {
            "text": f"{lead} {name}.",
            "category": "topic",
            "source_ids": [first],
            "speaker": speaker,
            "context": None,
        }
    ]


def extract_units(variables: Mapping[str, Any]) -> dict:
    """Every candidate statement of the window's messages, verbatim, with its context and category.

    ``skipped`` counts the sentences no clause of which fits ``max_verbatim_words`` (they stay in
    the transcript; the ingest report shows the total)."""
    messages = list(variables.get("messages", []))
    limits = int(variables["max_verbatim_words"]), int(variables["max_verbatim_context_words"])
    title = str(variables.get("title", "")) if variables.get("titled", True) else ""  # a made-up title says nothing
    units = _topics(title, messages, int(variables.get("part", 1)), int(variables["max_words"]))
    skipped = 0
    for message in messages:
        found, n = statement_units(message, *limits)
        units, skipped = units + found, skipped + n
    return {"units": units, "skipped": skipped}


SUMMARY_BUDGET = 390  # words; the validator allows 400
SENTENCE_CAP = 25  # a long sentence enters a crowded summary cut to this many words


def summarize(variables: Mapping[str, Any]) -> dict:
    """An extractive summary: a title line, then the user's asks and the assistant's points in turn order.

    A session that fits is given whole. A longer one fills the budget breadth-first: first
    sentences before second ones, user turns before assistant turns, turns spread evenly over
    the session, pleasantries last.
    """
    messages = continued(list(variables.get("messages", [])))
    turns = [("user" if m.get("role") == "user" else "assistant", sentences(str(m.get("text", "")))) for m in messages]
    labels = [_speaker_label(m, role) for m, (role, _) in zip(messages, turns)]  # named people keep their names
    opening = _opening(str(variables.get("title", "")), len(messages), labels)
    chosen = _fill(turns, SUMMARY_BUDGET - word_count(opening))
    lines = [opening] + [f"{label}: " + " ".join(picked) for label, picked in zip(labels, chosen) if picked]
    return {"summary": "\n\n".join(lines)}


# A user turn that only asks the assistant to go on: ChatGPT cut its answer, the next one finishes it.
_CONTINUE = re.compile(
    r"^\W*(?:please\s+)?(?:continue|go on|keep going|carry on|ga door|ga verder|verder|doorgaan)\W*(?:please)?\W*$",
    re.I,
)


def continued(messages: list[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Messages with every "continue" split healed: the user's "continue" left out and the answer
    that finishes the cut one joined to it, so a summary never opens a turn mid-sentence
    ("Assistant: tag to prevent overwriting.")."""
    out: list[Mapping[str, Any]] = []
    heal = False
    for n, message in enumerate(messages):
        nxt = messages[n + 1] if n + 1 < len(messages) else None
        if _is_continue(message) and out and out[-1].get("role") != "user" and nxt and nxt.get("role") != "user":
            heal = True  # the "continue" itself: left out, the next answer joins the cut one
            continue
        if heal:
            out[-1] = {
                **out[-1],
                "text": f"{str(out[-1].get('text', '')).rstrip()} {str(message.get('text', '')).lstrip()}",
            }
            heal = False
            continue
        out.append(message)
    return out


def _is_continue(message: Mapping[str, Any]) -> bool:
    return message.get("role") == "user" and bool(_CONTINUE.match(str(message.get("text", ""))))


def _opening(title: str, turns: int, labels: list[str]) -> str:
    """The summary's title line: the session's title (at most 20 words), its turns and who spoke."""
    title = " ".join(title.split()[:20]) or "Untitled conversation"
    return f"Session “{title}”: {turns} turns {_between(labels) or 'between the user and the assistant'}."


def _between(labels: list[str]) -> str:
    """Who spoke, for the title line: "between Caroline and Melanie", "by Caroline", or "" for roles only."""
    people = list(dict.fromkeys(label if label not in _ROLE_LABELS else f"the {label.lower()}" for label in labels))
    named = [p for p in people if not p.startswith("the ")]
    return "between " + " and ".join(people) if len(people) > 1 else f"by {named[0]}" if named else ""


def _fill(turns: list[tuple[str, list[str]]], budget: int) -> list[list[str]]:
    """Each turn's sentences in the summary: all of them when the session fits the budget (a label
    each), else the greedy selection."""
    whole = sum(word_count(s) for _, ss in turns for s in ss) + sum(1 for _, ss in turns if ss)
    return [list(ss) for _, ss in turns] if whole <= budget else _select(turns, budget)


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
            (bool(PLEASANTRY.search(s)) or not _is_prose(s), depth, spread[i // 2], i, depth)
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
    if sum(map(len, picked.values())) == len(candidates):
        _widen(turns, picked, budget)
    return [[picked[i][d] for d in sorted(picked[i])] if i in picked else [] for i in range(len(turns))]


def _widen(turns: list[tuple[str, list[str]]], picked: dict[int, dict[int, str]], budget: int) -> None:
    """Every sentence was picked and words are left: the cut ones take them, in turn order. A session of
    a few very long sentences (a run of numbers, a pasted log line) still fills its summary, which the
    summary's check asks of a session with that many words."""
    for i in sorted(picked):
        for depth, text in sorted(picked[i].items()):
            whole = turns[i][1][depth]
            if budget < 3 or text == whole:
                continue
            wider = _fit(whole, SENTENCE_CAP + budget - 1)
            budget -= word_count(wider) - word_count(text)
            picked[i][depth] = wider


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
    """One step per session (its title and first ask, at most 25 words), and the questions the user
    left: a question the assistant asked (a quiz item, "Which of the following ...?") or a quiz
    option is no open question of the user's."""
    steps, questions = [], []
    for session in variables.get("sessions", []):
        body, asked = _summary_turns(str(session.get("summary", "")))
        title = str(session.get("title", "")).strip()
        lead = next((s for s in body if word_count(s) >= 3), "")
        step = f"{title}: {lead}" if title and lead else (title or lead or "Session held.")
        steps.append({"session_id": str(session.get("id")), "step": _fit(step, 25)})
        questions += asked
    return {
        "title": str(variables.get("title", "")).strip() or "Line of work",
        "steps": steps,
        "open_questions": list(dict.fromkeys(questions)),
    }


def _summary_turns(summary: str) -> tuple[list[str], list[str]]:
    """A summary's sentences (its title line left out), and the questions of its user turns that
    ask something (no quiz option, no "Which of the following ...?")."""
    body, asked = [], []
    for turn in (p.strip() for p in summary.split("\n\n") if p.strip()):
        said = [s for s in sentences(_LABEL.sub("", turn)) if not s.startswith("Session “")]
        body += said
        if re.match(r"^(?:The )?user\s*:", turn, re.I) or not _LABEL.match(turn):
            asked += [s for s in said if s.endswith("?") and not _OPTION_ITEM.match(s) and not _QUIZ.search(s)]
    return body, asked


# A question that tests the reader rather than asks something: "Which of the following ...?".
_QUIZ = re.compile(r"\b(?:which of the following|welke van de volgende|true or false|juist of onjuist)\b", re.I)


# --------------------------------------------------------------------------- statements as units

MIN_WORDS = 5  # fewer words say too little to find again (labelled: 3 % of them were good notes)
_ENDED = re.compile(r"[.!?][\"'”’)\]]*$")
# One alternative of a multiple-choice list ("B. Support Vector Machine", "c) To reduce error"), or its key.
_OPTION_ITEM = re.compile(r"^\(?[A-Ea-e][.):]\s|^(?:correct )?(?:answer|antwoord)\s*(?::\s*)?\(?[A-Ea-e]\b", re.I)
# Program output pasted as text: build steps, timestamps, log levels, prompts, stack frames, file:line.
_LOG = re.compile(
    r"^(?:#\d+\s|\d+(?:\.\d+)?\s+\d+\.\d+\s|\[?\d{4}-\d{2}-\d{2}[T ]\d{1,2}:\d{2}|\[?\d{1,2}:\d{2}:\d{2}\b|"
    r"\[(?:[A-Z]+|\d+/\d+|[\w.-]+:\d+)\]|step \d+/\d+\b|-{1,3}>\s|(?-i:(?:DEBUG|INFO|WARN|WARNING|ERROR|FATAL|CRITICAL|"
    r"TRACE)\b[:\] ])|npm (?:ERR|WARN)!|\$\s|>>>\s|PS [A-Z]:\\|[A-Z]:\\[^ ]*[>:]|traceback \(most recent|"
    r"file \"[^\"]+\", line \d+|(?:[a-z]:)?[\\/]?[\w.\\/-]+:\d+(?::\d+)?:\s)",
    re.I,
)


def _stands(s: Any, max_context_words: int) -> bool:
    """Whether a statement can be a note at all: a sentence (it ends as one) of a few words, not a
    quiz option or program output, a list item only under its lead-in or heading, and not pointing
    back at a sentence it does not have beside it as context."""
    return (
        word_count(s.text) >= MIN_WORDS
        and _ENDED.search(s.text) is not None
        and not _OPTION_ITEM.match(s.text)
        and not _LOG.match(s.text)
        and _last_word(s.text) not in FUNCTION_WORDS  # "... and." lost its end in its source already
        # A list item needs its lead-in or heading, the user's too: a lone item is mostly pasted slides
        # or notes whose subject stands elsewhere, and it is not a note whole without it.
        and (s.kind != "item" or s.lead is not None or s.heading is not None)
        and (not s.points_back or _resolvable(s.before, max_context_words))
    )


def _last_word(text: str) -> str:
    words = text.rstrip(".!?…\"'”’)] ").split()
    return words[-1].lower().rstrip(".,;:") if words else ""


def _resolvable(before: str | None, max_context_words: int) -> bool:
    """Whether the sentence a pointing opener refers to can be its context: there, short enough, and
    not pointing back itself."""
    return before is not None and word_count(before) <= max_context_words and not points_back(before)


def statement_units(message: Mapping[str, Any], max_words: int, max_context_words: int) -> tuple[list[dict], int]:
    """Every candidate statement of one message as a unit (verbatim, with its context and category),
    and how many sentences no clause of which fits ``max_words``."""
    role = "user" if message.get("role") == "user" else "assistant"
    reading = read_message(str(message.get("text", "")), max_words, max_context_words, lead_ins=role == "user")
    units = []
    for s in reading.statements:
        if role == "user" and not _ENDED.search(s.text):
            s = replace(s, text=f"{s.text.rstrip(',;:')}.")  # people often end a line without a full stop
        if not _is_prose(s.text) or not _stands(s, max_context_words):
            continue
        context = s.full_context(max_context_words)
        category = classify(s.text, role, context)
        if category is None:
            continue
        units.append(
            {
                "text": s.text,
                "category": category,
                "source_ids": [str(message["id"])],
                "speaker": role,
                "context": context,
            }
        )
    return units, reading.long
