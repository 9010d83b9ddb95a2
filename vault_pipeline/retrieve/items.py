"""What a package is made of: a transcript's cuttable turns (``Part``), a selected chunk on its way
in (``Selected``) and a block as it appears (``Block``). ``package.py`` assembles them,
``markdown.py`` renders them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any, Literal

from vault_pipeline.text import estimate_tokens

Level = Literal["core", "structural", "peripheral"]


@dataclass(frozen=True)
class Part:
    """One turn (or paragraph) of a transcript chunk: what a cut keeps whole or leaves out."""

    text: str
    messages: tuple[str, ...] = ()  # the turns it holds
    share: float = 0.0  # how much of the query it carries (0-1); the higher, the later it is cut
    turn: bool = True  # someone's words; False: the chunk's own framing (a summary's opening line)


def utf8_bytes(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


@dataclass(frozen=True)
class Selected:
    """A ranked, gate-kept, deduplicated chunk on its way into the package."""

    chunk_id: str
    note_id: str
    path: str
    tier: str
    type: str
    score: float
    rank: int
    text: str
    heading: str = ""
    conversation: str = ""
    messages: tuple[str, ...] = ()
    links: tuple[str, ...] = ()  # the note's own source links (``[[session#^block]]``)
    lead: str = ""  # a transcript chunk's lead (``[conversation, day]``) before its ``parts``
    parts: tuple[Part, ...] = ()  # a transcript chunk's turns: ``text`` is the lead and all of them
    position: int = 0  # an atomic note's place among the notes of its first message (0: not known)

    @property
    def stem(self) -> str:
        """The note's file name without ``.md``: what an Obsidian wikilink resolves."""
        return PurePosixPath(self.path).stem


@dataclass(frozen=True)
class Block:
    """One chunk as it appears in the package."""

    item: Selected
    level: Level
    text: str
    truncated: bool
    messages: tuple[str, ...] | None = None  # what a cut transcript chunk still cites; None: the item's
    counted: int | None = None  # the text's tokens by the package's tokenizer; None: the bytes estimate

    @property
    def tokens(self) -> int:
        """Tokens of the (possibly cut) text."""
        return estimate_tokens(self.text) if self.counted is None else self.counted

    def to_dict(self) -> dict[str, Any]:
        """The block's JSON shape (``id`` is the note's frontmatter id)."""
        item = self.item
        return {
            "id": item.note_id,
            "chunk_id": item.chunk_id,
            "path": item.path,
            "tier": item.tier,
            "type": item.type,
            "level": self.level,
            "score": item.score,
            "rank": item.rank,
            "text": self.text,
            "tokens": self.tokens,
            "heading": item.heading,
            "truncated": self.truncated,
            "source": {
                "conversation": item.conversation,
                "messages": list(item.messages if self.messages is None else self.messages),
                "path": item.path,
                "links": list(item.links),
            },
        }


def is_statement(row: Any) -> bool:
    """Whether a row is one of the index's statements of a session (an atomic-shaped row the session
    note owns, ``index/statements.py``) rather than an atomic note of its own."""
    return row.type == "atomic" and str(row.note_id).startswith("s-")
