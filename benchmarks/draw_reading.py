"""Draw the blind-reading sample of a vault, as ../shared/design/NOTE-READING.md says.

    python benchmarks/draw_reading.py --vault /tmp/v47 --seed 7 --out /tmp/reading-7.jsonl

All atomic notes of the vault (inbox and engrams), sorted by path; ``random.seed(N)`` and
``random.sample(notes, 100)`` over every written note, then ``random.sample(engrams, 100)`` over
the kept ones (the same generator, in that order). Each line holds what a reader needs to judge
the note against its source, and nothing of the selector's: ``sample`` (written | engram),
``path``, ``text`` (the note's sentence), ``context``, ``category``, ``speaker``, ``source`` (the
source message's text, read from the session note's transcript) and ``question`` (the user's
message before an assistant's source message, or null). Where the note's text is not in its
source, ``source`` is null and the reader is told so by ``missing``.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from vault_pipeline.ingest.keep import note_context, note_sentence  # noqa: E402
from vault_pipeline.ingest.notes import block_id, transcript_turns  # noqa: E402
from vault_pipeline.text import link_target  # noqa: E402
from vault_pipeline.vault.files import Vault  # noqa: E402
from vault_pipeline.vault.frontmatter import source_messages  # noqa: E402

SIZE = 100


def atomic_paths(vault: Vault) -> tuple[list[str], list[str]]:
    """(every atomic note's path, the engrams' paths), each sorted."""
    notes = sorted(p for p in vault.iter_note_paths() if p.startswith(("inbox/", "engrams/")))
    return notes, [p for p in notes if p.startswith("engrams/")]


class Sessions:
    """The transcripts of session notes, read once each: block id -> (speaker label, text), in order."""

    def __init__(self, vault: Vault):
        self.vault = vault
        self.by_stem = {p.rsplit("/", 1)[-1][:-3]: p for p in vault.iter_note_paths() if p.startswith("sessions/")}
        self.read: dict[str, list[tuple[str, str, str]]] = {}

    def turns(self, session: Any) -> list[tuple[str, str, str]]:
        relpath = self.by_stem.get(link_target(session))
        if relpath is None:
            return []
        if relpath not in self.read:
            _, body, _ = self.vault.read(relpath)
            self.read[relpath] = [(k, who, text) for k, (who, text) in transcript_turns(body).items()]
        return self.read[relpath]


def row(vault: Vault, sessions: Sessions, relpath: str, sample: str) -> dict[str, Any]:
    """One note as a blind reader sees it."""
    frontmatter, body, _ = vault.read(relpath)
    turns = sessions.turns(frontmatter.get("session"))
    ids = [block_id(str(m)) for m in source_messages(frontmatter)]
    at = [i for i, (k, _, _) in enumerate(turns) if k in ids]
    source = "\n\n".join(turns[i][2].strip() for i in at) or None
    question = None
    if at and frontmatter.get("speaker") == "assistant":
        before = [t for t in turns[: at[0]] if t[1].lower() not in ("assistant", "")]
        question = before[-1][2].strip() if before else None
    return {
        "sample": sample,
        "path": relpath,
        "text": note_sentence(body),
        "context": note_context(body),
        "category": frontmatter.get("category"),
        "speaker": frontmatter.get("speaker"),
        "conversation_title": frontmatter.get("source_title"),
        "source": source,
        "question": question,
        "missing": source is None,
    }


def draw(vault: Vault, seed: int, size: int = SIZE) -> list[dict[str, Any]]:
    """The protocol's two samples: ``size`` written notes, then ``size`` engrams (fewer when there are fewer)."""
    notes, engrams = atomic_paths(vault)
    random.seed(seed)
    written = random.sample(notes, min(size, len(notes)))
    kept = random.sample(engrams, min(size, len(engrams)))
    sessions = Sessions(vault)
    return [row(vault, sessions, p, "written") for p in written] + [row(vault, sessions, p, "engram") for p in kept]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--vault", required=True, type=Path)
    parser.add_argument("--seed", required=True, type=int)
    parser.add_argument("--size", type=int, default=SIZE)
    parser.add_argument("--out", type=Path, help="the JSONL to write (default: standard output)")
    args = parser.parse_args(argv)
    rows = draw(Vault.open(args.vault), args.seed, args.size)
    text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
    if args.out:
        args.out.write_text(text, encoding="utf-8")
        print(f"wrote {len(rows)} notes to {args.out}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
