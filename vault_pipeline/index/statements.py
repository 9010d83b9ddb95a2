"""A session's statements as rows of the index: the transcript searched sentence by sentence.

The offline extractor writes only the candidates its selector judges worth keeping (about one in
six of a ChatGPT archive); the transcript keeps every message. The index reads each message of a
session note's transcript as the extractor does and gives every candidate statement a row of its
own beside the session's chunks: an atomic-shaped row (the sentence, its ``Context:`` line, a
``Source:`` link to the message) that carries the message's id, speaker and date. A question about
one fact in a long turn finds that sentence, and a package holds the sentence rather than the whole
turn. These rows are derived data: they belong to the session note (its path and id; ordinals after
its own chunks, so no note count sees them) and are rebuilt with it. The vault holds no file for them.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import PurePosixPath
from typing import Any

from vault_pipeline.index.chunk import Chunk
from vault_pipeline.index.table import to_json_list
from vault_pipeline.ingest.extract import MAX_VERBATIM_CONTEXT_WORDS, MAX_VERBATIM_WORDS
from vault_pipeline.models.offline.extraction import statement_units
from vault_pipeline.text import estimate_tokens
from vault_pipeline.vault.format import AtomicBody, block_id, render_atomic, transcript_turns
from vault_pipeline.vault.frontmatter import source_messages

_ROLES = {"user": "user", "assistant": "assistant"}


def statement_chunks(note_id: str, relpath: str, frontmatter: Mapping[str, Any], body: str, first: int) -> list[Chunk]:
    """The candidate statements of a session note's messages, numbered from ``first``."""
    if str(frontmatter.get("type") or "") != "session":
        return []
    ids = {block_id(str(m)): str(m) for m in source_messages(frontmatter)}
    stem = PurePosixPath(relpath).stem
    out: list[Chunk] = []
    for block, (label, text) in transcript_turns(body).items():
        message = ids.get(block)
        if message is None:
            continue
        role = _ROLES.get(label.lower(), "user")
        named = label if label.lower() not in _ROLES else ""
        units, _ = statement_units(
            {"id": message, "role": role, "text": text}, MAX_VERBATIM_WORDS, MAX_VERBATIM_CONTEXT_WORDS
        )
        for position, unit in enumerate(units, 1):
            out.append(_chunk(note_id, first + len(out), unit, named, stem, block, position))
    return out


def _chunk(note_id: str, ordinal: int, unit: dict, named: str, stem: str, block: str, position: int) -> Chunk:
    context = "; ".join(part for part in (named, unit["context"] or "") if part)
    text = render_atomic(AtomicBody(unit["text"], context, (f"{stem}#^{block}",)))
    columns = {
        "type": "atomic",
        "category": unit["category"],
        "speaker": unit["speaker"],
        "source_messages": to_json_list(unit["source_ids"][:1]),
        "source_position": position,
        "status": "provisional",
    }
    return Chunk(note_id, ordinal, (), 0, text, estimate_tokens(text), columns=columns)
