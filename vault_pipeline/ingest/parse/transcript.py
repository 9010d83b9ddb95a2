"""Markdown / plain-text transcripts with speaker labels, one conversation per file."""

from __future__ import annotations

import re
from collections.abc import Callable

from vault_pipeline.ingest.parse.common import writable
from vault_pipeline.ingest.parse.types import Conversation, Message, RecordError, Role

_USER = r"user|you|human|me"
_ASSISTANT = r"assistant|ai|chatgpt|chat\s?gpt|gpt-?[\w.]*|claude|bot|gemini|bard|copilot"
# "User:", "**You:**", "**ChatGPT**:", "You said:", "### Human", "## Assistant", "> **User**: text"
# Possessive blanks ([ \t]*+): adjacent optional runs would otherwise backtrack quadratically on long blank lines.
_LABEL = re.compile(
    rf"""^[ \t]*+(?P<quote>>[ \t]*+)?(?P<hash>\#{{1,6}}[ \t]++)?(?P<open>\*\*|__)?[ \t]*+
    (?P<who>{_USER}|{_ASSISTANT})(?:[ \t]++said)?(?![A-Za-z0-9])[ \t]*+(?P<close>\*\*|__)?[ \t]*+(?P<colon>:)?[ \t]*+
    (?P<close2>\*\*|__)?[ \t]*+(?P<rest>.*)$""",
    re.I | re.X,
)
# A named speaker: "Caroline:", "**Caroline:**", "**Dr. Ann Lee**:", "> Melanie: text" (1-3 capitalised words).
_NAMED = re.compile(
    r"""^[ \t]*+(?P<quote>>[ \t]*+)?(?P<open>\*\*|__)?[ \t]*+
    (?P<who>[A-Z\u00c0-\u00de][\w'’.-]{0,20}(?:[ \t][A-Z\u00c0-\u00de][\w'’.-]{0,20}){0,2})
    [ \t]*+(?P<close>\*\*|__)?[ \t]*+:(?P<close2>\*\*|__)?[ \t]*+(?P<rest>.*)$""",
    re.X,
)
# Words that open a "Word: text" line without naming a speaker.
_NOT_NAMES = frozenset(
    "note notes example examples step summary question answer q a title date time subject from to re cc "
    "warning tip important update edit source sources output input result results error todo ps nb "
    "location topic agenda action decision context transcript chat conversation session".split()
)
_FENCE = re.compile(r"^[ \t]*(?:>[ \t]*)?(```|~~~)")
_RULE = re.compile(r"^[ \t]*(?:-{3,}|\*{3,}|_{3,})[ \t]*$")
_QUOTE = re.compile(r"^[ \t]*>[ \t]?")


def parse_transcript(text: str, stem: str, source: str) -> Conversation:
    """One transcript's text -> Conversation (RecordError when no speaker labels are found)."""
    clean = writable(text).replace("\x00", "").lstrip("\ufeff")
    title, turns = _turns(clean)
    if not turns:  # no User/Assistant labels: a conversation between named people ("Caroline:", "**Mel:**")
        title, turns = _turns(clean, _named_labeller(clean))
    stem = writable(stem)
    messages: list[Message] = []
    for role, speaker, lines, quoted in turns:
        body = _body(lines, quoted)
        if body:
            messages.append(Message(id=f"t{len(messages) + 1}", role=role, speaker=speaker, text=body, created=None))
    if not messages:
        raise RecordError("no speaker labels found (expected 'User:' / 'Assistant:', '**You:**', '### Human', ...)")
    return Conversation(
        kind="transcript",
        id=f"transcript:{stem}",
        title=title or stem,
        created=None,
        updated=None,
        messages=tuple(messages),
        source=source,
    )


Turn = tuple[Role, str, list[str], bool]  # role, speaker, lines, quoted


def _turns(text: str, labeller: Labeller | None = None) -> tuple[str | None, list[Turn]]:
    """(title, [(role, speaker, lines, quoted)]): turns run from one speaker label to the next."""
    title: str | None = None
    turns: list[Turn] = []
    in_fence = False
    for line in text.splitlines():
        found = None if in_fence else (labeller or _role_label)(line)
        if _FENCE.match(line):
            in_fence = not in_fence
        if found:
            role, speaker, rest, quoted = found
            turns.append((role, speaker, [rest] if rest else [], quoted))
        elif turns:
            turns[-1][2].append(line)
        elif title is None and line.startswith("# ") and line[2:].strip():
            title = line[2:].strip()
    return title, turns


def _body(lines: list[str], quoted: bool) -> str:
    """A turn's text: quote markers removed when the label was quoted, separator rules at its end dropped."""
    if quoted:
        lines = [_QUOTE.sub("", line, count=1) for line in lines]
    end = len(lines)
    while end and (not lines[end - 1].strip() or _RULE.match(lines[end - 1])):
        end -= 1
    return "\n".join(lines[:end]).strip()


Labeller = Callable[[str], tuple[Role, str, str, bool] | None]


def _role_label(line: str) -> tuple[Role, str, str, bool] | None:
    found = label(line)
    return None if found is None else (found[0], found[0], found[1], found[2])


def named_label(line: str) -> tuple[str, str, bool] | None:
    """(name, text after the label, quoted) when the line opens a named speaker's turn, else None."""
    match = _NAMED.match(line)
    if not match:
        return None
    opened, closed = match.group("open"), match.group("close") or match.group("close2")
    if bool(opened) != bool(closed):
        return None  # "**Note**" emphasis or a stray marker, not a label
    name = match.group("who").strip().rstrip(".")
    if name.lower() in _NOT_NAMES or name.split()[0].lower() in _NOT_NAMES or "://" in match.group("rest")[:3]:
        return None
    return name, match.group("rest").strip(), bool(match.group("quote"))


def _named_labeller(text: str) -> Labeller:
    """Labels of the names that open at least two turns, or of two or more different names.

    One "Word:" line alone is more likely a heading in the text than a speaker; every named
    person is a 'user' (none of them is an assistant), the name is kept as ``Message.speaker``.
    """
    counts: dict[str, int] = {}
    in_fence = False
    for line in text.splitlines():
        found = None if in_fence else named_label(line)
        if _FENCE.match(line):
            in_fence = not in_fence
        if found:
            counts[found[0]] = counts.get(found[0], 0) + 1
    names = {n for n, c in counts.items() if c >= 2} if len(counts) < 2 else set(counts)

    def labeller(line: str) -> tuple[Role, str, str, bool] | None:
        found = named_label(line)
        if found is None or found[0] not in names:
            return None
        return "user", found[0], found[1], found[2]

    return labeller


def label(line: str) -> tuple[Role, str, bool] | None:
    """(role, text after the label, quoted) when the line opens a turn, else None."""
    match = _LABEL.match(line)
    if not match:
        return None
    opened, closed = match.group("open"), match.group("close") or match.group("close2")
    rest = match.group("rest").strip()
    if (opened and not closed) or (closed and not opened):
        return None  # "**User guide**" or stray emphasis, not a label
    if match.group("hash"):
        if rest and not match.group("colon"):
            return None  # "## User guide" is a heading, not a label; "## User: hi" is one
    elif not match.group("colon") and not (opened and not rest):
        return None  # plain words need "Label:"; bold needs a colon or a line of its own
    role: Role = "user" if re.fullmatch(_USER, match.group("who"), re.I) else "assistant"
    return role, rest, bool(match.group("quote"))
