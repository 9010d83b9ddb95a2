"""What the sweep reads: every active atomic note of the index, as it is on disk at planning time.

The vault is the truth and the index only says which notes to read (its vectors feed the
candidates). A note whose bytes the user changed since vault_pipeline wrote them (the vault
state's hash) is marked ``edited``: the plan never archives it, only relates it for review. A note that is archived, superseded or a duplicate of another is not read again;
one that is gone or unreadable since the last index sync is reported, not fatal.
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import PurePosixPath
from typing import Any

from vault_pipeline.errors import VaultError
from vault_pipeline.text import link_target
from vault_pipeline.vault.files import Vault
from vault_pipeline.vault.format import parse_atomic_body
from vault_pipeline.vault.frontmatter import source_messages
from vault_pipeline.vault.note import TIER_WEIGHTS, note_tier

ARCHIVE = "archive"  # where the sweep moves the notes it archives; nothing there is swept again
PARALLEL_READ_FROM = 20_000  # notes; below this a process pool costs more than it saves


def as_list(value: Any) -> list[Any]:
    """A frontmatter value as a list (None -> [], a scalar -> [scalar])."""
    return [] if value is None else list(value) if isinstance(value, (list, tuple)) else [value]


@dataclass(frozen=True)
class SweepNote:
    """What the sweep knows of one atomic note, read from the vault at planning time."""

    id: str
    path: str
    stem: str
    text: str  # the claim sentence
    context: str  # the Context: line, if any
    created: str
    status: str
    tier: str
    messages: tuple[str, ...]
    related: frozenset[str]  # stems linked in ``related``
    sha256: str
    category: str = ""
    edited: bool = False  # the user changed its bytes since vault_pipeline wrote it: never archived

    @property
    def provenance(self) -> tuple[float, bool]:
        """Tier weight, then kept-ness: a kept engram outranks everything."""
        return TIER_WEIGHTS.get(self.tier, 0.0), self.status == "kept"


def _claim(body: str) -> tuple[str, str]:
    """The claim sentence and the Context: qualifier of an atomic note's body."""
    parsed = parse_atomic_body(body)
    return parsed.sentence, parsed.context


def _sweep_note(
    note_id: str, relpath: str, fm: Mapping[str, Any], body: str, sha: str, edited: bool = False
) -> SweepNote | None:
    """A SweepNote, or None when the note is not an active atomic note (archived, superseded ...)."""
    inactive = fm.get("status") == "archived" or fm.get("superseded_by") or fm.get("duplicate_of")
    if fm.get("type") != "atomic" or inactive or relpath.startswith(f"{ARCHIVE}/"):
        return None
    sentence, context = _claim(body)
    return SweepNote(
        id=str(fm.get("id") or note_id),
        path=relpath,
        stem=PurePosixPath(relpath).stem,
        text=sentence,
        context=context,
        created=str(fm.get("created") or ""),
        status=str(fm.get("status") or ""),
        tier=note_tier(dict(fm), relpath),
        messages=tuple(source_messages(fm)),
        related=frozenset(link_target(v) for v in as_list(fm.get("related"))),
        sha256=sha,
        category=str(fm.get("category") or ""),
        edited=edited,
    )


def load_notes(vault: Vault, ids: Sequence[str], paths: Sequence[str]) -> tuple[list[SweepNote], list[int], list[str]]:
    """Read the indexed notes from disk: (active atomic notes, their index rows, skip reasons)."""
    items = list(zip(ids, paths))
    workers = min(len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1, 4)
    if len(items) < PARALLEL_READ_FROM or workers < 2 or not sys.platform.startswith("linux"):
        results = _read_notes(str(vault.root), items)
    else:
        # YAML parsing holds the GIL, so processes, not threads. Forked, not spawned: spawn
        # re-imports the caller's __main__ (an unguarded script would recurse). The children
        # only read and parse note files; they never touch LanceDB or its threads.
        size = -(-len(items) // (workers * 4))
        chunks = [items[i : i + size] for i in range(0, len(items), size)]
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="lancedb fork support", category=RuntimeWarning)
            with ProcessPoolExecutor(workers, mp_context=get_context("fork")) as pool:
                results = [r for part in pool.map(_read_notes, [str(vault.root)] * len(chunks), chunks) for r in part]
    notes, rows, skipped = [], [], []
    for row, (note, why) in enumerate(results):
        if why:
            skipped.append(why)
        elif note is not None and note.text:
            notes.append(note)
            rows.append(row)
    return notes, rows, skipped


def edited_by_user(vault: Vault, relpath: str, sha: str) -> bool:
    """True when vault_pipeline wrote this file and its bytes have changed since (the state's hash).

    A file the state does not know (written by hand, or by an older version) is not called edited.
    """
    record = vault.state.get(relpath)
    return record is not None and record.sha256 != sha


def _read_notes(root: str, items: Sequence[tuple[str, str]]) -> list[tuple[SweepNote | None, str]]:
    """(note or None, skip reason) per (id, path); module-level so a worker process can run it."""
    vault = Vault(root)
    out: list[tuple[SweepNote | None, str]] = []
    for note_id, relpath in items:
        try:
            fm, body, sha = vault.read(relpath)
        except (OSError, VaultError) as exc:
            out.append((None, f"{relpath}: unreadable or gone since the last index sync ({exc}); run `vault index`"))
            continue
        out.append((_sweep_note(note_id, relpath, fm, body, sha, edited_by_user(vault, relpath, sha)), ""))
    vault.state.close()  # the last connection out removes SQLite's -wal/-shm: planning leaves no file behind
    return out
