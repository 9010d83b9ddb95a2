"""The Note Quality Gate against hand labels, and what `vault keep --all-passing` would promote.

    python benchmarks/bench_quality.py                 # figures with the shipped weights
    python benchmarks/bench_quality.py --fit           # refit on the training split, print GATE
    python benchmarks/bench_quality.py --no-ingest     # labels only (no fresh ingest of the export)

Labels: tests/data/quality_labels.jsonl and tests/data/quality_labels_current.jsonl (real ChatGPT
export, the previous and the current extractor's notes; `label` good / mangled / fragment / meaningless) and benchmarks/data/quality_locomo_labels.jsonl (keys and labels; the note text is
re-derived by ingesting ../shared/data/locomo; skipped where that data is absent). A note counts
as good only when labelled `good`. The split is by a hash of the note text: 30 % of each file held
out, never seen by the fit or the threshold choice. Precision = share of passed notes labelled good; recall
= share of good notes passed. Targets: precision >= 0.95, recall >= 0.90.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from vault_pipeline.ingest.quality import GATE, GateModel, features, fit, sentence_problems, unfaithful  # noqa: E402

LABELS = REPO / "tests" / "data" / "quality_labels.jsonl"
# Notes of the extractor after the fidelity work, labelled the same way; never fitted on.
CURRENT_LABELS = REPO / "tests" / "data" / "quality_labels_current.jsonl"
LOCOMO_LABELS = REPO / "benchmarks" / "data" / "quality_locomo_labels.jsonl"
SHARED = Path(os.environ.get("VAULT_SHARED_DATA", REPO.parent / "shared" / "data"))
HELD_OUT_SHARE = 30  # percent
TARGET_PRECISION = 0.95


def load(path: Path) -> list[dict[str, Any]]:
    """The rows of a JSONL label file (blank lines skipped)."""
    with path.open(encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def held_out(row: Mapping[str, Any]) -> bool:
    """Whether a labelled note is in the held-out split (a stable hash of its text)."""
    digest = hashlib.sha256(str(row["text"]).encode("utf-8")).digest()
    return digest[0] * 100 // 256 < HELD_OUT_SHARE


def good(row: Mapping[str, Any]) -> bool:
    """Whether a labelled note is one worth keeping."""
    return row["label"] == "good"


def passes(row: Mapping[str, Any], model: GateModel = GATE) -> bool:
    """The gate's verdict on a labelled note (faithfulness checked against its source excerpt, if any)."""
    text, category, source = str(row["text"]), str(row.get("category") or "fact"), row.get("source_excerpt")
    if sentence_problems(text, category, model, source=str(source) if source else None):
        return False
    return not (source and unfaithful(text, str(source)))


def scores(rows: Sequence[Mapping[str, Any]], model: GateModel = GATE) -> dict[str, float | None]:
    """Precision on what passes, recall of the good notes, and counts."""
    passed = [r for r in rows if passes(r, model)]
    hits = sum(good(r) for r in passed)
    goods = sum(good(r) for r in rows)
    return {
        "notes": len(rows),
        "good": goods,
        "passed": len(passed),
        "precision": round(hits / len(passed), 3) if passed else None,
        "recall": round(hits / goods, 3) if goods else None,
    }


# --------------------------------------------------------------------------- fitting


def _pr(probs: Sequence[float], labels: Sequence[bool], threshold: float) -> tuple[float, float]:
    passed = [lab for p, lab in zip(probs, labels) if p >= threshold]
    goods = sum(labels)
    return (sum(passed) / len(passed) if passed else 1.0, sum(passed) / goods if goods else 1.0)


def fit_gate(rows: Sequence[Mapping[str, Any]], folds: int = 5) -> GateModel:
    """Weights fitted on ``rows``; threshold: the lowest whose out-of-fold precision reaches the target."""
    feats = [features(str(r["text"]), r.get("source_excerpt")) for r in rows]
    labels = [good(r) for r in rows]
    probs = [0.0] * len(rows)
    for k in range(folds):
        train = [i for i in range(len(rows)) if i % folds != k]
        model = fit([feats[i] for i in train], [labels[i] for i in train])
        for i in range(k, len(rows), folds):
            probs[i] = model.probability(feats[i])
    candidates = sorted({round(p, 3) for p in probs})
    reached = [t for t in candidates if _pr(probs, labels, t)[0] >= TARGET_PRECISION]
    # Out of reach: the most precise threshold that still passes a quarter of the good notes.
    usable = [t for t in candidates if _pr(probs, labels, t)[1] >= 0.25] or candidates
    threshold = reached[0] if reached else max(usable, key=lambda t: (_pr(probs, labels, t)[0], -t))
    final = fit(feats, labels)
    # Never stricter than a note with no sign of a fragment at all (base rates differ across folds).
    clean = final.probability(dict.fromkeys(final.weights, False))
    return GateModel(final.weights, final.bias, round(min(threshold, clean - 1e-3), 3))


# --------------------------------------------------------------------------- fresh ingest


def export_pass_rate(export: Path) -> dict[str, Any]:
    """Ingest the real export into a fresh vault (offline model) and dry-run `keep --all-passing`."""
    from vault_pipeline.ingest.keep import keep
    from vault_pipeline.models.build import build_llm
    from vault_pipeline.pipeline import ingest
    from vault_pipeline.vault.files import Vault

    with tempfile.TemporaryDirectory() as tmp:
        vault = Vault.init(Path(tmp) / "vault")
        started = time.perf_counter()
        ingest(vault, [export], build_llm("offline"))
        ingested = time.perf_counter() - started
        started = time.perf_counter()
        report = keep(vault, all_passing=True, dry_run=True)
        gated = time.perf_counter() - started
        total = len(report.kept) + len(report.refused)
    return {
        "inbox notes": total,
        "would be kept": len(report.kept),
        "pass rate": round(len(report.kept) / total, 3) if total else 0.0,
        "ingest seconds": round(ingested, 1),
        "keep --dry-run seconds": round(gated, 1),
    }


def locomo_rows(labels: Path, data: Path) -> list[dict[str, Any]] | None:
    """LoCoMo label rows with their note text re-derived by ingesting the data; None if absent."""
    if not labels.exists() or not data.exists():
        return None
    from vault_pipeline.ingest.keep import note_sentence
    from vault_pipeline.models.build import build_llm
    from vault_pipeline.pipeline import ingest
    from vault_pipeline.vault.files import Vault

    with tempfile.TemporaryDirectory() as tmp:
        vault = Vault.init(Path(tmp) / "vault")
        ingest(vault, [data], build_llm("offline"))
        notes = {}
        for relpath in vault.iter_note_paths():
            if relpath.startswith("inbox/"):
                frontmatter, body, _ = vault.read(relpath)
                sentence = note_sentence(body)
                notes[hashlib.sha256(sentence.encode("utf-8")).hexdigest()] = (sentence, frontmatter.get("category"))
    # Labels whose sentence a later extractor no longer produces do not apply (benchmarks/data/README.md).
    return [
        {**row, "text": notes[row["note_sha256"]][0], "category": notes[row["note_sha256"]][1]}
        for row in load(labels)
        if row.get("note_sha256") in notes
    ]


# --------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--labels", type=Path, default=LABELS)
    parser.add_argument("--export", type=Path, default=SHARED / "exports" / "chatgpt-pkuppens-2023.json")
    parser.add_argument("--locomo", type=Path, default=SHARED / "locomo" / "locomo-dev.json")
    parser.add_argument("--fit", action="store_true", help="refit on the training split and print the GATE")
    parser.add_argument("--no-ingest", action="store_true", help="skip the fresh ingest of the export")
    args = parser.parse_args(argv)
    # Both real-export label files train and test: the same hash split cuts each of them.
    sets = {args.labels.name: load(args.labels)}
    if CURRENT_LABELS.exists():
        sets[CURRENT_LABELS.name] = load(CURRENT_LABELS)
    train = [r for rows in sets.values() for r in rows if not held_out(r)]
    model = GATE
    if args.fit:
        model = fit_gate(train)
        print(f"GATE = {model!r}")
    print(f"real export labels, training split ({len(train)} notes): {scores(train, model)}")
    for name, rows in sets.items():
        print(
            f"{name}, held out ({HELD_OUT_SHARE} %, never fitted on): {scores([r for r in rows if held_out(r)], model)}"
        )
    test = [r for rows in sets.values() for r in rows if held_out(r)]
    print(f"all real-export labels, held out: {scores(test, model)}")
    locomo = locomo_rows(LOCOMO_LABELS, args.locomo)
    if locomo is None:
        print("LoCoMo labels: skipped (labels or ../shared/data/locomo absent)")
    else:
        print(f"LoCoMo labels (all held out: never fitted on): {scores(locomo, model)}")
    if not args.no_ingest:
        if args.export.exists():
            print(f"fresh ingest of {args.export.name}: {export_pass_rate(args.export)}")
        else:
            print(f"fresh ingest: skipped ({args.export} absent)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
