"""Markdown / plain-text transcripts with speaker labels, one conversation per file."""

from __future__ import annotations

import re

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
_FENCE = re.compile(r"^[ \t]*(?:>[ \t]*)?(```|~~~)")
_RULE = re.compile(r"^[ \t]*(?:-{3,}|\*{3,}|_{3,})[ \t]*$")
_QUOTE = re.compile(r"^[ \t]*>[ \t]?")


def parse_transcript(text: str, stem: str, source: str) -> Conversation:
    """One transcript's text -> Conversation (RecordError when no speaker labels are found)."""
    title, turns = _turns(writable(text).replace("\x00", "").lstrip("\ufeff"))
    stem = writable(stem)
    messages: list[Message] = []
    for role, lines, quoted in turns:
        body = _body(lines, quoted)
        if body:
            messages.append(Message(id=f"t{len(messages) + 1}", role=role, speaker=role, text=body, created=None))
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


def _turns(text: str) -> tuple[str | None, list[tuple[Role, list[str], bool]]]:
    """(title, [(role, lines, quoted)]): turns run from one speaker label to the next."""
    title: str | None = None
    turns: list[tuple[Role, list[str], bool]] = []
    in_fence = False
    for line in text.splitlines():
        found = None if in_fence else label(line)
        if _FENCE.match(line):
            in_fence = not in_fence
        if found:
            role, rest, quoted = found
            turns.append((role, [rest] if rest else [], quoted))
        elif turns:
            turns[-1][1].append(line)
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
