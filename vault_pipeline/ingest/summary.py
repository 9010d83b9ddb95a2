"""A session note's summary when no model wrote one: what the session was about and what was established.

The offline extractor's own summary (``models/offline/extraction.summarize``) quotes the opening
sentences of every turn, so a long session read as its transcript cut short, and a cut answer
(ChatGPT's "continue") as a line opening mid-sentence. Once the selector has chosen a session's
notes, this summary says instead, each as a whole sentence of the session's own words:

- its subjects (``ingest/topics.py``), on the title line;
- per speaker, what the user asked (the opening ask, then later asks spread over the session) and
  the statements of theirs the selector wrote as notes;
- the other side's sentences written as notes (facts, decisions), or, when none was, the first
  whole sentence of its first answer.

Messages are healed first: a "continue" and the answer it asked for join the cut answer, and
consecutive messages of one speaker are one turn, so nothing is taken from a piece that opens
mid-sentence. A sentence is taken only when it starts a sentence of its healed turn, ends as one,
is prose (no code, log line, quiz option or lead-in to a list) and is short. Deterministic.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from vault_pipeline.ingest.extract import AtomicUnit
from vault_pipeline.ingest.parse import Conversation, Message
from vault_pipeline.models.offline.statements import points_back, sentences
from vault_pipeline.text import FUNCTION_WORDS, PLEASANTRY, normalise_text, word_count

ASK_WORDS = 40  # a sentence longer than this is no short line of a summary
NOTE_WORDS = 30
USER_BUDGET, OTHER_BUDGET = 120, 80  # words per side; the title line comes on top
MAX_NOTES = 5  # of one speaker's notes, the best by the selector's score

_ENDS = re.compile(r"[.!?][\"'”’)\]]*$")
_OPEN_END = re.compile(r"[,;:(\[{–—-]\s*$|\w$")  # a message that stops where a sentence goes on
_CONTINUE = re.compile(
    r"^\W*(?:please\s+)?(?:continue|go on|keep going|carry on|ga door|ga verder|verder|doorgaan)\W*(?:please)?\W*$",
    re.I,
)
# Program output, a quiz option, a path prompt: no line of a summary.
_NOT_SAID = re.compile(
    r"^\(?[A-Ea-e][.):]\s|^(?:correct )?(?:answer|antwoord)\b|^[A-Z]:\\|^\$\s|^>>>\s|traceback \(most recent|"
    r"\w->\w|::\w+\(|\)\s*=>|\{[{%$]|</?[a-z][\w-]*[ >]",
    re.I,
)
_WORDY = re.compile(r"[^\W\d_]{2,}")


@dataclass
class Turn:
    """One speaker's healed turn: the ids of the messages it joins and their text."""

    label: str
    role: str
    ids: list[str] = field(default_factory=list)
    text: str = ""
    _read: tuple[str, list[str], list[str], int] | None = None  # text, sentences, their keys, words

    def _reading(self) -> tuple[str, list[str], list[str], int]:
        """The turn read once (again only if healing changed its text)."""
        if self._read is None or self._read[0] != self.text:
            said = sentences(self.text)
            self._read = (self.text, said, [normalise_text(s) for s in said], word_count(self.text))
        return self._read

    def said(self) -> list[str]:
        return self._reading()[1]

    def keys(self) -> list[str]:
        """Its sentences normalised (``text.normalise_text``), to find a note's place among them."""
        return self._reading()[2]

    def words(self) -> int:
        return self._reading()[3]


def healed(messages: Sequence[Message]) -> list[Turn]:
    """Turns with every split healed: a user's "continue" between two answers is left out and the
    answers joined, and consecutive messages of one speaker are one turn (a cut answer and the one
    finishing it are joined with a space, so the sentence they share is whole again)."""
    turns: list[Turn] = []
    for n, message in enumerate(messages):
        label = speaker_label(message)
        before, after = (turns[-1] if turns else None), (messages[n + 1] if n + 1 < len(messages) else None)
        if (
            message.role == "user"
            and _CONTINUE.match(message.text)
            and before is not None
            and before.role != "user"
            and after is not None
            and after.role != "user"
        ):
            before.ids.append(message.id)  # the "continue" belongs to the answer it asked for
            continue
        if before is not None and before.label == label and before.role == message.role:
            glue = (
                " " if _OPEN_END.search(before.text.rstrip()) and not before.text.rstrip().endswith("```") else "\n\n"
            )
            before.text = f"{before.text.rstrip()}{glue}{message.text.lstrip()}"
            before.ids.append(message.id)
            continue
        turns.append(Turn(label, message.role, [message.id], message.text))
    return turns


_ROLES = ("user", "assistant")


def speaker_label(message: Message) -> str:
    """The speaker's name ('Caroline') when the export names people, else 'User' / 'Assistant'."""
    role = "user" if message.role == "user" else "assistant"
    name = " ".join(str(message.speaker or "").split()).strip("*_:")
    if name and name.lower() not in (role, "user", "assistant", "speaker", "human", "ai", "bot"):
        return name
    return role.capitalize()


def whole(sentence: str, limit: int = ASK_WORDS) -> bool:
    """Whether a sentence can stand as a summary's line: prose that ends as a sentence, is no lead-in
    to a list, no code or program output, no pleasantry, and at most ``limit`` words."""
    tokens = sentence.split()
    wordy = sum(1 for t in tokens if _WORDY.search(t))
    return (
        _short_enough(sentence, limit)
        and wordy >= 0.6 * len(tokens)
        and _ENDS.search(sentence) is not None
        and "…" not in sentence
        and not _NOT_SAID.search(sentence)
        and not _pleasantry(sentence)
        and _last_word(sentence) not in FUNCTION_WORDS
        and sum(sentence.count(c) for c in "{}<>;=$|`") <= 2
    )


# "OK, I'll stay at 70 percent for the next four bakes." opens as a pleasantry does, and decides.
_DECIDES = re.compile(r"^(?:ok|okay|sure|great|good|right|so|then|fine)\b[,!.]?\s+(?:i|we|let's|let us|ik|we)\b", re.I)


def _pleasantry(sentence: str) -> bool:
    return bool(PLEASANTRY.search(sentence)) and not _DECIDES.match(sentence)


def _short_enough(sentence: str, limit: int) -> bool:
    """Four to ``limit`` words; a question of three says enough ("What is Flutter?")."""
    n = word_count(sentence)
    return 4 <= n <= limit or (n == 3 and sentence.endswith("?"))


def _last_word(text: str) -> str:
    words = text.rstrip(".!?…\"'”’)] ").split()
    return words[-1].lower().rstrip(".,;:") if words else ""


def _ended(sentence: str, turn_text: str) -> str:
    """A user's line that is their whole message but lacks a full stop ("Define a python class for
    a path") gets one; any other sentence is as it was written."""
    if _ENDS.search(sentence) or normalise_text(sentence) != normalise_text(turn_text):
        return sentence
    return sentence.rstrip(",;") + "."


def _small_talk(turn: Turn) -> bool:
    """A turn of greetings and pleasantries only ("Hi! How are you today?")."""
    said = turn.said()
    return not said or all(_pleasantry(s) or _GREETING.search(s) for s in said)


_GREETING = re.compile(
    r"^(?:hi|hello|hey|hallo|hoi|good (?:morning|afternoon|evening)|goedemorgen|goedemiddag)\b"
    r"|^how are you\b|^hoe gaat het\b|^(?:thanks|thank you|bedankt|dank je)\b",
    re.I,
)


PASTED_WORDS = 120  # a user turn longer than this is mostly pasted material (slides, a CV, a log)
_FIRST_PERSON = re.compile(
    r"\b(?:i(?![.\w])|i'm|i'll|i've|i'd|me|my|we|we're|we'll|our|us|ik|mijn|me|wij|we|ons|onze)\b", re.I
)
_REQUEST = re.compile(r"^(?:please|can you|could you|would you|kun je|kunt u|wil je|graag)\b", re.I)
_POINTING_END = frozenset(
    "is are was this these that follows following below here zijn dit deze volgt volgende".split()
)


def _pasted(turn: Turn) -> bool:
    return turn.role == "user" and turn.words() > PASTED_WORDS


def _own_words(sentence: str, turn: Turn, first: bool = False) -> bool:
    """Whether a sentence of a user turn is the user's own rather than what they pasted: any
    sentence of a short turn; of a long one, a question, a request, one in the first person, or
    (``first``) the session's opening sentence, which states the task."""
    return (
        not _pasted(turn)
        or first
        or sentence.endswith("?")
        or bool(_FIRST_PERSON.search(sentence))
        or bool(_REQUEST.match(sentence))
    )


def _lead(sentence: str) -> str | None:
    """The ask before a colon that opens pasted material ("I will give you part of my CV, please
    respond with 2-3 suggestions: My CV: ..."), ended as a sentence; None when it only points at
    what follows ("The template I want you to convert is:")."""
    head = sentence.split(": ", 1)[0].rstrip(" :")
    if head == sentence or word_count(head) < 6 or _last_word(head) in FUNCTION_WORDS | _POINTING_END:
        return None
    return f"{head}."


def _opens(s: str, turn: Turn, first: bool) -> bool:
    """Whether a sentence can open what a user turn says: whole, no greeting, not pointing back,
    and the user's own words."""
    return whole(s) and not _GREETING.search(s) and not points_back(s) and _own_words(s, turn, first)


def _near(said: Sequence[str], turn: Turn) -> list[int]:
    """Where a turn's own words stand: its first sentences; in a pasted turn also its last two
    (the user writes before or after what they paste)."""
    if not _pasted(turn):
        return list(range(min(3, len(said))))
    return list(dict.fromkeys([*range(min(2, len(said))), *range(max(0, len(said) - 2), len(said))]))


def _asks(i: int, turn: Turn, opening: bool = False) -> list[Line]:
    """What user turn ``i`` asks or says first: its first whole sentence, and its first question
    when that comes later (both when short). Of the session's opening turn also its ask when it
    ends with one ("Bereken de inhoud van dit viervlak."), or the ask before pasted material."""
    said = [_ended(s, turn.text) for s in turn.said()]
    first = next(((i, k, said[k]) for k in _near(said, turn) if _opens(said[k], turn, opening and k == 0)), None)
    if first is None and opening:
        first = _lead_line(i, said)
    question = _question(i, said, turn)
    if question is None and opening and not _pasted(turn):
        question = _closing_ask(i, said)
    return list(dict.fromkeys(line for line in (first, question) if line))


def _question(i: int, said: Sequence[str], turn: Turn) -> Line | None:
    """The turn's first short question of the user's own (among its first six sentences)."""
    return next(
        ((i, k, s) for k, s in enumerate(said[:6]) if s.endswith("?") and whole(s) and _own_words(s, turn)), None
    )


def _lead_line(i: int, said: Sequence[str]) -> Line | None:
    lead = _lead(said[0]) if said else None
    return (i, 0, lead) if lead and whole(lead) else None


def _closing_ask(i: int, said: Sequence[str]) -> Line | None:
    """A task's ask at its end ("Bereken de inhoud van dit viervlak.")."""
    return (i, len(said) - 1, said[-1]) if len(said) > 1 and whole(said[-1]) else None


def _place(text: str, turn: Turn) -> int | None:
    """Which sentence of its healed turn a note's text starts (None: a clause cut from the middle
    of one, or a piece that opened mid-sentence before healing)."""
    key = normalise_text(text.rstrip(".!?"))
    return next((k for k, s in enumerate(turn.keys()) if key and s.startswith(key)), None)


def _spread(indices: Sequence[int]) -> list[int]:
    """The indices in Van der Corput order (first, middle, quarters, ...): a budget that runs out
    has still visited the whole session rather than its beginning."""
    n = len(indices)
    if n <= 2:
        return list(indices)
    order, seen = [indices[0], indices[-1]], {0, n - 1}
    step = n
    while len(seen) < n:
        step = max(1, step // 2)
        for i in range(step, n, step):
            if i not in seen:
                seen.add(i)
                order.append(indices[i])
    return order


Line = tuple[int, int, str]  # (turn, sentence in the turn, the sentence)


def _take(candidates: Iterable[Line], budget: int) -> list[Line]:
    """Candidates (in priority order) within ``budget`` words, each once, back in session order."""
    taken: list[Line] = []
    seen: set[str] = set()
    for i, k, sentence in candidates:
        key = normalise_text(sentence)
        cost = word_count(sentence)
        if cost > budget or any(key.startswith(old) or old.startswith(key) for old in seen):
            continue  # a note cut from a sentence already taken says it again
        seen.add(key)
        taken.append((i, k, sentence))
        budget -= cost
    return sorted(taken)


def session_summary(
    conv: Conversation,
    units: Sequence[AtomicUnit],
    scores: Sequence[float | None] = (),
    subjects: Sequence[str] = (),
) -> str:
    """The summary of a session whose notes are ``units`` (the written ones, ``scores`` the
    selector's probability of each) about ``subjects``: a title line, then one paragraph per
    speaker ("User: ...", "Caroline: ..."), every line a whole sentence of the session."""
    turns = healed(conv.messages)
    noted = _noted(turns, units, scores)
    asked = next((i for i, t in enumerate(turns) if t.role == "user" and not _small_talk(t)), -1)
    paragraphs = []
    for label in dict.fromkeys(t.label for t in turns):
        mine = [i for i, t in enumerate(turns) if t.label == label]
        own = noted.get(label, [])[:MAX_NOTES]
        picked = (
            _user_lines(turns, mine, own) if turns[mine[0]].role == "user" else _other_lines(turns, mine, own, asked)
        )
        if picked:
            paragraphs.append(f"{label}: " + " ".join(s for *_, s in picked))
    return "\n\n".join([_title_line(conv.title, len(turns), [t.label for t in turns], subjects), *paragraphs])


def _noted(turns: Sequence[Turn], units: Sequence[AtomicUnit], scores: Sequence[float | None]) -> dict[str, list[Line]]:
    """Per speaker, the notes written from their turns that can be a summary's line, best score first:
    a whole sentence that opens a sentence of its healed turn, points back at nothing, and is the
    speaker's own words (not pasted material)."""
    where = {mid: i for i, turn in enumerate(turns) for mid in turn.ids}
    judged = [*scores, *[None] * (len(units) - len(scores))]
    noted: dict[str, list[Line]] = {}
    for _, unit in sorted(enumerate(units), key=lambda p: (-(judged[p[0]] or 0.0), p[0])):
        i = where.get(unit.source_ids[0])
        if i is None or unit.category == "topic" or points_back(unit.text) or not whole(unit.text, NOTE_WORDS):
            continue
        k = _place(unit.text, turns[i])
        if k is not None and _own_words(unit.text, turns[i]):
            noted.setdefault(turns[i].label, []).append((i, k, unit.text))
    return noted


def _user_lines(turns: Sequence[Turn], mine: Sequence[int], own: Sequence[Line]) -> list[Line]:
    """A user's lines: their opening ask (small talk left out), their statements written as notes,
    then the first ask of later turns spread over the session."""
    talk = [i for i in mine if not _small_talk(turns[i])]
    opening = _asks(talk[0], turns[talk[0]], opening=True) if talk else []
    later = [line for i in _spread(talk[1:]) for line in _asks(i, turns[i])[:1]]
    return _take([*opening, *own, *later], USER_BUDGET)


def _other_lines(turns: Sequence[Turn], mine: Sequence[int], own: Sequence[Line], asked: int) -> list[Line]:
    """The other side's lines: its sentences written as notes; with fewer than two, also the first
    whole sentence of its answer to the opening ask (not to small talk)."""
    answers = [i for i in mine if i > asked] or list(mine)
    first = [(i, k, s) for i in answers[:1] for k, s in enumerate(turns[i].said()[:4]) if whole(s)][:1]
    return _take([*own, *([] if len(own) >= 2 else first)], OTHER_BUDGET)


def _title_line(title: str, turns: int, labels: Sequence[str], subjects: Sequence[str]) -> str:
    """ "Session “T”: 14 turns between the user and the assistant, about Django and GitHub Actions." """
    title = " ".join(title.split()[:20]) or "Untitled conversation"
    people = list(dict.fromkeys(label if label.lower() not in _ROLES else f"the {label.lower()}" for label in labels))
    named = [p for p in people if not p.startswith("the ")]
    between = "between " + " and ".join(people) if len(people) > 1 else f"by {named[0]}" if named else ""
    about = _listed(list(dict.fromkeys(subjects))[:4])
    line = (
        f"Session “{title}”: {turns} turn{'' if turns == 1 else 's'} {between or 'between the user and the assistant'}"
    )
    return f"{line}, about {about}." if about else f"{line}."


def _listed(names: Sequence[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + f" and {names[-1]}" if names else ""
