"""The parse stage's output types: conversations of user/assistant messages, and issues."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from vault_pipeline.errors import RecordError as RecordError  # defined with every error class; read here by the readers

Role = Literal["user", "assistant"]
Kind = Literal["chatgpt", "claude", "transcript", "locomo"]


@dataclass(frozen=True, slots=True)
class Message:
    """One visible turn: the export's own id, the role, the speaker's name, the text."""

    id: str
    role: Role
    speaker: str
    text: str
    created: datetime | None


@dataclass(frozen=True, slots=True)
class Conversation:
    """One conversation's main branch, with where it came from."""

    kind: Kind
    id: str
    title: str
    created: datetime | None
    updated: datetime | None
    messages: tuple[Message, ...]
    source: str
    thread: str | None = None
    alternates: int = 0
    titled: bool = True  # False when the parser made the title up ("Caroline and Melanie, session 3")


@dataclass(frozen=True, slots=True)
class ParseIssue:
    """A record (or a file inside a folder/zip) that could not be read: reported in one line and skipped.

    A ``warning`` was read all the same (undecodable bytes shown as U+FFFD): reported, not skipped."""

    source: str
    record: str
    reason: str
    warning: bool = False

    def __str__(self) -> str:
        """One line: ``source [record R]: reason``."""
        return f"{self.source} [record {self.record}]: {self.reason}"
