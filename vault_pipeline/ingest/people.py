"""People pages: a hub note per named person, listing what the user said about them and where.

What Obsidian users keep by hand, and what a question about a person across sessions needs ("What
might John's degree be in?"): ``people/<name>.md`` links every session and note that names the
person, with the user's own sentences about them. A person is named conservatively (precision
first; docs/decisions/0145-people-detector.md), in English and Dutch:

* a speaker a transcript or LoCoMo names ("Caroline:"), never a role ("user", "assistant");
* a name after a relation word or a title: "my colleague Jan", "mijn buurman Gerrit", "dr. Adriaan van
  Liempt", "Jan, my colleague";
* a name in a person's place: "Caroline from finance", "ask Marta and Joost", "Marta says", "Dear
  Marja,", "an email to Marja Janssen": only for words the tagger's lexicon does not know as common
  words (so "Python", "Data", "May" and "Thankfully, my son" never pass), spelled like a name (no
  inner capitals: "LanceDB" is no one).

Once named in an ingest, a person's later mentions in user turns and notes link their page too.
The page is a hub (``type: topic``, tagged ``person``), so the funnel treats it as one: its links
are its members, and a prompt that names the person draws on them (``retrieve/hop.py``).
Re-ingesting merges the links and lines the page holds with the new ones, so a second ingest writes
nothing.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable
from functools import lru_cache
from typing import Any

from vault_pipeline.errors import VaultError
from vault_pipeline.ingest.parse import Conversation
from vault_pipeline.ingest.write import IngestReport, existing_links, write_note
from vault_pipeline.models.offline.statements import sentences
from vault_pipeline.vault.files import Vault
from vault_pipeline.vault.format import block_id
from vault_pipeline.vault.note import Note, person_id, person_stem, wikilink

PEOPLE_FOLDER = "people"
# Speaker labels that name a role, not a person.
ROLES = frozenset({"user", "assistant", "system", "tool", "human", "ai", "chatgpt", "claude", "gpt", "bot", "speaker"})
# Capitalised words that are never a person's name, whatever stands before them.
NOT_NAMES = frozenset(
    "i you he she we they it my mijn the a an and or but this that there here then so yes no ok okay hi hello hey "
    "dear thanks monday tuesday wednesday thursday friday saturday sunday january february march april may june "
    "july august september october november december maandag dinsdag woensdag donderdag vrijdag zaterdag zondag "
    "english dutch german french spanish nederlands engels duits frans python java javascript google microsoft "
    "apple amazon linux windows mac github docker django flask react excel word ik jij je hij zij ze wij we "
    "jullie u het dit dat deze die er waarom wat hoe wie waar wanneer beste hallo hoi goedemorgen".split()
)
_RELATIONS = (
    "wife|husband|partner|son|daughter|brother|sister|mother|father|mom|mum|dad|friend|colleague|coworker"
    "|co-worker|boss|manager|neighbour|neighbor|uncle|aunt|cousin|niece|nephew|grandma|grandmother|grandpa"
    "|grandfather|teacher|supervisor|coach|doctor|landlord|landlady|roommate|housemate|flatmate|client"
    "|customer|teammate|mentor|professor|girlfriend|boyfriend|fiancé|fiancée|lecturer|tutor|student|intern"
    "|vrouw|man|vriend|vriendin|zoon|dochter|broer|zus|moeder|vader|collega|baas|leidinggevende|buurman"
    "|buurvrouw|oom|tante|neef|nicht|opa|oma|docent|leraar|lerares|begeleider|klant|huisgenoot|echtgenoot"
    "|echtgenote|schoonmoeder|schoonvader|zwager|schoonzus|stagiair|stagiaire|huisarts|manager"
)
_FIRST = r"[A-Z][a-zà-ÿ]+(?:-[A-Z][a-zà-ÿ]+)?"  # "Jan", "Anne-Marie"; never "LanceDB" or "HR"
_PARTICLE = r"(?:van der|van den|van de|van|de|der|den|ter|ten|te|von|da|di|le|la)"
_NAME = rf"{_FIRST}(?: (?:{_PARTICLE} )?{_FIRST})?"  # "Adriaan van Liempt", "Pieter Kuppens"
_POSSESSIVE = r"(?:[Mm]y|[Mm]ijn|[Oo]ur|[Oo]nze)"
# Strong cues: a relation word or a title before the name, or a relation after it.
_STRONG = (
    re.compile(rf"\b{_POSSESSIVE} (?:(?:new|old|best|oude|nieuwe|beste|goede) )?(?:{_RELATIONS}),? ({_NAME})\b"),
    re.compile(rf"\b(?:[Cc]ollega|[Bb]uurman|[Bb]uurvrouw) ({_NAME})\b"),
    re.compile(rf"\b(?:[Dd]r|[Pp]rof|Mr|Mrs|Ms|[Dd]hr|[Mm]evr)\.? ({_NAME})\b"),
    re.compile(rf"^(?:Name|Naam)\s*[:\t]\s*({_NAME})\b", re.M),
    re.compile(rf"\b(?:e-?mail|mail|letter|brief|message|bericht) (?:to|naar|aan|for|voor) ({_NAME})\b"),
    re.compile(rf"(?:^|\n|[.!?] )(?:Dear|Beste|Hi|Hello|Hallo|Hoi|Lieve|Geachte) ({_NAME}),"),
)
# Weak cues: a person's place in the sentence; the name must also be no common word.
_DEPARTMENTS = (
    r"finance|hr|HR|sales|marketing|accounting|legal|IT|support|engineering|operations|procurement|payroll"
    r"|purchasing|the office|work|school|church|next door|the team|the gym|financiën|inkoop|verkoop|het werk"
)
_ASK = (
    r"ask|asked|asking|tell|told|email|emailed|e-mail|call|phone|phoned|text|texted|meet|invite"
    r"|invited|thank|thanked|remind|reminded|visit|visited|cc|vraag|vroeg|bel|belde|mailde|spreek|sprak"
)
_SAYS = (
    r"says|said|thinks|thought|knows|knew|wants|wanted|asked|told|agreed|suggested|mentioned|wrote|feels|felt"
    r"|believes|prefers|likes|loves|hates|has never|never|is my|was my|zegt|zei|vindt|vond|denkt|dacht|weet"
    r"|vroeg|stelde|schreef"
)
_WEAK = (
    re.compile(rf"\b({_FIRST}) (?:from|van|uit) (?:{_DEPARTMENTS})\b"),
    re.compile(rf"\b(?:{_ASK}) ({_FIRST})(?: and ({_FIRST}))?\b"),
    re.compile(rf"\b({_NAME}) (?:{_SAYS})\b"),
    re.compile(rf"\b(?:style of|stijl van|manner of|trant van) ({_NAME})\b"),
    re.compile(rf"\bin ({_NAME})(?:'s|’s)?[ -](?:style|stijl)\b"),  # "write in Asimov style"
    re.compile(rf"\b({_NAME}), {_POSSESSIVE} (?:{_RELATIONS})\b"),
    # A full name (first name and surname) as the author of something: "het model van Schulz von Thun".
    re.compile(rf"\b(?:by|of|van|door|from) ({_FIRST}(?: (?:{_PARTICLE} )?{_FIRST}){{1,2}})(?![\w-])"),
)
# A name that signs a text: "Met vriendelijke groet,Eva Mooren", "Kind regards, Jan de Vries". A first
# name may be a dictionary word ("Eva" is one to the tagger), so the surname alone must be uncommon (a
# single name whole). A testimonial's credit after a quote mark or dash, "'Jacco Biemond, Shell'": a
# full name, then its organisation, no word of the name a common one.
_SIGN_OFF = (
    r"(?:met )?(?:vriendelijke|hartelijke|warme) groet(?:en)?|groet(?:en|jes)?|(?:kind|best|warm|warmest) regards"
    r"|regards|sincerely|yours sincerely|yours truly|best wishes|cheers"
)
_SIGNED = re.compile(rf"(?i:\b(?:{_SIGN_OFF})),?[ \t]*\n?[ \t]*({_NAME})(?![\w-])")
_CREDITED = re.compile(rf"(?:[\"'“‘—–]|\s-\s)[ \t]*({_FIRST} (?:{_PARTICLE} )?{_FIRST}), (?:[A-Z][\w&.-]+)")
_PERSON = re.compile(r"^[A-Z][\w'-]{1,29}(?: [A-Z][\w'-]{1,29}){0,2}$")
MAX_FACTS = 30  # the user's sentences a page quotes; its links go on past this
MAX_FACT_CHARS = 300


@lru_cache(maxsize=1)
def _lexicon() -> Any:
    from textblob.en import lexicon  # the tagger's word list, imported on first use

    return lexicon


def is_common_word(word: str) -> bool:
    """Whether the tagger's lexicon knows ``word`` in lower case (a common word, not only a name)."""
    lowered = word.lower()
    return lowered in NOT_NAMES or _lexicon().get(lowered) is not None


def _fits(name: str) -> bool:
    return bool(name) and name.split()[0].lower() not in NOT_NAMES and name.lower() not in ROLES


def _uncommon(name: str) -> bool:
    """A name-like run none of whose capitalised words is a common word ("van" may be)."""
    return _fits(name) and not any(is_common_word(w) for w in name.split() if w[0].isupper())


def _surname_uncommon(name: str) -> bool:
    """A signature's name: its last word no common word, and no single word that is one."""
    return _fits(name) and not is_common_word(name.split()[-1])


def _cued(text: str) -> set[str]:
    """The names a cue finds: strong cues, weak cues on uncommon words, signatures and credits."""
    found = {m for pattern in _STRONG for m in pattern.findall(text) if _fits(m)}
    found.update(
        g for pattern in _WEAK for match in pattern.finditer(text) for g in match.groups() if g and _uncommon(g)
    )
    found.update(m for m in _SIGNED.findall(text) if _surname_uncommon(m))
    found.update(m for m in _CREDITED.findall(text) if _uncommon(m))
    return found


def people_in(text: str, known: Iterable[str] = ()) -> set[str]:
    """The people a user's text names: by a strong cue, a weak cue on an uncommon word, or ``known`` names."""
    found = _cued(text)
    found.update(n for n in known if re.search(rf"(?<![\w-]){re.escape(n)}(?![\w-])", text))
    # "Adriaan van Liempt" and "Adriaan" in one text are one person: the shorter goes.
    return {n for n in found if not any(o != n and o.startswith(n + " ") for o in found)}


def speaker_name(speaker: str | None) -> str:
    """A message's speaker when it names a person ("Caroline"), else ""."""
    name = " ".join(str(speaker or "").split())
    return name if _PERSON.match(name) and name.lower() not in ROLES else ""


def named_people(conv: Conversation, known: Iterable[str] = ()) -> set[str]:
    """The people a conversation names: its named speakers, and those named in its people's own turns."""
    found: set[str] = set()
    speakers = {speaker_name(m.speaker) for m in conv.messages} - {""}
    for message in conv.messages:
        found.update(speakers & {speaker_name(message.speaker)})
        if message.role == "user":
            found.update(people_in(message.text, known))
    return found


class People:
    """The people named so far in an ingest: per person the sessions and notes that name them, and
    the user's sentences about them (each with the block it cites). Only stems and short lines are
    kept, never a conversation. A name is also remembered wherever it is mentioned without a cue
    ("Marta's review came back."), so a page links those mentions whichever conversation named the
    person first."""

    def __init__(self) -> None:
        self.links: dict[str, set[str]] = defaultdict(set)  # the people named, with what names them
        self.mentions: dict[str, set[str]] = defaultdict(set)  # any name-like word, with where it stands
        self.said: dict[str, dict[str, str]] = defaultdict(dict)  # name-like word -> sentence -> its link

    def add(self, conv: Conversation, session_stem: str, notes: Iterable[tuple[str, str]] = ()) -> None:
        """Count a written conversation: each person it names gets its session note, the notes
        ((stem, sentence)) that name them, and the sentences of its user turns that name them."""
        for name in named_people(conv):
            self.links[name].add(session_stem)
        for message in conv.messages:
            if message.role != "user":
                continue
            for sentence in sentences(message.text):
                self._mention(sentence, session_stem, wikilink(session_stem, "^" + block_id(message.id)))
        for stem, sentence in notes:
            self._mention(sentence, stem, "")

    def add_text(self, text: str, stem: str) -> set[str]:
        """Count a note written outside an ingest (``remember``): the people its text names (by a cue,
        or among the people already known); returns them."""
        named = people_in(text, self.links)
        for name in named:
            self.links[name].add(stem)
        for sentence in sentences(text):
            self._mention(sentence, stem, wikilink(stem))
        return named

    def _mention(self, sentence: str, stem: str, link: str) -> None:
        said = " ".join(sentence.split())
        for name in set(_NAME_LIKE.findall(said)):
            if _uncommon(name):
                self.mentions[name].add(stem)
                if link and len(self.said[name]) < MAX_FACTS and len(said) <= MAX_FACT_CHARS:
                    self.said[name].setdefault(said, link)

    def pages(self) -> dict[str, tuple[set[str], dict[str, str]]]:
        """Per person: the stems that name them, and the user's sentences about them."""
        return {
            name: (stems | self.mentions.get(name, set()), dict(self.said.get(name, {})))
            for name, stems in self.links.items()
        }


# Any name-like run of words in a sentence: one capitalised word, or a first name and surname.
_NAME_LIKE = re.compile(rf"(?<![\w-])({_NAME})(?![\w-])")


_FACTS_HEADING = "## What you said"
_LINKS_HEADING = "## Where they are named"
_FACT_LINE = re.compile(r"- (.+) \((\[\[[^\]]+\]\])\)")


def person_page(name: str, stems: Iterable[str], facts: dict[str, str] | None = None) -> Note:
    """A person's hub note: the user's sentences about them (each citing its source), then links to
    the sessions and notes that name them (sorted, deduplicated)."""
    pid = person_id(name)
    said = [f"- {sentence} ({link})" for sentence, link in sorted((facts or {}).items())]
    links = [f"- {wikilink(stem)}" for stem in sorted(set(stems))]
    body = [f"# {name}", ""]
    if said:
        body += [f"{_FACTS_HEADING} about {name}", "", *said, ""]
    body += [_LINKS_HEADING, "", f"Conversations and notes that name {name}:", "", *links]
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "person"
    frontmatter = {"id": pid, "type": "topic", "tier": "chat", "tags": ["hub", "person", f"person/{slug}"]}
    return Note(pid, "topic", PEOPLE_FOLDER, person_stem(name), frontmatter, "\n".join(body) + "\n")


def _existing(vault: Vault, probe: Note) -> tuple[set[str], dict[str, str]]:
    """The links and quoted sentences a person's file already holds (the user may have added some)."""
    links = existing_links(vault, probe)
    relpath = vault.locate(probe.id)
    facts: dict[str, str] = {}
    if relpath is not None:
        _, body, _ = vault.read(relpath)
        section = body.split(_FACTS_HEADING, 1)[1].split("\n## ", 1)[0] if _FACTS_HEADING in body else ""
        for line in section.splitlines():
            if match := _FACT_LINE.fullmatch(line.strip()):
                facts[match[1]] = match[2]
    return links, facts


def write_people(vault: Vault, people: People, report: IngestReport) -> list[str]:
    """Write each person's page, its links and sentences merged with those its file already holds;
    returns the pages' paths."""
    written = []
    for name, (stems, said) in sorted(people.pages().items()):
        links, facts = _existing(vault, person_page(name, []))
        written.append(write_note(vault, person_page(name, stems | links, {**facts, **said}), report))
    return written


def link_people(vault: Vault, text: str, stems: Iterable[str]) -> list[str]:
    """For notes written outside an ingest (``remember``): link ``stems`` from the page of every
    person ``text`` names, by a cue or among the people the vault already has pages for (a page is
    made where missing); returns the pages' paths. Call under the vault's lock."""
    stems = [s for s in stems if s]
    if not stems:
        return []
    people = People()
    for relpath in vault.iter_note_paths():
        if relpath.startswith(PEOPLE_FOLDER + "/") and (name := _page_name(vault, relpath)):
            people.links.setdefault(name, set())
    named = people.add_text(text, stems[0])
    people.links = defaultdict(set, {n: set(stems) for n in named})
    people.mentions = defaultdict(set)
    return write_people(vault, people, IngestReport()) if named else []


def _page_name(vault: Vault, relpath: str) -> str:
    """The person a page is about: its H1."""
    try:
        _, body, _ = vault.read(relpath)
    except (OSError, VaultError):
        return ""
    heading = next((line[2:].strip() for line in body.splitlines() if line.startswith("# ")), "")
    return heading if _PERSON.match(heading) else ""
