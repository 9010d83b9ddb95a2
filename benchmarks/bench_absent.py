"""Questions the vault cannot answer beside questions it can: does the package know when there is nothing?

One command, offline, in one table:

* **The export** (a vault of the real ChatGPT export; built in ``--vault`` when that folder is
  missing): the 30 questions of ``benchmarks/data/absent_questions.jsonl``, whose subject words
  never occur in the export (each is counted first; a question whose word occurs is left out and
  named), and the 27 answerable questions of ``vault_example/calibration/export.jsonl`` and
  ``benchmarks/data/export_questions.jsonl``.
* **LoCoMo** (one vault per conversation, built in ``--locomo-out`` when missing): each vault is
  asked 20 questions of other conversations that name a speaker of theirs who never occurs in it
  ("When did Jon lose his job as a banker?" of Caroline and Melanie's), and its own questions.
  conv-26 and conv-30 are the tuning part (the found model was fitted on them), conv-41, 42 and 43
  are reported.

For the absent questions: how many packages are empty and marked so (``found: false``), and the
tokens of the rest (the aim: at least 80 % empty, the rest at most 200 tokens). For the answerable
ones: how many are found, and their evidence: for LoCoMo a gold turn in the package (as
``bench_locomo.py`` counts it); for the export's 14 labelled questions a block from a chat that
holds a candidate labelled relevant for the question.

    python benchmarks/bench_absent.py [--vault DIR] [--locomo-out DIR] [--budget 1500]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_locomo import hits, raw_turns
from evidence_sets import (
    CALIBRATION,
    EXPORT,
    LOCOMO,
    check_absent,
    cross_questions,
    export_questions,
    export_vault,
    is_tuning,
    lines,
    locomo_vaults,
    occurrences,
    own_questions,
    packages,
)

from vault_pipeline.models.embed import build_embedder
from vault_pipeline.retrieve.package import ContextPackage

EMPTY_AIM, REST_TOKENS = 0.80, 200
__all__ = ["ask", "occurrences", "table"]


def ask(vault: Path, queries: list[str], budget: int | None) -> list[dict]:
    """The packages of ``queries`` as ``vault query --batch --json --explain`` prints them (one process)."""
    import json
    import os
    import subprocess
    import tempfile

    repo = Path(__file__).resolve().parent.parent
    with tempfile.TemporaryDirectory() as tmp:
        batch = Path(tmp) / "queries.jsonl"
        batch.write_text("".join(json.dumps({"query": q}) + "\n" for q in queries), encoding="utf-8")
        command = [sys.executable, "-m", "vault_pipeline.cli", "query", "--batch", str(batch), "--json", "--explain"]
        command += ["--vault", str(vault), *(["--budget", str(budget)] if budget else [])]
        env = {**os.environ, "PYTHONPATH": str(repo)}
        result = subprocess.run(command, capture_output=True, text=True, check=True, env=env)
    return [json.loads(line) for line in result.stdout.splitlines() if line.strip()]


def relevant_chats() -> dict[str, set[str]]:
    """Query -> the chats holding a candidate labelled relevant for it (``export.jsonl``)."""
    chats: dict[str, set[str]] = defaultdict(set)
    for row in lines(CALIBRATION / "export.jsonl"):
        if row["label"] == "relevant" and row.get("conversation"):
            chats[row["query"]].add(row["conversation"])
    return chats


def export_rows(root: Path, embedder, budget: int) -> list[dict]:
    """Each export question with its package's figures."""
    asked = export_questions()
    asked = [r for r in asked if r["answerable"]] + check_absent([r for r in asked if not r["answerable"]], EXPORT)
    vault = export_vault(root)
    try:
        found = packages(vault, [r["query"] for r in asked], embedder, budget=budget)
    finally:
        vault.close()
    chats = relevant_chats()
    out = []
    for row, package in zip(asked, found):
        wanted = chats.get(row["query"])
        evidence = None
        if row["answerable"] and wanted:
            evidence = any(b.item.conversation.split(":")[-1] in wanted for b in package.blocks)
        out.append(_row(row, package, "export", evidence))
    return out


def locomo_rows(out_dir: Path, embedder, budget: int) -> list[dict]:
    """Each LoCoMo vault's own questions and other conversations' questions, with their figures."""
    turns = raw_turns(LOCOMO)
    turn_words = {(sample, t["id"]): t["words"] for sample, ts in turns.items() for t in ts}
    rows = []
    for sample, vault in locomo_vaults(out_dir).items():
        part = "tuning" if is_tuning(sample) else "reported"
        asked = own_questions(LOCOMO, sample) + cross_questions(LOCOMO, sample)
        for row, package in zip(asked, packages(vault, [r["query"] for r in asked], embedder, budget=budget)):
            evidence = None
            if row["answerable"]:
                blocks = [b.to_dict() for b in package.blocks]
                evidence = bool(hits(blocks, row, turn_words))
            rows.append(_row(row, package, f"LoCoMo {part}", evidence))
    return rows


def _row(row: dict, package: ContextPackage, where: str, evidence: bool | None) -> dict:
    return {
        "where": where,
        "query": row["query"],
        "answerable": row["answerable"],
        "found": package.found,
        "blocks": len(package.blocks),
        "tokens": package.tokens,
        "evidence": evidence,
    }


def table(rows: list[dict]) -> None:
    """One line per (where, answerable or not), and the absent questions all together."""
    print(
        "| questions | n | empty, marked found: false | the rest: at most 200 tokens | tokens mean | found | evidence |"
    )
    print("|---|---|---|---|---|---|---|")
    groups: dict[tuple[str, bool], list[dict]] = defaultdict(list)
    for r in rows:
        groups[(r["where"], r["answerable"])].append(r)
        if not r["answerable"]:
            groups[("all", False)].append(r)
    for (where, answerable), mine in sorted(groups.items(), key=lambda kv: (kv[0][1], kv[0][0] == "all", kv[0][0])):
        print(_line(f"{where}, {'answerable' if answerable else 'not in the vault'}", mine))


def _line(what: str, mine: list[dict]) -> str:
    empty = sum(not r["found"] and not r["blocks"] for r in mine)
    rest = [r for r in mine if r["found"] or r["blocks"]]
    small = sum(r["tokens"] <= REST_TOKENS for r in rest)
    judged = [r["evidence"] for r in mine if r["evidence"] is not None]
    evidence = f"{sum(judged) / len(judged):.1%} of {len(judged)}" if judged else "-"
    return (
        f"| {what} | {len(mine)} | {empty} ({empty / len(mine):.1%}) | {small} of {len(rest)} | "
        f"{statistics.mean(r['tokens'] for r in mine):.0f} | {sum(r['found'] for r in mine) / len(mine):.1%} | "
        f"{evidence} |"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vault", type=Path, default=Path("/tmp/vault-evidence-export"), help="a vault of the export")
    parser.add_argument("--locomo-out", type=Path, default=Path("/tmp/vault-evidence-locomo"))
    parser.add_argument("--budget", type=int, default=1500)
    parser.add_argument("--verbose", action="store_true", help="a line per absent question")
    args = parser.parse_args(argv)
    embedder = build_embedder("minilm")
    rows = export_rows(args.vault, embedder, args.budget) + locomo_rows(args.locomo_out, embedder, args.budget)
    if args.verbose:
        for r in rows:
            if not r["answerable"] or not r["found"]:
                print(
                    f"  {'found' if r['found'] else 'empty':>5} {r['blocks']:3d} blocks {r['tokens']:5d} tokens | {r['where']} | {r['query']}"
                )
    table(rows)
    absent = [r for r in rows if not r["answerable"]]
    empty = sum(not r["found"] and not r["blocks"] for r in absent) / len(absent)
    print(f"absent questions: {len(absent)}; empty and marked {empty:.1%} (aim {EMPTY_AIM:.0%})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
