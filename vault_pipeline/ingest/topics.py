"""Subjects that span chats: one ``topic/<subject>`` tag and one hub per subject several conversations share.

A conversation's title names what it is about ("Django Multi-DB Setup", "GitHub Actions for
Django"); one title alone is no topic a tag pane or graph view can group by. A subject is a
title word (or a two-word phrase whose words always stand together: "Google Cloud", "Track &
Trace") that at least ``MIN_CHATS`` titles of the vault hold, and that is a thing rather than a
doing: the tagger's lexicon does not know it as a verb, adjective or adverb, and it is none of
the generic words of a request ("summary", "usage", "uitleg"). A conversation's subjects are at
most ``MAX_SUBJECTS`` of its title's: names first (words the lexicon does not know as common words:
"django", "gcp"), then the most shared. Counting runs over the titles of the conversations being
ingested and of the sessions already in the vault, so a partial ingest finds the same subjects;
a subject whose hub is already in the vault keeps that hub's name ("Gardens" stays "Gardens" when a
later chat writes "garden"), so a subject has one hub, one tag, whichever ingest came first.
(docs/decisions/0146-subjects-across-chats.md)
"""

from __future__ import annotations

import itertools
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from vault_pipeline.errors import VaultError
from vault_pipeline.ingest.parse import Conversation
from vault_pipeline.text import TITLE_STOPWORDS, normalise_text
from vault_pipeline.vault.files import Vault

SESSIONS = "sessions"
HUBS = "topics"
MIN_CHATS = 2  # a subject gathers at least this many conversations
MAX_SUBJECTS = 3  # tags a conversation's notes carry at most
MIN_MENTIONS = 2  # a subject named this often in a conversation's user turns is one of its subjects
# Words of a request, not its subject (English and Dutch), and titles the export makes up.
GENERIC = frozenset(
    "summary summaries usage creation conversion recommendation recommendations suggestion suggestions practice "
    "practices list find step steps way ways tool tools thing things type types work working option options "
    "benefit benefits challenge difference differences comparison idea ideas information info basic basics "
    "general simple quick short long text code question answer test testing prompt script function method "
    "implementation solution approach version update setup config configuration support task tasks time "
    "uitleg vraag vragen tekst lijst manier overzicht advies tips voorbeeld voorbeelden verschil niet lezen "
    "mogelijk maken gebruik samenvatting configure mcqs".split()
)
_UNTITLED = frozenset({"new chat", "untitled", "untitled conversation", "nieuwe chat"})
_DOINGS = frozenset({"VB", "VBD", "VBG", "VBN", "VBP", "VBZ", "JJ", "JJR", "JJS", "RB", "RBR", "RBS", "MD", "CD"})


@lru_cache(maxsize=1)
def _lexicon() -> Any:
    from textblob.en import lexicon  # the tagger's word list, imported on first use

    return lexicon


def _word(raw: str) -> str:
    """A title word as counted: lower case, a plural "s" folded on longer words."""
    return raw[:-1] if raw.endswith("s") and len(raw) > 4 and not raw.endswith("ss") else raw


def title_words(title: str) -> list[str]:
    """A title's content words in order (stop words, numbers and one- or two-letter words left out)."""
    if " ".join(title.lower().split()) in _UNTITLED:
        return []
    words = (_word(w) for w in normalise_text(title).split())
    return [w for w in words if len(w) > 2 and not w.isdigit() and w not in TITLE_STOPWORDS]


def is_thing(word: str) -> bool:
    """A word that can be a subject: no verb, adjective or adverb to the lexicon, no generic request word."""
    return word not in GENERIC and _lexicon().get(word) not in _DOINGS


def is_name(word: str) -> bool:
    """A word the lexicon does not know as a common lower-case word ("django", "gcp", "oscar")."""
    return _lexicon().get(word) is None or _lexicon().get(word.capitalize()) == "NNP"


@dataclass
class Subjects:
    """The subjects of a set of titles, and how each is written (its most frequent spelling)."""

    counts: Counter = field(default_factory=Counter)  # subject key -> titles holding it
    spelling: dict[str, Counter] = field(default_factory=dict)
    written: dict[str, str] = field(default_factory=dict)  # subject key -> name of its hub in the vault

    @classmethod
    def of(cls, titles: Iterable[str]) -> Subjects:
        """Count the subject candidates of ``titles`` (each title once)."""
        subjects = cls()
        for title in titles:
            subjects.add(title)
        return subjects

    def add(self, title: str) -> None:
        """Count one title's words and adjacent word pairs."""
        words = title_words(title)
        keys = set(words) | {f"{a} {b}" for a, b in itertools.pairwise(words)}
        self.counts.update(keys)
        for raw in re.findall(r"[\w-]+(?=['’]s\b)|[\w'-]+", title):
            key = _word(normalise_text(raw))
            if key in keys:
                self.spelling.setdefault(key, Counter())[raw] += 1

    def of_title(self, title: str) -> list[str]:
        """A title's subjects (keys), at most ``MAX_SUBJECTS``: names first, then the most shared."""
        words = title_words(title)
        pairs = [f"{a} {b}" for a, b in itertools.pairwise(words) if self._phrase(a, b)]
        inside = {w for p in pairs for w in p.split()}
        single = [w for w in dict.fromkeys(words) if w not in inside and self._shared(w) and is_thing(w)]
        ranked = sorted(single, key=lambda w: (not is_name(w), -self.counts[w], words.index(w)))
        return list(dict.fromkeys(pairs + ranked))[:MAX_SUBJECTS]

    def of_conversation(self, title: str, named: Sequence[str] = ()) -> list[str]:
        """A conversation's subjects: its title's, then subjects among the names its user turns
        say often (``mentioned``: "Oscar for Rental Webshop" whose asks are about Django); at most
        ``MAX_SUBJECTS``."""
        found = self.of_title(title)
        more = [k for k in named if k not in found and self._shared(k)]
        return (found + more)[:MAX_SUBJECTS]

    def _shared(self, key: str) -> bool:
        return self.counts[key] >= MIN_CHATS

    def _phrase(self, a: str, b: str) -> bool:
        """Two words that stand together in every title holding either ("google cloud", "track trace")."""
        together = self.counts[f"{a} {b}"]
        return together >= MIN_CHATS and together == self.counts[a] == self.counts[b] and is_thing(b)

    def name(self, key: str) -> str:
        """How a subject is shown: its hub's name when the vault has one, else each word in its most
        frequent spelling ("GitHub", "Google Cloud")."""
        if key in self.written:
            return self.written[key]
        shown = " ".join(self._spelled(w) for w in key.split())
        return shown[:1].upper() + shown[1:]

    def _spelled(self, word: str) -> str:
        seen = self.spelling.get(word)
        if not seen:
            return word
        return max(seen.items(), key=lambda p: (p[1], p[0] != p[0].lower(), p[0]))[0]


def mentioned(user_texts: Iterable[str]) -> tuple[str, ...]:
    """The names a conversation's user turns say at least ``MIN_MENTIONS`` times, most said first:
    words the lexicon does not know ("django", "gcp"), all a subject needs of the turns (kept
    instead of the text)."""
    said = Counter(_word(w) for text in user_texts for w in normalise_text(text).split())
    return tuple(
        w for w, n in said.most_common() if n >= MIN_MENTIONS and len(w) > 2 and not w.isdigit() and _unknown(w)
    )


def _unknown(word: str) -> bool:
    return word not in TITLE_STOPWORDS and word not in GENERIC and _lexicon().get(word) is None


def assign(subjects: Subjects, chats: Mapping[str, tuple[str, Sequence[str]]]) -> dict[str, list[str]]:
    """Per conversation (id -> (title, ``mentioned`` names)): its subjects as shown, only subjects
    that end up gathering at least ``MIN_CHATS`` of them (a phrase can take a word's place in some
    titles)."""
    keys = {cid: subjects.of_conversation(title, named) for cid, (title, named) in chats.items()}
    gathered = Counter(k for found in keys.values() for k in found)
    return {cid: [subjects.name(k) for k in found if gathered[k] >= MIN_CHATS] for cid, found in keys.items()}


def plan_subjects(vault: Vault, conversations: Iterable[Conversation]) -> dict[str, list[str]]:
    """The subjects of each conversation about to be ingested (id -> names as shown), counted over
    their titles and those of the sessions already in the vault (so a partial ingest tags as a full
    one does). Only titles and a few names per conversation are kept, never its text."""
    chats: dict[str, tuple[str, Sequence[str]]] = {}
    for conv in conversations:
        if conv.titled:
            chats[conv.id] = (conv.title, mentioned(m.text for m in conv.messages if m.role == "user"))
    ingesting = set(chats)
    hubs: dict[str, str] = {}
    for title, conversation in _vault_sessions(vault, hubs):
        chats.setdefault(conversation, (title, ()))
    subjects = Subjects.of(title for title, _ in chats.values())
    subjects.written = hubs
    return {cid: found for cid, found in assign(subjects, chats).items() if cid in ingesting}


def _vault_sessions(vault: Vault, hubs: dict[str, str]) -> Iterable[tuple[str, str]]:
    """(title, conversation id) of the session notes in the vault; ``hubs`` gets each topic hub's
    name by its subject key."""
    for relpath in vault.iter_note_paths():
        if not relpath.startswith((SESSIONS + "/", HUBS + "/")):
            continue
        try:
            fm, body, _ = vault.read(relpath)
        except VaultError:
            continue  # unreadable: the index warns about it
        if fm.get("type") == "topic":
            name = _hub_name(fm, body)
            if name:
                hubs.setdefault(subject_key(name), name)
        elif fm.get("type") == "session" and fm.get("source_title") and fm.get("source_conversation"):
            yield str(fm["source_title"]), str(fm["source_conversation"])


def subject_key(name: str) -> str:
    """The key a subject's shown name counts under (``Subjects.add``): "Gardens" -> "garden"."""
    return " ".join(_word(w) for w in normalise_text(name).split())


def _hub_name(fm: Mapping[str, Any], body: str) -> str:
    """A topic hub's name, read back from its heading ("" when that is not the name its id was made of)."""
    from vault_pipeline.ingest.notes import topic_id

    first = body.lstrip().split("\n", 1)[0]
    if not first.startswith("# "):
        return ""
    name = re.sub(r"\\(.)", r"\1", first[2:].strip())  # heading_text's escapes undone
    return name if topic_id(name) == fm.get("id") else ""
