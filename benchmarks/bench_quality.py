"""The Note Quality Gate against hand labels, and what `vault keep --all-passing` would promote.

    python benchmarks/bench_quality.py                 # figures with the shipped weights
    python benchmarks/bench_quality.py --fit           # refit (booleans + words) on the training split:
                                                       # nested-CV curve, operating points, held-out figures
    python benchmarks/bench_quality.py --fit --no-lexical   # the same with the boolean features only
    python benchmarks/bench_quality.py --fit --write   # ... and write vault_pipeline/ingest/quality_gate.json
    python benchmarks/bench_quality.py --no-ingest     # labels only (no fresh ingest of the export)

Labels: tests/data/quality_labels.jsonl, quality_labels_current.jsonl and quality_labels_round3.jsonl (real
ChatGPT export, the previous extractor's notes and two samples of the current one's; `label` good / mangled / fragment / meaningless) and benchmarks/data/quality_locomo_labels.jsonl (keys and labels; the note text is
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
import random
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from vault_pipeline.ingest.quality import (  # noqa: E402
    GATE,
    GATE_FILE,
    GateModel,
    collapsed_identifiers,
    dump_gate,
    features,
    fit,
    hard_problems,
    lexical,
    meaning_vectors,
    sentence_problems,
    unfaithful,
)
from vault_pipeline.ingest.quality_model import QualityItem, judge_notes, problems_of  # noqa: E402

LABELS = REPO / "tests" / "data" / "quality_labels.jsonl"
# Notes of the extractor after the fidelity work, labelled the same way; never fitted on.
CURRENT_LABELS = REPO / "tests" / "data" / "quality_labels_current.jsonl"
# A third sample of the current extractor's notes, split and used the same way.
ROUND3_LABELS = REPO / "tests" / "data" / "quality_labels_round3.jsonl"
LOCOMO_LABELS = REPO / "benchmarks" / "data" / "quality_locomo_labels.jsonl"
# A second, blind reading of the 243 held-out notes (id, label, why): how far two careful readers agree.
SECOND_READING = REPO / "tests" / "data" / "quality_labels_second.jsonl"
LABEL_NAMES = ("good", "mangled", "fragment", "meaningless")
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


def passes(row: Mapping[str, Any], model: GateModel = GATE, vector: Sequence[float] | None = None) -> bool:
    """The gate's verdict on a labelled note (faithfulness checked against its source excerpt, if any)."""
    text, category, source = str(row["text"]), str(row.get("category") or "fact"), row.get("source_excerpt")
    if sentence_problems(text, category, model, source=str(source) if source else None, vector=vector):
        return False
    return not (source and unfaithful(text, str(source)))


def scores(rows: Sequence[Mapping[str, Any]], model: GateModel = GATE) -> dict[str, float | None]:
    """Precision on what passes, recall of the good notes, and counts."""
    vectors: Sequence[Sequence[float] | None] = (
        meaning_vectors([str(r["text"]) for r in rows]) if model.meaning else [None] * len(rows)
    )
    return counted(rows, [r for r, v in zip(rows, vectors) if passes(r, model, v)])


def counted(rows: Sequence[Mapping[str, Any]], passed: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Precision of ``passed`` (the rows a gate let through) and recall of the good ``rows``, with counts."""
    hits, goods = sum(good(r) for r in passed), sum(good(r) for r in rows)
    return {
        "notes": len(rows),
        "good": goods,
        "passed": len(passed),
        "precision": round(hits / len(passed), 3) if passed else None,
        "recall": round(hits / goods, 3) if goods else None,
    }


def kappa(pairs: Sequence[tuple[str, str]], names: Sequence[str]) -> float:
    """Cohen's kappa of two readers' labels (agreement beyond what their label shares give by chance)."""
    n = len(pairs)
    observed = sum(a == b for a, b in pairs) / n
    chance = sum(sum(a == k for a, _ in pairs) * sum(b == k for _, b in pairs) for k in names) / (n * n)
    return (observed - chance) / (1 - chance) if chance < 1 else 1.0


def second_reading(
    test: Sequence[Mapping[str, Any]], second: Mapping[str, str], model: GateModel = GATE
) -> dict[str, Any]:
    """The first labels against a blind second reading of the same notes: agreement, kappa, the second
    reader judged as a gate against the first, and the gate against each reading."""
    both = [r for r in test if r["id"] in second]
    pairs = [(str(r["label"]), second[r["id"]]) for r in both]
    goods = [(a == "good", b == "good") for a, b in pairs]
    first_good, second_good = sum(a for a, _ in goods), sum(b for _, b in goods)
    agreed = sum(a and b for a, b in goods)
    passed = [passes(r, model) for r in both]

    def gate_against(truth: Sequence[bool]) -> dict[str, float | None]:
        hits = sum(p and t for p, t in zip(passed, truth))
        return {
            "precision": round(hits / sum(passed), 3) if any(passed) else None,
            "recall": round(hits / sum(truth), 3) if any(truth) else None,
        }

    return {
        "notes": len(both),
        "confusion (first, second)": {f"{a}/{b}": n for (a, b), n in sorted(Counter(pairs).items())},
        "four labels: agreement": round(sum(a == b for a, b in pairs) / len(pairs), 3),
        "four labels: kappa": round(kappa(pairs, LABEL_NAMES), 3),
        "good or not: kappa": round(kappa([(str(a), str(b)) for a, b in goods], ("True", "False")), 3),
        "second reader as a gate, against the first: precision": round(agreed / second_good, 3)
        if second_good
        else None,
        "second reader as a gate, against the first: recall": round(agreed / first_good, 3) if first_good else None,
        "the gate against the second reading": gate_against([b for _, b in goods]),
    }


def model_scores(rows: Sequence[Mapping[str, Any]], llm: Any) -> dict[str, Any]:
    """A quality model's judgement (``[models] quality``) on labelled notes, hard rules included,
    scored like the fitted gate; a note the model could not judge counts as not passed."""
    items = [
        QualityItem(f"n{i:03d}", str(r["text"]), str(r.get("category") or "fact"), r.get("source_excerpt"))
        for i, r in enumerate(rows, 1)
    ]
    started = time.perf_counter()
    judged = judge_notes(items, llm)
    verdicts, errors = judged.verdicts, judged.errors
    seconds = time.perf_counter() - started
    passed = []
    for item, r in zip(items, rows):
        verdict = verdicts.get(item.key)
        source = r.get("source_excerpt")
        if verdict is None or problems_of(verdict) or hard_problems(item.sentence, item.category):
            continue
        if not (source and unfaithful(item.sentence, str(source))):
            passed.append(r)
    return {
        **counted(rows, passed),
        "judged": len(verdicts),
        "errors": errors,
        "seconds": round(seconds, 1),
    }


# --------------------------------------------------------------------------- fitting

FOLDS = 5
TARGET_RECALL = 0.90
# (L2 strength, value of a lexical sign, scale of the meaning vector); chosen by cross-validation on
# the training split only. A larger meaning scale shrinks the 384 meaning weights less.
GRID = tuple((l2, scale, meaning) for l2 in (0.3, 1.0, 3.0) for scale in (0.25, 0.5) for meaning in (1.0, 2.0, 4.0))
_NO_MODEL = GateModel(weights={}, bias=100.0, threshold=0.5)  # sentence_problems() with it: hard rules only


@dataclass(frozen=True)
class Prepared:
    """What the fit needs of each labelled note, computed once."""

    feats: list[dict[str, bool]]
    signs: list[set[str]]
    vectors: list[list[float]] | None  # meaning_vectors of each note; None: the fit reads no meaning
    hard_ok: np.ndarray  # passes the hard rules (word limit, one sentence, faithfulness ...)
    y: np.ndarray
    labels: list[str]


def prepare(rows: Sequence[Mapping[str, Any]], *, with_meaning: bool = True) -> Prepared:
    """Features, lexical signs, meaning vectors, the hard rules' verdict and the label of each row."""
    return Prepared(
        [features(str(r["text"]), r.get("source_excerpt")) for r in rows],
        [lexical(str(r["text"])) for r in rows],
        meaning_vectors([str(r["text"]) for r in rows]) if with_meaning else None,
        np.array([passes(r, _NO_MODEL) for r in rows]),
        np.array([good(r) for r in rows]),
        [str(r["label"]) for r in rows],
    )


def folds(labels: Sequence[str], idx: Sequence[int], k: int, seed: int) -> list[list[int]]:
    """``idx`` cut into k folds, stratified by label, shuffled by a seeded generator."""
    order = list(idx)
    random.Random(seed).shuffle(order)
    order.sort(key=lambda i: labels[i])  # stable: shuffled within each label
    return [order[j::k] for j in range(k)]


def fit_on(data: Prepared, idx: Sequence[int], l2: float, scale: float, meaning: float = 1.0) -> GateModel:
    """The gate fitted on rows ``idx`` (booleans, lexical signs and, if prepared, meaning vectors)."""
    return fit(
        [data.feats[i] for i in idx],
        [bool(data.y[i]) for i in idx],
        signs=[data.signs[i] for i in idx],
        vectors=[data.vectors[i] for i in idx] if data.vectors is not None else None,
        l2=l2,
        scale=scale,
        meaning_scale=meaning,
    )


def gated(data: Prepared, model: GateModel, idx: Sequence[int]) -> np.ndarray:
    """Scores of rows ``idx``: the model's probability, -1 where a hard rule refuses the note."""
    vector = (lambda i: data.vectors[i]) if data.vectors is not None else (lambda i: None)
    return np.array(
        [model.probability(data.feats[i], data.signs[i], vector(i)) if data.hard_ok[i] else -1.0 for i in idx]
    )


def out_of_fold(data: Prepared, idx: Sequence[int], l2: float, scale: float, meaning: float, seed: int) -> np.ndarray:
    """Out-of-fold scores of rows ``idx`` (k-fold within ``idx``)."""
    where = {i: n for n, i in enumerate(idx)}
    scores = np.zeros(len(idx))
    for fold in folds(data.labels, idx, FOLDS, seed):
        model = fit_on(data, [i for i in idx if i not in set(fold)], l2, scale, meaning)
        scores[[where[i] for i in fold]] = gated(data, model, fold)
    return scores


def average_precision(scores: np.ndarray, y: np.ndarray) -> float:
    """Area under the precision-recall curve (notes refused by a hard rule are never passed)."""
    order = np.argsort(-scores, kind="stable")
    hits = np.cumsum(y[order]) * (scores[order] >= 0)
    return float(np.sum(hits / np.arange(1, len(y) + 1) * y[order]) / max(int(y.sum()), 1))


def choose(data: Prepared, idx: Sequence[int], seed: int) -> tuple[float, float, float]:
    """The grid point with the best cross-validated average precision on rows ``idx``."""
    y = data.y[list(idx)]
    lexical_on = any(data.signs)
    grid = [g for g in GRID if (lexical_on or g[1] == GRID[0][1]) and (data.vectors is not None or g[2] == GRID[0][2])]
    return max(grid, key=lambda g: average_precision(out_of_fold(data, idx, *g, seed), y))


def nested_out_of_fold(data: Prepared, seed: int = 0) -> np.ndarray:
    """Out-of-fold scores of every row; each outer fold's L2 and scale chosen on its own training part."""
    everything = range(len(data.y))
    scores = np.zeros(len(data.y))
    for fold in folds(data.labels, everything, FOLDS, seed):
        rest = [i for i in everything if i not in set(fold)]
        model = fit_on(data, rest, *choose(data, rest, seed + 1))
        scores[fold] = gated(data, model, fold)
    return scores


def curve(scores: np.ndarray, y: np.ndarray) -> list[tuple[float, float, float, int]]:
    """(threshold, precision, recall, passed) at every distinct score a note passes at."""
    points = []
    for t in sorted({float(s) for s in scores if s >= 0}):
        passed = scores >= t
        hits = int((passed & y).sum())
        points.append((t, hits / int(passed.sum()), hits / max(int(y.sum()), 1), int(passed.sum())))
    return points


def operating_points(points: Sequence[tuple[float, float, float, int]]) -> dict[str, float | None]:
    """Thresholds on a precision-recall curve: the lowest reaching precision 0.95 (None if none
    does), the most precise passing at least five notes, the highest keeping recall 0.90, and the
    one of best F1."""
    precise = [t for t, p, _, n in points if p >= TARGET_PRECISION and n >= 5]
    recalled = [t for t, _, r, _ in points if r >= TARGET_RECALL]
    f1 = max(points, key=lambda q: 2 * q[1] * q[2] / (q[1] + q[2]) if q[1] + q[2] else 0.0)
    tight = max((q for q in points if q[3] >= 5), key=lambda q: (q[1], q[2]), default=f1)
    return {
        "precision 0.95": precise[0] if precise else None,
        "most precise (5+ notes)": tight[0],
        "recall 0.90": recalled[-1] if recalled else None,
        "best F1": f1[0],
    }


def fit_gate(
    rows: Sequence[Mapping[str, Any]],
    point: str = "best F1",
    *,
    with_lexical: bool = True,
    with_meaning: bool = True,
) -> tuple[GateModel, dict[str, Any]]:
    """The gate fitted on ``rows`` at an operating point chosen on their nested out-of-fold curve."""
    data = prepare(rows, with_meaning=with_meaning)
    if not with_lexical:
        data.signs[:] = [set() for _ in data.signs]  # the scale then changes nothing
    scores = nested_out_of_fold(data)
    points = curve(scores, data.y)
    thresholds = operating_points(points)
    l2, scale, meaning = choose(data, range(len(rows)), seed=1)
    final = fit_on(data, range(len(rows)), l2, scale, meaning)
    threshold = thresholds[point]
    if threshold is None:  # "precision 0.95" out of reach: fall back to the best F1
        threshold = thresholds["best F1"]
    assert threshold is not None
    model = GateModel(final.weights, final.bias, threshold, final.lexicon, final.meaning)
    report = {
        "l2": l2,
        "scale": scale if with_lexical else None,
        "meaning scale": meaning if with_meaning else None,
        "thresholds": thresholds,
        "curve": points,
        "average precision": average_precision(scores, data.y),
    }
    return model, report


def print_fit(report: Mapping[str, Any], train: Sequence[Mapping[str, Any]]) -> None:
    """The nested cross-validated precision-recall curve on the training split, coarsened."""
    print(
        f"training split: {len(train)} notes, {sum(good(r) for r in train)} good; chosen L2 {report['l2']}, "
        f"lexical scale {report['scale']}, meaning scale {report['meaning scale']}"
    )
    print(f"nested {FOLDS}-fold out-of-fold average precision: {report['average precision']:.3f}")
    print("threshold  precision  recall  passed   (out of fold, training split only)")
    shown = None
    for t, p, r, n in report["curve"]:
        if shown is None or abs(r - shown) >= 0.05 or t in report["thresholds"].values():
            print(f"{t:9.4f}  {p:9.3f}  {r:6.3f}  {n:6d}")
            shown = r
    print(f"operating points (thresholds, chosen on the training split): {report['thresholds']}")
    tight = report["thresholds"]["most precise (5+ notes)"]
    _, p, r, n = next(q for q in report["curve"] if q[0] == tight)
    print(f"most precise out-of-fold point with 5+ notes passing: precision {p:.3f}, recall {r:.3f}, {n} notes")


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
    parser.add_argument(
        "--point", choices=("precision 0.95", "most precise (5+ notes)", "recall 0.90", "best F1"), default="best F1"
    )
    parser.add_argument("--no-lexical", action="store_true", help="with --fit: no word weights")
    parser.add_argument("--no-meaning", action="store_true", help="with --fit: no meaning (MiniLM vector) weights")
    parser.add_argument("--write", action="store_true", help="with --fit: write the fitted gate to the package")
    parser.add_argument(
        "--train",
        nargs="+",
        metavar="FILE",
        help="with --fit: fit on the training split of these label files only (names; default: every file)",
    )
    parser.add_argument("--no-ingest", action="store_true", help="skip the fresh ingest of the export")
    parser.add_argument(
        "--model",
        default=None,
        help="also judge the held-out labels with this quality model (a LiteLLM model string, as [models] quality)",
    )
    args = parser.parse_args(argv)
    # Both real-export label files train and test: the same hash split cuts each of them.
    sets = {args.labels.name: load(args.labels)}
    for extra in (CURRENT_LABELS, ROUND3_LABELS):
        if extra.exists():
            sets[extra.name] = load(extra)
    unknown = set(args.train or ()) - set(sets)
    if unknown:
        parser.error(f"--train: no label file named {', '.join(sorted(unknown))} (known: {', '.join(sets)})")
    train = [r for name, rows in sets.items() if name in (args.train or sets) for r in rows if not held_out(r)]
    model = GATE
    if args.fit:
        model, report = fit_gate(train, args.point, with_lexical=not args.no_lexical, with_meaning=not args.no_meaning)
        print_fit(report, train)
        print(
            f"GATE: bias {model.bias}, threshold {model.threshold}, {len(model.lexicon)} lexical weights, "
            f"{len(model.meaning)} meaning weights"
        )
        if args.write:
            note = (
                f"fitted on {len(train)} training notes; L2 {report['l2']}, lexical scale {report['scale']} and "
                f"meaning scale {report['meaning scale']} by {FOLDS}-fold CV (average precision); threshold: "
                f"'{args.point}' on the nested out-of-fold curve"
            )
            dump_gate(model, GATE_FILE, note)
            print(f"wrote {GATE_FILE.relative_to(REPO)}")
        test = [r for rows in sets.values() for r in rows if held_out(r)]
        locomo_at = locomo_rows(LOCOMO_LABELS, args.locomo)
        for point, threshold in report["thresholds"].items():
            if threshold is not None:
                at = GateModel(model.weights, model.bias, threshold, model.lexicon, model.meaning)
                print(f"held out at the '{point}' threshold {threshold:.4f}: {scores(test, at)}")
                if locomo_at is not None:
                    print(f"  LoCoMo at the same threshold: {scores(locomo_at, at)}")
    print(f"real export labels, training split ({len(train)} notes): {scores(train, model)}")
    for name, rows in sets.items():
        print(
            f"{name}, held out ({HELD_OUT_SHARE} %, never fitted on): {scores([r for r in rows if held_out(r)], model)}"
        )
    test = [r for rows in sets.values() for r in rows if held_out(r)]
    print(f"all real-export labels, held out: {scores(test, model)}")
    if SECOND_READING.exists():
        second = {row["id"]: str(row["label"]) for row in load(SECOND_READING)}
        print(f"a blind second reading of the held-out notes: {second_reading(test, second, model)}")
    everything = [r for rows in sets.values() for r in rows]
    named = Counter(r["label"] for r in everything if collapsed_identifiers(r["text"], r.get("source_excerpt") or ""))
    print(
        f"a source identifier with its separators dropped (the faithfulness rule), labels of the notes named: {dict(named)}"
    )
    if args.model:
        from vault_pipeline.models.build import build_llm

        llm = build_llm(args.model, api_base=os.environ.get("VAULT_API_BASE") or None)
        print(f"quality model {args.model} on the same held-out labels: {model_scores(test, llm)}")
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
