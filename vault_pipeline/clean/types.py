"""What a sweep plan is made of: a closed union of actions, and the plan that orders them.

``plan.py`` produces these and ``apply.py`` performs them; both import them from here. Every
action names its notes as ``NoteRef`` (id, path and sha256 when the plan was made), so apply
can skip a note edited since. ``action_json`` is the shape ``vault clean --dry-run --json``
prints and the journal records: ``{"action", "notes", "reason"}``, then ``canonical`` (a
collapse only), ``paths`` and ``expected_sha256``.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, assert_never, cast


@dataclass(frozen=True)
class NoteRef:
    """One note of an action as the plan saw it."""

    id: str
    path: str
    sha256: str
    text: str = field(default="", compare=False)  # the note's claim sentence, for a person reading the plan


class _Described:
    """What every action offers a printer: its plan word, its note ids and its JSON form."""

    @property
    def action(self) -> str:
        """``duplicate`` | ``supersede`` | ``relate``: the word of the JSON plan."""
        return action_kind(cast("Action", self))  # only the union's members inherit this

    @property
    def notes(self) -> tuple[str, ...]:
        """The note ids in the plan's order: [canonical, *duplicates] | [newer, older] | [a, b]."""
        return tuple(ref.id for ref in action_refs(cast("Action", self)))

    def to_json(self) -> dict[str, Any]:
        """This action as the JSON plan prints it."""
        return action_json(cast("Action", self))


@dataclass(frozen=True)
class Collapse(_Described):
    """Notes stating one claim: the canonical note absorbs the duplicates, which are archived."""

    canonical: NoteRef
    duplicates: tuple[NoteRef, ...]
    reason: str


@dataclass(frozen=True)
class Supersede(_Described):
    """A contradiction: the newer note supersedes the older, which is archived."""

    newer: NoteRef
    older: NoteRef
    reason: str


@dataclass(frozen=True)
class Relate(_Described):
    """Two notes about one subject, both still true: each gets a ``related`` link to the other."""

    a: NoteRef
    b: NoteRef
    reason: str


Action = Collapse | Supersede | Relate


def action_kind(action: Action) -> str:
    """The plan word of an action (the JSON plan's ``action`` and the report's counts)."""
    match action:
        case Collapse():
            return "duplicate"
        case Supersede():
            return "supersede"
        case Relate():
            return "relate"
        case _:
            assert_never(action)


def action_refs(action: Action) -> tuple[NoteRef, ...]:
    """The action's notes in the plan's order: [canonical, *duplicates] | [newer, older] | [a, b]."""
    match action:
        case Collapse(canonical=canonical, duplicates=duplicates):
            return (canonical, *duplicates)
        case Supersede(newer=newer, older=older):
            return (newer, older)
        case Relate(a=a, b=b):
            return (a, b)
        case _:
            assert_never(action)


def action_json(action: Action) -> dict[str, Any]:
    """The ``--json`` shape: action, notes, reason, then the extra keys apply needs."""
    refs = action_refs(action)
    out: dict[str, Any] = {"action": action_kind(action), "notes": [r.id for r in refs], "reason": action.reason}
    match action:
        case Collapse(canonical=canonical) if canonical.id:
            out["canonical"] = canonical.id
        case Collapse() | Supersede() | Relate():
            pass
        case _:
            assert_never(action)
    out["paths"] = {r.id: r.path for r in refs}
    out["expected_sha256"] = {r.id: r.sha256 for r in refs}
    return out


@dataclass
class Plan:
    """Ordered actions plus what the sweep looked at and left alone."""

    actions: list[Action] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    notes: int = 0
    candidates: int = 0
    judged: Counter = field(default_factory=Counter)
    judgements: list[tuple[str, str, str]] = field(default_factory=list)  # (older id, newer id, relation)
    timings: dict[str, float] = field(default_factory=dict)  # seconds per stage
    seconds: float = 0.0

    def to_json(self) -> list[dict[str, Any]]:
        """The plan as printed by ``vault clean --dry-run --json``."""
        return [action_json(action) for action in self.actions]
