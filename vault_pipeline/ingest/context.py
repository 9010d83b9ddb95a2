"""Self-contained atomic notes: who said it (a named speaker) and when (relative time made absolute).

A note read on its own, out of its session, must still answer "who?" and "when?". Two things
are added to an atomic note, never to its sentence:

* ``speaker_name``: the name of the person whose message the unit comes from, when the export
  names people (LoCoMo, transcripts with ``Caroline:`` labels), not the roles "user"/"assistant".
* ``when`` (+ ``when_end`` for a range, ``when_text`` as written): a relative time expression in
  the note ("yesterday", "last Tuesday", "two weeks ago", "next month", "vorige week") resolved
  against the source message's own date (``Message.created``; the LoCoMo session date) by
  ``vault/times.py``.

Both go into a ``Context:`` line too (its grammar: ``vault/format.py``):
``Context: Caroline, 8 May 2023; "yesterday" is 7 May 2023.``
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import date
from typing import Any

from vault_pipeline.ingest.extract import AtomicUnit
from vault_pipeline.ingest.parse import Conversation
from vault_pipeline.vault.format import context_line
from vault_pipeline.vault.format import merge_context as merge_context  # read from here by older callers
from vault_pipeline.vault.times import TimeRef, resolve_times

_ROLE_WORDS = frozenset({"user", "assistant", "speaker", "human", "ai", "system", "me", "you", "bot"})

# --------------------------------------------------------------------------- notes


def speaker_name(message: Any) -> str | None:
    """The person's name on a message, or None when the export only knows roles ('user', 'assistant')."""
    name = " ".join(str(getattr(message, "speaker", "") or "").split())
    if not name or name.lower() in _ROLE_WORDS or name.lower() == str(getattr(message, "role", "")).lower():
        return None
    return name


def unit_context(unit: AtomicUnit, conv: Conversation) -> tuple[dict[str, str], str | None]:
    """(properties, Context text) that make an atomic note self-contained: who said it, and when.

    Properties: ``speaker_name`` when the source messages name people; ``when``/``when_text``
    (and ``when_end`` for a week, weekend, month or year) for the first relative time expression
    in the note, resolved against the first source message's date (else the conversation's).
    """
    ids = [str(i) for i in unit.source_ids]
    by_id = {str(m.id): m for m in conv.messages}
    sources = [by_id[i] for i in ids if i in by_id]
    names = list(dict.fromkeys(n for n in map(speaker_name, sources) if n))
    base = next((m.created for m in sources if m.created is not None), None) or conv.created
    refs = resolve_times(" ".join(filter(None, [unit.text, unit.context])), base) if base else []
    properties = {"speaker_name": _joined(names)} if names else {}
    if refs:
        properties.update(_when(refs[0]))
    return properties, _context_line(names, base, refs)


def _when(ref: TimeRef) -> dict[str, str]:
    """The ``when`` properties of a note's first time expression: its day (and last day), as written."""
    found = {"when": ref.start.isoformat()}
    if ref.end != ref.start:
        found["when_end"] = ref.end.isoformat()
    found["when_text"] = ref.text
    return found


def _context_line(names: Sequence[str], base: date | None, refs: Sequence[TimeRef]) -> str | None:
    """The Context text: who said it and on which day, then what each time expression means."""
    return context_line(_joined(names), base, [(ref.text, ref.describe()) for ref in _unique(refs)])


def _joined(names: Sequence[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1] if names else ""


def _unique(refs: Iterable[TimeRef]) -> list[TimeRef]:
    seen: dict[str, TimeRef] = {}
    for ref in refs:
        seen.setdefault(ref.text.lower(), ref)
    return list(seen.values())
