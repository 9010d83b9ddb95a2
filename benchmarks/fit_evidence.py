"""Fit the evidence thresholds: which survivors become blocks, and whether anything was found.

Depth follows the evidence (docs/decisions/0070-depth-follows-the-evidence.md). Two fits, each
measured with every query held out in turn (leave one query out):

1. **The stop threshold** on the fitted gate's probability: a survivor below it is no block. Rows
   are labelled candidates and blocks with the probability a gate fitted *without their query*
   gives them: the candidate pools of ``vault_example/calibration/`` (labels, traps, export) and
   the labelled package blocks of ``benchmarks/data/export_package_labels.jsonl`` (asked of a
   vault of the export, every survivor a block). The threshold is the one with the best F1 of
   relevant blocks on the other queries.
2. **The found model** (``relevance.FoundModel``): a logistic model over what a package knows of
   itself (best relevance, best cosine, the share of the prompt's words no note holds, a name no
   note holds), on questions labelled answerable or not: the export's (``evidence_sets``),
   LoCoMo's tuning conversations' own and other conversations' questions, and the written sets'
   questions asked of a vault of their candidates. Its threshold keeps
   97.5 % of the answerable questions of the other queries found.

    python benchmarks/fit_evidence.py [--export-vault DIR] [--locomo-out DIR]

The vaults are built in those folders when missing (``evidence_sets``). It prints the held-out
figures and the numbers that ``models/offline/relevance.py`` ships (``STOP``, ``FOUND``).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from evidence_sets import (
    CALIBRATION,
    DATA,
    EXPORT,
    LOCOMO,
    check_absent,
    cross_questions,
    export_questions,
    export_vault,
    is_tuning,
    lines,
    locomo_vaults,
    own_questions,
    packages,
)

from vault_pipeline.models.embed import build_embedder
from vault_pipeline.models.offline.relevance import FOUND_FEATURES, fit_found
from vault_pipeline.retrieve.calibrate import load_label_files
from vault_pipeline.retrieve.gatefit import cross_validate, fit_model, label_signals

FOUND_AIM = 0.975  # answerable questions kept found on the training folds (as the gate aims: gatefit.aim)
SURE_AIM = 0.965  # answerable questions kept whole: 1 % more than the threshold lets go get the closest blocks


def f1_threshold(rows: list[tuple[str, float, bool]]) -> float:
    """The probability threshold with the best F1 of relevant rows (ties: the lower threshold)."""
    relevant = sum(r for _, _, r in rows)
    best, chosen = -1.0, 0.0
    for t in sorted({p for _, p, _ in rows}):
        kept = [r for _, p, r in rows if p >= t]
        hit = sum(kept)
        f1 = 2 * hit / (len(kept) + relevant) if kept else 0.0
        if f1 > best + 1e-12:
            best, chosen = f1, t
    return chosen


def pool_rows(embedder) -> list[tuple[str, float, bool]]:
    """(query, held-out probability, relevant) of every labelled candidate of the three pools."""
    labels = load_label_files([CALIBRATION / n for n in ("labels.jsonl", "traps.jsonl", "export.jsonl")])
    held = cross_validate(label_signals(labels, embedder))
    return [(h.query, h.probability, h.relevant) for h in held]


def package_rows(vault, embedder) -> list[tuple[str, float, bool]]:
    """(query, held-out probability, relevant) of the labelled package blocks that a vault of the export
    still gives as survivors of the gate (read from the trace: the evidence threshold does not cut them)."""
    labels = {(row["query"], row["chunk_id"]): row for row in lines(DATA / "export_package_labels.jsonl")}
    pools = load_label_files([CALIBRATION / n for n in ("labels.jsonl", "traps.jsonl", "export.jsonl")])
    signals = label_signals(pools, embedder)
    rows = []
    for query in dict.fromkeys(q for q, _ in labels):
        gate = fit_model([r for r in signals if r.item.query != query])
        (package,) = packages(vault, [query], embedder, relevance=gate, stop=0.0)
        for entry in package.trace:  # every survivor of the gate, whether or not it became a block
            label = labels.get((query, entry.chunk_id))
            if label is not None and entry.gate == "keep" and entry.probability is not None:
                rows.append((query, entry.probability, label["label"] == "relevant"))
    return rows


def held_out_stop(rows: list[tuple[str, float, bool]]) -> None:
    """Leave one query out: each query's rows judged by the threshold fitted on the others."""
    kept = hit = relevant = 0
    for query in sorted({q for q, _, _ in rows}):
        t = f1_threshold([r for r in rows if r[0] != query])
        mine = [r for r in rows if r[0] == query]
        kept += sum(p >= t for _, p, _ in mine)
        hit += sum(p >= t and r for _, p, r in mine)
        relevant += sum(r for _, _, r in mine)
    print(
        f"  held out: recall {hit / max(relevant, 1):.3f} ({hit}/{relevant}), precision {hit / max(kept, 1):.3f} ({hit}/{kept})"
    )


def found_rows(export_root: Path, locomo_out: Path, embedder) -> list[dict]:
    """Each labelled question with the found model's features, as the funnel computes them."""
    rows = []
    vault = export_vault(export_root)
    asked = export_questions()
    asked = [r for r in asked if r["answerable"]] + check_absent([r for r in asked if not r["answerable"]], EXPORT)
    rows += _features(vault, asked, embedder)
    vault.close()
    for sample, v in locomo_vaults(locomo_out).items():
        if is_tuning(sample):
            rows += _features(v, own_questions(LOCOMO, sample) + cross_questions(LOCOMO, sample), embedder)
    return rows + written_rows(embedder)


def written_rows(embedder) -> list[dict]:
    """The written sets' questions (``labels.jsonl``, ``traps.jsonl``), each answerable, asked of a vault
    of all their candidates (``bench_contamination.build``): the traps' relevant notes share few words
    with their question, so the words alone must not say "nothing"."""
    import tempfile

    from bench_contamination import LABELS, build

    labels = load_label_files(LABELS)
    asked = sorted({(item.query, item.intent_domain) for item in labels})
    with tempfile.TemporaryDirectory(prefix="vault-evidence-written-") as tmp:
        vault = build(labels, Path(tmp), embedder)
        try:
            found = packages(vault, [q for q, _ in asked], embedder, intents=[i for _, i in asked])
        finally:
            vault.close()
    return [
        {"query": q, "set": "written sets", "answerable": True, **dict(p.stats.walk.found.features)}
        for (q, _), p in zip(asked, found)
        if p.stats is not None and p.stats.walk.found is not None
    ]


def _features(vault, asked: list[dict], embedder) -> list[dict]:
    found = packages(vault, [r["query"] for r in asked], embedder)
    return [
        {"query": r["query"], "set": r["set"], "answerable": r["answerable"], **dict(p.stats.walk.found.features)}
        for r, p in zip(asked, found)
        if p.stats is not None and p.stats.walk.found is not None
    ]


def fit_found_model(rows: list[dict]) -> tuple[dict[str, float], float, float, float]:
    """Weights, bias, threshold and sure level on ``rows``: the threshold keeps ``FOUND_AIM`` of the
    answerable questions found, the sure level ``SURE_AIM`` of them whole (those between the two get
    the closest few blocks, marked)."""
    weights, bias = fit_found(rows, [r["answerable"] for r in rows])
    scores = sorted((_p(weights, bias, r) for r in rows if r["answerable"]), reverse=True)

    def keeping(aim: float) -> float:
        return math.floor(scores[min(len(scores), max(1, math.ceil(aim * len(scores)))) - 1] * 1e6) / 1e6

    return weights, bias, keeping(FOUND_AIM), keeping(SURE_AIM)


def _p(weights: dict[str, float], bias: float, row: dict) -> float:
    x = bias + sum(w * float(row.get(n, 0.0)) for n, w in weights.items())
    return 1 / (1 + math.exp(-x)) if x >= 0 else math.exp(x) / (1 + math.exp(x))


def held_out_found(rows: list[dict]) -> None:
    """Leave one question out: found, only the closest blocks, or empty, by the model fitted on the others."""
    verdicts = []
    for i, row in enumerate(rows):
        weights, bias, threshold, sure = fit_found_model(rows[:i] + rows[i + 1 :])
        p = _p(weights, bias, row)
        verdicts.append((row, "found" if p >= sure else "closest" if p >= threshold else "empty"))
    for name in sorted({r["set"] for r in rows}):
        for answerable in (True, False):
            mine = [v for row, v in verdicts if row["set"] == name and row["answerable"] == answerable]
            if mine:
                counts = ", ".join(f"{k} {mine.count(k)}" for k in ("found", "closest", "empty"))
                print(f"  held out, {name} {'answerable' if answerable else 'absent'} ({len(mine)}): {counts}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--export-vault", type=Path, default=Path("/tmp/vault-evidence-export"))
    parser.add_argument("--locomo-out", type=Path, default=Path("/tmp/vault-evidence-locomo"))
    args = parser.parse_args(argv)
    embedder = build_embedder("minilm")
    rows = pool_rows(embedder)
    vault = export_vault(args.export_vault)
    blocks = package_rows(vault, embedder)
    vault.close()
    print(f"stop threshold: {len(rows)} labelled candidates of the pools, {len(blocks)} labelled package blocks")
    held_out_stop(rows + blocks)
    stop = f1_threshold(rows + blocks)
    print(f"  fitted on all: STOP = {math.floor(stop * 1e6) / 1e6}")
    found = found_rows(args.export_vault, args.locomo_out, embedder)
    print(
        f"found model: {len(found)} questions ({sum(r['answerable'] for r in found)} answerable); features {list(FOUND_FEATURES)}"
    )
    held_out_found(found)
    weights, bias, threshold, sure = fit_found_model(found)
    rounded = {n: round(w, 4) for n, w in weights.items()}
    fitted = {"weights": rounded, "bias": round(bias, 4), "threshold": threshold, "sure": sure}
    print("  fitted on all: FOUND = " + json.dumps(fitted))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
