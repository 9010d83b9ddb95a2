"""Questions the archive cannot answer: how much does the funnel put in their packages?

A "small, precise" package for a question whose subject never occurs in the archive should be
empty, or nearly so. This benchmark asks such questions of a vault that holds the real ChatGPT
export and prints, per question, the blocks and tokens of its package, how many of them came from
the one-hop expansion, and where the depth stopped.

Each line of ``benchmarks/data/absent_questions.jsonl`` is ``{"query", "absent"}``: ``absent`` lists
the words that make up the subject. Before the questions are asked, every one of those words is
counted in the export's text (case-insensitive): a question whose word occurs is reported as not
absent, so the file cannot claim an absence the export does not have.

    python benchmarks/bench_absent.py --vault V --export ../shared/data/exports/chatgpt-pkuppens-2023.json

``V`` is a vault that holds the export, indexed (``vault init V``, ``vault ingest EXPORT --vault V``,
``vault index --vault V``; ``vault keep --all-passing`` first too, as a user would). Offline: the
offline planner and the vault's gate; the budget is the vault's default unless ``--budget`` is given.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent


QUESTIONS = REPO / "benchmarks" / "data" / "absent_questions.jsonl"


def occurrences(text: str, word: str) -> int:
    """How often ``word`` occurs in ``text`` as the start of a word, case-insensitive ("subsidie"
    counts "subsidieaanvraag")."""
    return len(re.findall(r"(?<!\w)" + re.escape(word), text, re.I))


def ask(vault: Path, queries: list[str], budget: int | None) -> list[dict[str, Any]]:
    """The packages of ``queries`` as ``vault query --batch --json --explain`` prints them (one process)."""
    with tempfile.TemporaryDirectory() as tmp:
        batch = Path(tmp) / "queries.jsonl"
        batch.write_text("".join(json.dumps({"query": q}) + "\n" for q in queries), encoding="utf-8")
        command = [sys.executable, "-m", "vault_pipeline.cli", "query", "--batch", str(batch), "--json", "--explain"]
        command += ["--vault", str(vault), *(["--budget", str(budget)] if budget else [])]
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        result = subprocess.run(command, capture_output=True, text=True, check=True, env=env)
    return [json.loads(line) for line in result.stdout.splitlines() if line.strip()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vault", type=Path, required=True, help="a vault holding the export, indexed")
    parser.add_argument("--export", type=Path, required=True, help="the export the vault was built from")
    parser.add_argument("--questions", type=Path, default=QUESTIONS)
    parser.add_argument("--budget", type=int, default=None)
    args = parser.parse_args(argv)
    source = args.export.read_text(encoding="utf-8")
    rows = [json.loads(line) for line in args.questions.read_text(encoding="utf-8").splitlines() if line.strip()]
    packages = ask(args.vault, [row["query"] for row in rows], args.budget)
    print(f"{len(rows)} questions, vault {args.vault}, export {args.export}")
    print(
        "blocks  tokens  from the hop  depth stopped at      | question (absent words: count in the export)"
        " -> words the package says no note holds"
    )
    totals = {"absent": 0, "blocks": 0, "tokens": 0, "empty": 0, "named": 0}
    for row, package in zip(rows, packages):
        counts = {word: occurrences(source, word) for word in row["absent"]}
        absent = not any(counts.values())
        blocks = package["blocks"]
        shown = {block["id"] for block in blocks}
        hop = sum(1 for t in package["trace"] if t.get("expanded_from") and t["id"] in shown)
        stop = package["stats"]["depth"]["stopped"].split(":")[0]
        words = ", ".join(f"{w}: {n}" for w, n in counts.items())
        flag = "" if absent else "  NOT ABSENT"
        named = package["stats"].get("absent_words") or []
        print(
            f"{len(blocks):6d}  {package['tokens']:6d}  {hop:12d}  {stop:<20}  | {row['query']} ({words})"
            f" -> {', '.join(named) or '-'}{flag}"
        )
        if absent:
            totals["absent"] += 1
            totals["blocks"] += len(blocks)
            totals["tokens"] += package["tokens"]
            totals["empty"] += not blocks
            totals["named"] += bool(named)
    n = max(totals["absent"], 1)
    print(
        f"absent subjects: {totals['absent']} questions; empty packages {totals['empty']}; "
        f"packages naming a word no note holds {totals['named']}; "
        f"mean {totals['blocks'] / n:.1f} blocks, {totals['tokens'] / n:.0f} tokens a package"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
