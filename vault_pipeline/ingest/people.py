"""People pages: a hub note per named person, listing the conversations they speak in or are named in.

What Obsidian users keep by hand, and what a question about a person across sessions needs ("What
might John's degree be in?"): ``people/<name>.md`` links every session note the person takes part
in. A person is named conservatively (precision first):

* a speaker a transcript or LoCoMo names ("Caroline:"), never a role ("user", "assistant");
* a name the user gives with a relation in their own turns: "my colleague Jan", "mijn zus Eva".

The page is a hub (``type: topic``, tagged ``person``), so the funnel treats it as one: its links
are its members, and a prompt that names the person draws on them (``retrieve/hop.py``). Recurring
projects already have their page: the thread maps (``threads/``) are the lines of work.
Re-ingesting merges the links the page holds with the new ones, so a second ingest writes nothing.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable

from vault_pipeline.ingest.parse import Conversation
from vault_pipeline.ingest.write import IngestReport, existing_links, write_note
from vault_pipeline.vault.files import Vault
from vault_pipeline.vault.note import Note, person_id, person_stem, wikilink

PEOPLE_FOLDER = "people"
# Speaker labels that name a role, not a person.
ROLES = frozenset({"user", "assistant", "system", "tool", "human", "ai", "chatgpt", "claude", "gpt", "bot", "speaker"})
_RELATIONS = (
    "wife|husband|partner|son|daughter|brother|sister|mother|father|mom|mum|dad|friend|colleague|boss|manager"
    "|vrouw|man|vriend|vriendin|zoon|dochter|broer|zus|moeder|vader|collega|baas|leidinggevende"
)
# "my colleague Jan", "mijn zus Eva": a relation word, then a capitalised name that is no sentence start.
_NAMED = re.compile(rf"\b(?:[Mm]y|[Mm]ijn) (?:{_RELATIONS}),? ([A-Z][a-z]{{2,19}})\b")
_PERSON = re.compile(r"^[A-Z][\w'-]{1,29}(?: [A-Z][\w'-]{1,29}){0,2}$")


def named_people(conv: Conversation) -> set[str]:
    """The people a conversation names: its named speakers, and those the user names with a relation."""
    found = set()
    for message in conv.messages:
        speaker = " ".join(str(message.speaker or "").split())
        if _PERSON.match(speaker) and speaker.lower() not in ROLES:
            found.add(speaker)
        if message.role == "user":
            found.update(m for m in _NAMED.findall(message.text) if m.lower() not in ROLES)
    return found


class People:
    """The people named so far in an ingest, each with the session notes that name them."""

    def __init__(self) -> None:
        self.sessions: dict[str, set[str]] = defaultdict(set)

    def add(self, conv: Conversation, session_stem: str) -> None:
        """Count a written conversation: each person it names gets its session note."""
        for name in named_people(conv):
            self.sessions[name].add(session_stem)


def person_page(name: str, session_stems: Iterable[str]) -> Note:
    """A person's hub note linking the session notes that name them (sorted, deduplicated)."""
    pid = person_id(name)
    links = [f"- {wikilink(stem)}" for stem in sorted(set(session_stems))]
    body = "\n".join([f"# {name}", "", f"Conversations {name} takes part in or is named in:", "", *links]) + "\n"
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "person"
    frontmatter = {"id": pid, "type": "topic", "tier": "chat", "tags": ["hub", "person", f"person/{slug}"]}
    return Note(pid, "topic", PEOPLE_FOLDER, person_stem(name), frontmatter, body)


def write_people(vault: Vault, people: People, report: IngestReport) -> None:
    """Write each person's page, its links merged with those its file already holds."""
    for name in sorted(people.sessions):
        existing = existing_links(vault, person_page(name, []))
        write_note(vault, person_page(name, people.sessions[name] | existing), report)
