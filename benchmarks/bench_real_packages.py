"""Precision of whole packages on a real archive: labelled blocks of the 14 real questions.

``vault_example/calibration/export.jsonl`` labels the gate's candidates; this labels what reaches
the user. ``benchmarks/data/export_package_labels.jsonl`` holds, for each of its 14 questions, every
block of the package a fresh vault of the export gave at 1,500 tokens, labelled by hand
at the same altitude as the gate's labels: relevant to the question's subject, or off-topic, and a
contaminant when an off-topic block shares the question's words ("Scrum" on a résumé line for a
question about sprint length).

This script asks the questions again of a vault (``vault query --batch --json --explain``, one
process) and counts, over the blocks it gets now: labelled relevant, labelled off-topic, labelled
contaminants, and unlabelled (blocks the labelled packages did not hold: a change in the funnel
shows up here first). Each count is split by how the block came in: the one-hop expansion
(``expanded_from`` in the trace) or retrieval.

    python benchmarks/bench_real_packages.py --vault V [--budget 1500]
    python benchmarks/bench_real_packages.py --vault V --held-out LABELS...
    python benchmarks/bench_real_packages.py --vault V [--held-out LABELS...] --model openai/gpt-4o-mini

``--model`` makes that model the gate (instructor + LiteLLM, any provider by model string), judging
the candidates' text, as ``[models] gate`` does for ``vault query``.

With ``--held-out``, each question is answered in this process with the offline gate refitted on
the given label files without that question's lines (leave one query out, ``gatefit.fit_model``):
the shipped gate was fitted on ``export.jsonl``, whose candidates are these questions' own, so
only the held-out run measures it on questions it did not see.

``V``: ``vault init V``, ``vault ingest ../shared/data/exports/chatgpt-pkuppens-2023.json --vault V``,
``vault keep --vault V --all-passing``, ``vault index --vault V`` (ingest is deterministic, so a fresh
vault gives the chunk ids the labels name).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_absent import ask

LABELS = Path(__file__).resolve().parent / "data" / "export_package_labels.jsonl"


def load(path: Path) -> dict[tuple[str, str], dict]:
    """(query, chunk id) -> its label line."""
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return {(row["query"], row["chunk_id"]): row for row in rows}


def tally(packages: list[dict], labels: dict[tuple[str, str], dict]) -> dict[str, Counter]:
    """Per route ("hop", "retrieved", "all"): blocks, relevant, off_topic, contaminant, unlabelled."""
    counts = {route: Counter() for route in ("hop", "retrieved", "all")}
    for package in packages:
        hop = {t["chunk_id"] for t in package["trace"] if t.get("expanded_from")}
        for block in package["blocks"]:
            label = labels.get((package["query"], block["chunk_id"]))
            kind = "unlabelled" if label is None else label["label"].replace("-", "_")
            for route in ("hop" if block["chunk_id"] in hop else "retrieved", "all"):
                counts[route]["blocks"] += 1
                counts[route][kind] += 1
                counts[route]["contaminant"] += bool(label and label["contaminant"])
    return counts


def held_out_packages(
    vault_root: Path, queries: list[str], label_files: list[Path], budget: int, model: str | None = None
) -> list[dict]:
    """Each question's package (as ``--json`` prints it), gated by weights fitted without its labels
    (``model``: by that gate model instead)."""
    from bench_contamination import held_out_gates, held_out_packages  # puts the repository on the path

    from vault_pipeline.models.build import build_llm
    from vault_pipeline.models.embed import build_embedder
    from vault_pipeline.retrieve.calibrate import load_label_files
    from vault_pipeline.vault.files import Vault

    embedder = build_embedder("minilm")
    gates = held_out_gates(load_label_files(label_files), embedder)
    vault = Vault.open(vault_root)
    try:
        llm = build_llm(model) if model else None
        packages = held_out_packages(vault, [(query, None) for query in queries], embedder, gates, budget, llm_gate=llm)
        return [json.loads(package.to_json(indent=None, trace=True)) for package in packages]
    finally:
        vault.close()


def share(part: int, whole: int) -> str:
    return f"{part / whole:.1%}" if whole else "-"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vault", type=Path, required=True, help="a fresh vault of the export, indexed")
    parser.add_argument("--labels", type=Path, default=LABELS)
    parser.add_argument("--budget", type=int, default=1500)
    parser.add_argument(
        "--held-out", type=Path, nargs="+", metavar="LABELS", help="refit the gate without each question's labels"
    )
    parser.add_argument("--model", help="the gate is this model (a LiteLLM model string), as [models] gate")
    args = parser.parse_args(argv)
    labels = load(args.labels)
    queries = list(dict.fromkeys(query for query, _ in labels))
    if args.held_out:
        packages = held_out_packages(args.vault, queries, args.held_out, args.budget, args.model)
        gate = f"gate refitted without each question on {' '.join(p.name for p in args.held_out)}"
    else:
        if args.model:  # ``vault query`` reads it as [models] gate
            os.environ["VAULT_GATE_MODEL"] = args.model
        packages = ask(args.vault, queries, args.budget)
        gate = "the vault's gate"
    gate += f", judged by {args.model}" if args.model else ""
    print(f"{len(queries)} questions, vault {args.vault}, budget {args.budget}, {gate}; shares of the labelled blocks")
    for package in packages:
        c = tally([package], labels)["all"]
        labelled = c["blocks"] - c["unlabelled"]
        print(
            f"  {c['blocks']:3d} blocks ({c['unlabelled']} unlabelled): off-topic {c['off_topic']:2d}, "
            f"contaminants {c['contaminant']:2d} | {package['query']}" + ("" if labelled else "  (no labelled block)")
        )
    for route, c in tally(packages, labels).items():
        labelled = c["blocks"] - c["unlabelled"]
        print(
            f"{route:>9}: {c['blocks']} blocks, {c['unlabelled']} unlabelled; of the labelled: "
            f"off-topic {c['off_topic']} ({share(c['off_topic'], labelled)}), "
            f"contaminants {c['contaminant']} ({share(c['contaminant'], labelled)})"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
