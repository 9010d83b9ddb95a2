"""A message's statements in its own words: sentences and clauses with the structure around them.

The offline extractor selects, it does not rewrite. A message is read as Markdown (mistune's
abstract syntax tree, so a ``#`` inside a code fence is no heading): code blocks and tables are
left to the transcript, headings and a list's lead-in become the context of what stands under
them, and each paragraph or list item is cut into sentences. A sentence is a candidate as it
stands when it fits the word limit; a longer one gives up its leading or trailing condition (or
concession) to the context, or splits at ``;`` into independent clauses. Every candidate's text is
a contiguous run of the message's own text (inline markup removed, its first letter capitalised),
so a note never says what its source did not.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any

from vault_pipeline.text import split_sentences, word_count

# Browsing citation markers in ChatGPT exports (【5†source】) and the private-use glyphs it leaves.
CITATION = re.compile(r"【[^】]*】|[\ue200-\ue2ff]")
# "If X, Y." / "Als X, Y.": a leading condition, concession or time clause cut off at its comma.
_LEADING = re.compile(
    r"^(?P<dep>(?:if|when|whenever|once|unless|although|though|even though|while|whereas|because|since|"
    r"as long as|provided that|in case|before|after|until|to|for example|for instance|in that case|"
    r"als|wanneer|indien|tenzij|hoewel|omdat|zodra|voordat|nadat|om)\b[^,;:]{2,}?),\s+(?P<main>.+)$",
    re.I,
)
# "Y, if X." / "Y because X." : a trailing condition, reason or concession.
_TRAILING = re.compile(
    r"^(?P<main>.+?)(?:,\s+(?P<dep>(?:if|when|whenever|unless|although|though|even though|because|since|"
    r"as long as|provided that|in case|so that|while|whereas|which|especially if|allowing|making|"
    r"meaning|including|such as|als|wanneer|indien|tenzij|hoewel|omdat|zodat|zolang|terwijl|waardoor|"
    r"wat|zoals)\b.+)"
    r"|\s+(?P<dep2>(?:because|unless|although|even though|so that|omdat|tenzij|hoewel|zodat)\b.+))$",
    re.I,
)
# Independent clauses side by side: "A; B", "A, and B", "A, but B" (each must hold its own subject).
_COORDINATE = re.compile(r";\s+|,\s+(?:and|but|so|or|en|maar|dus|of)\s+|\s+[-–—]\s+", re.I)
_LABEL = re.compile(r"^(?P<label>[^:.!?]{1,60}?):\s+(?P<rest>\S.*)$")
_LEAD_IN = re.compile(r":\s*$")
# A short line that ends no sentence, standing over a list as its heading would ("Requirements", "Unity").
_LABEL_LINE = re.compile(r"^(?=\S)[^.!?;:\n]{2,60}$")
_SPACE = re.compile(r"\s+")


@dataclass(frozen=True)
class Statement:
    """One candidate note: a verbatim run of the message and what it needs to be understood.

    ``kind`` is where it stands: ``paragraph``, ``item`` (a list item), ``quote`` (a block quote).
    ``clause`` says how much of its sentence it is: ``whole``, ``main`` (its condition moved to the
    context) or ``part`` (one of several independent clauses). ``lead`` is the text that introduces
    its list, ``heading`` the heading it stands under, ``label`` the "Label:" it opens with."""

    text: str
    context: str | None
    kind: str
    clause: str
    lead: str | None
    heading: str | None
    label: str | None
    sentence: int  # the sentence's place in the message, from 0
    depth: int  # list nesting: 0 outside lists
    before: str | None = None  # the sentence before it in its block: what a pointing word points at

    @property
    def points_back(self) -> bool:
        """Whether it opens with a word that points at something said before it ("This method ...")."""
        return points_back(self.text)

    @property
    def antecedent(self) -> str | None:
        """The sentence a pointing opener refers to, when it stands just before it in the same block."""
        return self.before if self.points_back else None

    def full_context(self, max_words: int) -> str | None:
        """What the note's Context line says: the list's lead-in (else the heading), then the
        condition; within ``max_words`` (the heading goes first, then the lead-in)."""
        frame = self.lead if self.kind == "item" and self.lead else self.heading
        parts = [p for p in (_bare_lead(frame), self.antecedent, self.context) if p]
        while parts and word_count("; ".join(parts)) > max_words:
            parts = parts[1:] if len(parts) > 1 else []
        return "; ".join(parts) or None


@dataclass(frozen=True)
class Block:
    """A paragraph, list item or quote, its plain text, and the structure it stands in."""

    text: str
    kind: str
    lead: str | None
    heading: str | None
    depth: int


@dataclass(frozen=True)
class Reading:
    """Everything a message holds as statements, and how much of it is not prose."""

    statements: tuple[Statement, ...]
    sentences: int  # prose sentences in the message
    code_blocks: int
    tables: int
    long: int  # sentences no clause of which fits the word limit


@lru_cache(maxsize=1)
def _parser() -> Any:
    import mistune

    return mistune.create_markdown(renderer=None, plugins=["table", "strikethrough"])


def plain(children: Sequence[dict[str, Any]] | None) -> str:
    """The text of inline tokens as a reader sees it: markup gone, code spans kept in backticks."""
    out: list[str] = []
    for token in children or ():
        kind = token.get("type")
        if kind == "text":
            out.append(str(token.get("raw", "")))
        elif kind == "codespan":
            out.append(f"`{token.get('raw', '')}`")
        elif kind in ("softbreak", "linebreak"):
            out.append("\n")
        elif kind in ("image", "inline_html"):
            continue
        elif kind == "link" and (token.get("attrs") or {}).get("title") == "source":
            continue  # a browsing citation (``parse.chatgpt.cited``): the transcript keeps it, a note does not
        else:  # strong, emphasis, strikethrough, link: their text
            out.append(plain(token.get("children")))
    return "".join(out)


def tidy(text: str) -> str:
    """Citation markers out, whitespace collapsed (none left before a closing punctuation mark)."""
    return _BEFORE_STOP.sub(r"\1", _SPACE.sub(" ", CITATION.sub("", text))).strip()


_BEFORE_STOP = re.compile(r"\s+([.,;:!?](?:\s|$))")


# Bullets typed as glyphs ("• item", "◦ item") read as the Markdown list items they stand for.
_GLYPH_BULLET = re.compile(r"^([ \t]*)[•◦▪‣●○■□➢➤►▶✓✔]\s+", re.M)


# A word holding underscores is a name ("__init__", "expiration_date", "_id_"), never emphasis: its
# underscores are escaped before parsing (outside code), so every character reaches a note.
_NAMED = re.compile(r"(?<![\w\\])(?=\S*_)[\w.]*_[\w.]*(?![\w])")
_CODE = re.compile(r"(```.*?(?:```|\Z)|`[^`\n]*`)", re.S)


def _names_kept(markdown: str) -> str:
    parts = _CODE.split(markdown)
    for i in range(0, len(parts), 2):  # the even parts are outside code
        parts[i] = _NAMED.sub(lambda m: m.group().replace("_", "\\_"), parts[i])
    return "".join(parts)


def blocks(markdown: str) -> tuple[list[Block], int, int]:
    """The message's prose blocks in order, with (code blocks, tables) counted."""
    found, code, tables = _blocks(markdown)
    return list(found), code, tables


@lru_cache(maxsize=512)
def _blocks(markdown: str) -> tuple[tuple[Block, ...], int, int]:
    """``blocks``, parsed once per message: extraction, summaries and the selector all read it."""
    walker = _Walker()
    walker.walk(_parser()(_names_kept(_GLYPH_BULLET.sub(r"\1- ", markdown))))
    return tuple(walker.blocks), walker.code, walker.tables


class _Walker:
    """A depth-first walk over mistune's block tokens that remembers headings and lead-ins."""

    def __init__(self) -> None:
        self.blocks: list[Block] = []
        self.code = self.tables = 0
        self.heading: str | None = None
        self.previous: str | None = None  # the last paragraph's text: a list's lead-in when it ends on ':'

    def walk(self, tokens: Sequence[dict[str, Any]], kind: str = "paragraph", depth: int = 0) -> None:
        for token in tokens:
            self._token(token, kind, depth)

    def _token(self, token: dict[str, Any], kind: str, depth: int) -> None:
        name = token.get("type")
        if name == "heading":
            self.heading, self.previous = tidy(plain(token.get("children"))) or None, None
            if self.heading:
                self.blocks.append(Block(self.heading, "heading", None, None, depth))
        elif name in ("paragraph", "block_text"):
            text = plain(token.get("children"))
            self.blocks.append(Block(text, kind, None, self.heading, depth))
            said = split_sentences(tidy(text))
            self.previous = said[-1] if said else None
        elif name == "list":
            self._list(token, depth)
        elif name == "block_quote":
            self.walk(token.get("children") or (), "quote", depth)
        elif name == "block_code":
            self.code, self.previous = self.code + 1, None
        elif name == "table":
            self.tables, self.previous = self.tables + 1, None
        elif name == "thematic_break":
            self.heading, self.previous = None, None

    def _list(self, token: dict[str, Any], depth: int) -> None:
        lead = self._lead()
        for item in token.get("children") or ():
            first = len(self.blocks)
            self.previous = None
            self.walk(item.get("children") or (), "item", depth + 1)
            self._stand_under(first, depth, lead)
        self.previous = None

    def _lead(self) -> str | None:
        """The text a list that starts here stands under: the paragraph before it when that is a lead-in."""
        if self.previous and _LEAD_IN.search(self.previous):
            return self.previous
        if self.heading is None and self.previous and _LABEL_LINE.match(self.previous):
            return self.previous  # "**Unity**" or "Requirements" on its own line names what the list is about
        return None

    def _stand_under(self, first: int, depth: int, lead: str | None) -> None:
        """Every block of the item (from ``first``) stands under the list's lead-in; the items of a list
        nested in it that have no lead-in of their own stand under this item's first sentence."""
        own = next((b for b in self.blocks[first:] if b.depth == depth + 1), None)
        said = split_sentences(tidy(own.text)) if own else []
        for i in range(first, len(self.blocks)):
            if self.blocks[i].depth == depth + 1:
                self.blocks[i] = replace(self.blocks[i], lead=lead)
            elif self.blocks[i].depth == depth + 2 and self.blocks[i].lead is None and said:
                self.blocks[i] = replace(self.blocks[i], lead=said[0])


def is_verbatim(sentence: str, markdown: str) -> bool:
    """Whether a sentence is a contiguous run of the message's own text (inline markup, the case of its
    first letter and its closing punctuation aside): a note that says nothing its source did not."""
    wanted = key(sentence)
    text = _plain(markdown)
    return bool(wanted) and (wanted in text or wanted[:1].upper() + wanted[1:] in text)


@lru_cache(maxsize=256)
def _plain(markdown: str) -> str:
    """The message's prose as one line (its blocks' text, markup gone), for ``is_verbatim``."""
    found, _, _ = blocks(markdown)
    return " ".join(tidy(" ".join(_lines(b.text))) for b in found)


def key(text: str) -> str:
    """A sentence as compared with its source: markup, a capital first letter and end punctuation aside."""
    bare = tidy(text).rstrip(".!?:; ")
    return bare[:1].lower() + bare[1:]


def sentences(markdown: str) -> list[str]:
    """The message's prose sentences in order (code blocks and tables left out), as summaries quote them."""
    found, _, _ = blocks(markdown)
    return [t for block in found for line in _lines(block.text) for s in split_sentences(line) if (t := tidy(s))]


def read_message(markdown: str, max_words: int, max_context_words: int, *, lead_ins: bool = False) -> Reading:
    """Every statement of a message that fits ``max_words`` (its context within ``max_context_words``).

    A lead-in ("Some popular extensions are:") is its list's context, not a statement; with
    ``lead_ins`` it is a statement too (the user's "My tasks for today:" says something of theirs)."""
    found, code, tables = blocks(markdown)
    statements: list[Statement] = []
    count = long = 0
    for block in found:
        if block.kind == "heading":
            continue
        lead = block.lead
        before: str | None = None
        for line in _lines(block.text):
            for sentence in split_sentences(line):
                sentence = tidy(sentence)
                if not sentence:
                    continue
                if _LEAD_IN.search(sentence):
                    if lead_ins and word_count(sentence) <= max_words and _balanced(sentence):
                        statements.append(_statement(sentence, None, "whole", block, lead, count, before))
                    continue
                made = [c for c in _candidates(sentence, max_words, max_context_words) if _balanced(c[0])]
                long += not made and word_count(sentence) > max_words
                statements += [_statement(text, ctx, clause, block, lead, count, before) for text, ctx, clause in made]
                before = sentence
                count += 1
    return Reading(tuple(statements), count, code, tables, long)


def _lines(text: str) -> Iterator[str]:
    """A paragraph's lines; a line that does not end a sentence runs on into the next lower-case one. A
    line that opens with a list marker the parser left inside the paragraph is a line of its own."""
    pending = ""
    for raw in text.split("\n"):
        line = _MARKER.sub("", raw.strip())
        if not line:
            continue
        if pending and raw.strip() == line and line[:1].islower() and not _ENDS.search(pending):
            pending = f"{pending} {line}"
            continue
        if pending:
            yield pending
        pending = line
    if pending:
        yield pending


_ENDS = re.compile(r"[.!?:]$")
_MARKER = re.compile(r"^(?:(?:[-*+]|\d{1,2}[.)])\s+)?(?:\[[ xX]\]\s+)?")  # a bullet, a checklist box


def _statement(
    text: str, context: str | None, clause: str, block: Block, lead: str | None, at: int, before: str | None
) -> Statement:
    label = m.group("label") if (m := _LABEL.match(text)) and word_count(m.group("label")) <= 5 else None
    return Statement(
        _capitalised(text), context, block.kind, clause, lead, block.heading, label, at, block.depth, before
    )


# Words that, opening a statement, point at something said before it. Dutch "het" only before a
# finite verb ("Het biedt ...": the pronoun; "Het rapport ...": the article).
_POINTERS = frozenset(
    "this that these those it its they their them he she his her such dit dat deze die hij zij ze hun daar "
    "hier daarom daardoor hierdoor hiermee daarmee".split()
)
_OPENING = re.compile(r"^(?:so|also|then|and|but|however|dus|ook|en|maar|echter)?,?\s*([\w']+)(?:\s+([\w']+))?", re.I)


def points_back(text: str) -> bool:
    """Whether a statement opens with a pointing word (after a connective): "This method ...", "It ...",
    "Also, these ...", "Het biedt ...". A "Label:" opening names its subject, so it never does."""
    if _LABEL.match(text) and word_count(text.split(":", 1)[0]) <= 5:
        return False
    m = _OPENING.match(text)
    if not m:
        return False
    first, second = m.group(1).lower(), (m.group(2) or "").lower()
    if first in ("it's", "that's", "they're", "there's") or first in _POINTERS:
        return True
    return first == "het" and _dutch_finite(second)


def _dutch_finite(word: str) -> bool:
    from vault_pipeline.text import dutch_verb_form

    return word in _DUTCH_AUX or (word.isalpha() and not word.endswith("en") and dutch_verb_form(word))


_DUTCH_AUX = frozenset("is was wordt werd heeft had kan kon moet moest zal zou wil mag gaat ging biedt".split())


def _candidates(sentence: str, max_words: int, max_context_words: int) -> Iterator[tuple[str, str | None, str]]:
    """(text, context, clause) of a sentence: itself, or its main clause(s) with the rest as context."""
    if word_count(sentence) <= max_words:
        yield sentence, None, "whole"
        return
    for pattern in (_LEADING, _TRAILING):
        m = pattern.match(sentence)
        dep = m and (m.groupdict().get("dep") or m.groupdict().get("dep2"))
        if m and dep and word_count(m.group("main")) <= max_words and word_count(dep) <= max_context_words:
            main = m.group("main").rstrip(",;: ")
            yield (main if pattern is _LEADING else _closed(main)), dep.rstrip(".!? "), "main"
            return
    parts = [p.strip() for p in _COORDINATE.split(sentence)]
    if len(parts) > 1 and all(word_count(p) <= max_words for p in parts):
        for part in parts:
            yield _closed(part), None, "part"


_PAIRS = (("(", ")"), ("[", "]"), ("{", "}"), ("“", "”"))


def _balanced(text: str) -> bool:
    """Brackets and quotes that open in the text close in it: a cut inside "(i.e. ...)" leaves one open."""
    return (
        all(text.count(a) == text.count(b) for a, b in _PAIRS) and text.count("`") % 2 == 0 and text.count('"') % 2 == 0
    )


def _bare_lead(text: str | None) -> str | None:
    """A lead-in or heading as context: without its closing colon."""
    return text.rstrip(": ").strip() or None if text else None


def _closed(text: str) -> str:
    """A clause cut from its sentence, ending as a sentence does."""
    return text if re.search(r"[.!?]['\"”’)\]]*$", text) else f"{text}."


_PLAIN_FIRST_WORD = re.compile(r"^[a-z][a-z']*(?=[\s,;:!?]|\.(?:\s|$)|$)")


def _capitalised(text: str) -> str:
    """A clause cut from the middle of its sentence starts with a capital; a name ("self.root",
    "iPhone", "numpy.ndarray") keeps its case."""
    return text[:1].upper() + text[1:] if _PLAIN_FIRST_WORD.match(text) else text
