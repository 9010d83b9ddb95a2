"""Draw session notes to read their summaries against their transcripts (issue 49).

Prints, for ``--n`` session notes drawn with ``--seed`` from the sorted file names of
``<vault>/sessions``, the file name, the transcript's length in words and the summary section, so
a reader can judge each summary (faithful, or showing fragments) with its transcript open.
The same seed draws the same files from two vaults of the same export, so builds compare.

    python benchmarks/draw_summaries.py --vault V [--n 20] [--seed 49]
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path


def draw(vault: Path, n: int, seed: int) -> list[Path]:
    files = sorted((vault / "sessions").glob("*.md"))
    return random.Random(seed).sample(files, min(n, len(files)))


def summary_of(text: str) -> tuple[str, int]:
    """The note's summary section and its transcript's length in words."""
    _, _, rest = text.partition("## Summary")
    summary, _, transcript = rest.partition("## Transcript")
    return summary.strip(), len(transcript.split())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--vault", type=Path, required=True)
    parser.add_argument("--n", type=int, default=20)
    parser.add_argument("--seed", type=int, default=49)
    args = parser.parse_args()
    for path in draw(args.vault, args.n, args.seed):
        summary, words = summary_of(path.read_text(encoding="utf-8"))
        print(f"##### {path.name} | transcript words {words}\n{summary}\n")


if __name__ == "__main__":
    main()
