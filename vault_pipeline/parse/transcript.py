"""Markdown / plain-text transcripts with speaker labels, one conversation per file."""

from __future__ import annotations

import re
from pathlib import Path

from vault_pipeline.parse.types import Conversation, Message, RecordError

_USER = r"user|you|human|me|i|question|q"
_ASSISTANT = r"assistant|ai|chatgpt|gpt-?\d*o?|claude|bot|model|answer|a"
# "User:", "**You:**", "**ChatGPT**:", "### Human", "## Assistant", "> **User**:" (label alone or text after it)
_LABEL = re.compile(
    rf"^\s*(?:>\s*)?(?:#{{1,6}}\s*)?(?:\*\*|__)?\s*(?P<who>{_USER}|{_ASSISTANT})\s*(?:\*\*|__)?\s*:?\s*(?:\*\*|__)?"
    rf"(?:\s+(?P<rest>.*))?$", re.I)


def _role(who: str) -> str:
    return "user" if re.fullmatch(_USER, who, re.I) else "assistant"


def parse_transcript(path: Path, source: str) -> Conversation:
    """One transcript file -> Conversation (RecordError when no speaker labels are found)."""
    text = path.read_text(encoding="utf-8", errors="replace").replace("\x00", "")
    title, turns = None, []
    in_fence = False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            in_fence = not in_fence
        label = None if in_fence else _label(line)
        if label:
            turns.append([label[0], [label[1]] if label[1] else []])
        elif title is None and not turns and line.startswith("# "):
            title = line[2:].strip()
        elif turns:
            turns[-1][1].append(line)
    messages = tuple(Message(id=f"t{i}", role=role, speaker=role, text="\n".join(lines).strip(), created=None)
                     for i, (role, lines) in enumerate(((r, l) for r, l in turns if "\n".join(l).strip()), 1))
    if not messages:
        raise RecordError("no speaker labels found (expected 'User:' / 'Assistant:', '**You:**', '### Human', ...)")
    return Conversation(kind="transcript", id=f"transcript:{path.stem}", title=title or path.stem,
                        created=None, updated=None, messages=messages, source=source)


def _label(line: str) -> tuple[str, str] | None:
    """(role, text after the label) when the line opens a turn."""
    match = _LABEL.match(line)
    if not match:
        return None
    rest = (match.group("rest") or "").strip()
    has_colon = ":" in line[: match.start("rest")] if match.group("rest") else ":" in line
    is_heading = line.lstrip().lstrip(">").lstrip().startswith("#")
    is_bold = "**" in line or "__" in line
    # A bare word like "I" or "A" starts a turn only when it looks like a label (colon, heading or bold).
    if not (has_colon or is_heading or is_bold):
        return None
    if is_heading and rest:
        return None  # "## User guide" is a heading, not a label
    return _role(match.group("who")), rest
