"""Experiment: can a sentence embedding carry the Note Quality Gate to its targets?

    python benchmarks/quality_experiment.py               # the full table (about a minute on 2 cores)
    python benchmarks/quality_experiment.py --repeats 1   # one round of 5 folds
    python benchmarks/quality_experiment.py --no-locomo   # skip the out-of-domain LoCoMo test

Gates compared (a note counts as good only when labelled ``good``):

  (a)  the shipped gate as is: hard rules + ``GATE`` at its shipped threshold (no refit);
  (a') the shipped weights and hard rules, threshold chosen on the training folds;
  (b)  logistic regression refitted on the 15 boolean ``quality.features``;
  (c)  logistic regression on the offline MiniLM embedding of the note text;
  (c+) (c) behind the hard rules;
  (d)  (b) + (c) features together, behind the hard rules.

Evaluation: stratified (by the four labels) 5-fold cross-validation over all real-export labels
(``tests/data/quality_labels.jsonl`` plus ``quality_labels_current.jsonl`` when present), repeated
with seeded shuffles. Nothing is measured on labels it was fitted or tuned on: the L2 strength is
chosen by inner 5-fold CV on the training folds (average precision), and the operating threshold
is the lowest one whose inner out-of-fold precision on the training folds reaches 0.95 (the most
recall subject to the precision target). Reported per held-out fold, then mean ± sd over folds:
precision and recall at that threshold, precision at recall 0.90 (the best precision among
thresholds that pass at least 90 % of the good notes; "—" when the hard rules alone already
refuse more than 10 %), the oracle recall at precision 0.95 (the best any threshold could do on the
held-out fold itself: an upper bound, not a deployable figure), and average precision (the area
under the held-out precision-recall curve).

LoCoMo (``benchmarks/data/quality_locomo_labels.jsonl``, keys only) is an out-of-domain test for
models fitted on all real-export labels; its note text is re-derived from a vault ingested from
``../shared/data/locomo/locomo-dev.json`` (``--locomo-vault``, created when absent) and matched on
sample_id + dia_id + sha256 of the note sentence; each note's source is its LoCoMo message text.

Note: the shipped ``GATE`` was fitted on 70 % of ``quality_labels.jsonl``, so (a) and (a') are
measured partly on their own training labels: an optimistic figure for them.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from vault_pipeline.ingest.quality import (  # noqa: E402
    FEATURES,
    GATE,
    GateModel,
    features,
    sentence_problems,
    unfaithful,
)

LABEL_FILES = (
    REPO / "tests" / "data" / "quality_labels.jsonl",
    REPO / "tests" / "data" / "quality_labels_current.jsonl",
)
LOCOMO_LABELS = REPO / "benchmarks" / "data" / "quality_locomo_labels.jsonl"
SHARED = Path(os.environ.get("VAULT_SHARED_DATA", REPO.parent / "shared" / "data"))
TARGET_PRECISION = 0.95
TARGET_RECALL = 0.90
METRICS = ("precision @thr", "recall @thr", "precision @R0.90", "recall @P0.95 oracle", "avg precision")
FOLDS = 5
L2_GRID = (0.01, 0.1, 1.0, 10.0, 100.0, 1000.0, 10000.0)
# A model that never objects: sentence_problems() with it returns the hard rules only.
_NO_MODEL = GateModel(weights={}, bias=100.0, threshold=0.5)


# --------------------------------------------------------------------------- data


def load(path: Path) -> list[dict[str, Any]]:
    """The rows of a JSONL label file (blank lines skipped)."""
    with path.open(encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def real_rows() -> list[dict[str, Any]]:
    """All real-export label rows, de-duplicated on the note text (the first label wins)."""
    rows: list[dict[str, Any]] = []
    seen: set[str] = set()
    for path in LABEL_FILES:
        if not path.exists():
            continue
        for row in load(path):
            if row["text"] not in seen:
                seen.add(row["text"])
                rows.append({**row, "_file": path.name})
    return rows


def hard_rules_pass(text: str, category: str, source: str | None) -> bool:
    """Whether a note passes the hard rules: word limit, one sentence, sentence type, faithfulness."""
    if sentence_problems(text, category, _NO_MODEL, source=source):
        return False
    return not (source and unfaithful(text, source))


def locomo_rows(vault_dir: Path, data: Path) -> list[dict[str, Any]] | None:
    """LoCoMo label rows with note text, category and source re-derived; None if data is absent."""
    if not LOCOMO_LABELS.exists() or not data.exists():
        return None
    from vault_pipeline.ingest.keep import note_sentence
    from vault_pipeline.vault.files import Vault

    if not (vault_dir / "inbox").is_dir():
        cli = shutil.which("vault") or str(Path(sys.executable).parent / "vault")
        subprocess.run([cli, "init", str(vault_dir)], check=True, capture_output=True)
        subprocess.run([cli, "ingest", str(data), "--vault", str(vault_dir)], check=True, capture_output=True)
    messages: dict[tuple[str, str], str] = {}
    for sample in json.loads(data.read_text(encoding="utf-8")):
        for key, turns in sample["conversation"].items():
            if key.startswith("session_") and isinstance(turns, list):
                for turn in turns:
                    messages[(sample["sample_id"], turn["dia_id"])] = str(turn.get("text") or "")
    vault = Vault(vault_dir)
    notes: dict[tuple[str, str, str], tuple[str, str]] = {}
    for relpath in vault.iter_note_paths():
        if not relpath.startswith("inbox/"):
            continue
        frontmatter, body, _ = vault.read(relpath)
        sentence = note_sentence(body)
        sample_id = str(frontmatter.get("source_conversation") or "").split(":")[0]
        dia = frontmatter.get("source_messages") or []
        digest = hashlib.sha256(sentence.encode("utf-8")).hexdigest()
        notes[(sample_id, json.dumps(list(dia)), digest)] = (sentence, str(frontmatter.get("category") or "fact"))
    rows = []
    for label in load(LOCOMO_LABELS):
        dia = label["dia_id"] if isinstance(label["dia_id"], list) else [label["dia_id"]]
        found = notes.get((label["sample_id"], json.dumps(dia), label["note_sha256"]))
        if found is None:  # the extractor changed since labelling: the label does not apply
            continue
        source = "\n".join(messages.get((label["sample_id"], d), "") for d in dia)
        rows.append({**label, "text": found[0], "category": found[1], "source_excerpt": source or None})
    return rows


class Prepared:
    """Per-note inputs computed once: boolean features, hard-rule verdict, embedding, label."""

    def __init__(self, rows: Sequence[Mapping[str, Any]], embedder: Any):
        texts = [str(r["text"]) for r in rows]
        sources = [str(r["source_excerpt"]) if r.get("source_excerpt") else None for r in rows]
        cats = [str(r.get("category") or "fact") for r in rows]
        self.labels = [str(r["label"]) for r in rows]
        self.y = np.array([lab == "good" for lab in self.labels], dtype=float)
        started = time.perf_counter()
        self.feats = [features(t, s) for t, s in zip(texts, sources)]
        self.seconds_features = time.perf_counter() - started
        started = time.perf_counter()
        self.rules = np.array([hard_rules_pass(t, c, s) for t, c, s in zip(texts, cats, sources)])
        self.seconds_rules = time.perf_counter() - started
        self.bool = np.array([[float(f[n]) for n in FEATURES] for f in self.feats])
        started = time.perf_counter()
        self.emb = np.asarray(embedder.embed(texts), dtype=float)
        self.seconds_embed = time.perf_counter() - started
        self.shipped = np.array([GATE.probability(f) for f in self.feats])


# --------------------------------------------------------------------------- model


def fit_logistic(x: np.ndarray, y: np.ndarray, l2: float, steps: int = 100) -> Callable[[np.ndarray], np.ndarray]:
    """L2-regularised logistic regression by Newton's method on standardised columns (numpy only).

    Returns the scoring function (P(good)); the bias is not shrunk."""
    mean = x.mean(axis=0)
    sd = x.std(axis=0)
    sd[sd < 1e-9] = 1.0
    z = np.hstack([np.ones((len(x), 1)), (x - mean) / sd])
    w = np.zeros(z.shape[1])
    penalty = np.full(z.shape[1], l2)
    penalty[0] = 0.0
    for _ in range(steps):
        p = 1.0 / (1.0 + np.exp(-np.clip(z @ w, -35, 35)))
        grad = z.T @ (p - y) + penalty * w
        hess = (z.T * (p * (1 - p))) @ z + np.diag(penalty + 1e-9)
        step = np.linalg.solve(hess, grad)
        w -= step
        if float(np.abs(step).max()) < 1e-7:
            break

    def score(xs: np.ndarray) -> np.ndarray:
        zs = np.hstack([np.ones((len(xs), 1)), (xs - mean) / sd])
        return 1.0 / (1.0 + np.exp(-np.clip(zs @ w, -35, 35)))

    return score


def stratified_folds(labels: Sequence[str], k: int, seed: int) -> list[np.ndarray]:
    """Index arrays of k folds, each label class dealt round-robin after a seeded shuffle."""
    rng = np.random.default_rng(seed)
    folds: list[list[int]] = [[] for _ in range(k)]
    offset = 0
    for cls in sorted(set(labels)):
        members = np.array([i for i, lab in enumerate(labels) if lab == cls])
        rng.shuffle(members)
        for j, i in enumerate(members):
            folds[(j + offset) % k].append(int(i))
        offset += len(members)
    return [np.array(sorted(f)) for f in folds]


def gated_scores(score: np.ndarray, rules: np.ndarray | None) -> np.ndarray:
    """Scores with notes the hard rules refuse pushed below every threshold."""
    return score if rules is None else np.where(rules, score, -np.inf)


# --------------------------------------------------------------------------- metrics


def pr_at(scores: np.ndarray, y: np.ndarray, threshold: float) -> tuple[float, float]:
    """(precision, recall) of passing notes scoring >= threshold; precision nan if nothing passes."""
    passed = scores >= threshold
    hits = float(y[passed].sum())
    return (hits / passed.sum() if passed.any() else math.nan, hits / y.sum() if y.sum() else math.nan)


def curve(scores: np.ndarray, y: np.ndarray) -> list[tuple[float, float, float]]:
    """(threshold, precision, recall) at every distinct finite score, strictest first."""
    out = []
    for t in sorted({float(s) for s in scores if np.isfinite(s)}, reverse=True):
        p, r = pr_at(scores, y, t)
        out.append((t, p, r))
    return out


def average_precision(scores: np.ndarray, y: np.ndarray) -> float:
    """Sum over thresholds of (recall gain) x precision; refused notes are never reached."""
    ap, last = 0.0, 0.0
    for _, p, r in curve(scores, y):
        ap += (r - last) * p
        last = r
    return ap


def precision_at_recall(scores: np.ndarray, y: np.ndarray, recall: float = TARGET_RECALL) -> float:
    """The best precision among thresholds passing at least ``recall`` of the good notes (nan if none)."""
    reached = [p for _, p, r in curve(scores, y) if r >= recall - 1e-12]
    return max(reached) if reached else math.nan


def recall_at_precision(scores: np.ndarray, y: np.ndarray, precision: float = TARGET_PRECISION) -> float:
    """Oracle: the best recall of any threshold reaching ``precision`` on these very notes (0 if none).

    An upper bound on what a threshold chosen elsewhere could achieve, not a deployable figure."""
    return max((r for _, p, r in curve(scores, y) if p >= precision), default=0.0)


def choose_threshold(scores: np.ndarray, y: np.ndarray) -> float:
    """The lowest threshold whose precision reaches the target (inf: pass nothing, if none does)."""
    reached = [t for t, p, _ in curve(scores, y) if p >= TARGET_PRECISION]
    return min(reached) if reached else math.inf


# --------------------------------------------------------------------------- gates


def design(data: Prepared, kind: str) -> np.ndarray:
    """The feature matrix of a gate: 'bool', 'emb' or 'both'."""
    return {"bool": data.bool, "emb": data.emb, "both": np.hstack([data.bool, data.emb])}[kind]


def fit_tuned(x: np.ndarray, y: np.ndarray, labels: Sequence[str], rules: np.ndarray | None, seed: int):
    """Fit on (x, y) with L2 chosen by inner CV; return (scorer, threshold, l2).

    The inner out-of-fold scores at the chosen L2 also choose the threshold. Behind hard rules, the
    model is fitted only on notes that pass them (the only ones it will ever see)."""
    inner = stratified_folds(labels, FOLDS, seed + 1000)
    best: tuple[float, float, np.ndarray] | None = None
    for l2 in L2_GRID:
        oof = np.zeros(len(y))
        for fold in inner:
            train = np.setdiff1d(np.arange(len(y)), fold)
            if rules is not None:
                train = train[rules[train]]
            oof[fold] = fit_logistic(x[train], y[train], l2)(x[fold])
        oof = gated_scores(oof, rules)
        ap = average_precision(oof, y)
        if best is None or ap > best[0] + 1e-9:
            best = (ap, l2, oof)
    assert best is not None
    _, l2, oof = best
    keep = np.arange(len(y)) if rules is None else np.flatnonzero(rules)
    return fit_logistic(x[keep], y[keep], l2), choose_threshold(oof, y), l2


GATES: dict[str, tuple[str | None, bool]] = {
    # name: (design kind, or None for the shipped weights; behind the hard rules?)
    "(a)  shipped gate as is": (None, True),
    "(a') shipped weights, threshold from training folds": (None, True),
    "(b)  LR on 15 booleans": ("bool", False),
    "(c)  LR on MiniLM embedding": ("emb", False),
    "(c+) LR on MiniLM embedding + hard rules": ("emb", True),
    "(d)  LR on booleans + MiniLM + hard rules": ("both", True),
}


def evaluate(train: Prepared, train_idx: np.ndarray, test: Prepared, test_idx: np.ndarray, seed: int):
    """Per gate: (precision, recall at its threshold, precision at recall 0.90, AP, l2) on the test rows."""
    y_tr, y_te = train.y[train_idx], test.y[test_idx]
    labels_tr = [train.labels[i] for i in train_idx]
    out: dict[str, tuple[list[float], float | None]] = {}
    for name, (kind, with_rules) in GATES.items():
        rules_tr = train.rules[train_idx] if with_rules else None
        rules_te = test.rules[test_idx] if with_rules else None
        l2: float | None = None
        if kind is None:
            scores = gated_scores(test.shipped[test_idx], rules_te)
            if name.startswith("(a) "):
                threshold = GATE.threshold
            else:
                threshold = choose_threshold(gated_scores(train.shipped[train_idx], rules_tr), y_tr)
        else:
            scorer, threshold, l2 = fit_tuned(design(train, kind)[train_idx], y_tr, labels_tr, rules_tr, seed)
            scores = gated_scores(scorer(design(test, kind)[test_idx]), rules_te)
        p, r = pr_at(scores, y_te, threshold)
        metrics = [p, r, precision_at_recall(scores, y_te), recall_at_precision(scores, y_te)]
        out[name] = ([*metrics, average_precision(scores, y_te)], l2)
    return out


# --------------------------------------------------------------------------- report


def summary(values: Sequence[float]) -> str:
    """'mean ± sd' over the defined values, with a count of undefined ones."""
    defined = [v for v in values if not math.isnan(v)]
    if not defined:
        return "—"
    text = f"{np.mean(defined):.3f} ± {np.std(defined):.3f}"
    missing = len(values) - len(defined)
    return text + (f" ({missing} —)" if missing else "")


def per_thousand(seconds: float, notes: int) -> str:
    return f"{1000 * seconds / max(notes, 1):.2f} s"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3, help="rounds of 5-fold CV (seeded shuffles)")
    parser.add_argument("--locomo", type=Path, default=SHARED / "locomo" / "locomo-dev.json")
    parser.add_argument("--locomo-vault", type=Path, default=Path("/tmp/qx"))
    parser.add_argument("--no-locomo", action="store_true")
    args = parser.parse_args(argv)

    from vault_pipeline.models.embed import build_embedder

    embedder = build_embedder("minilm")
    started = time.perf_counter()
    embedder.embed(["warm-up"])
    features("Warm the tagger up.")
    load_seconds = time.perf_counter() - started

    rows = real_rows()
    data = Prepared(rows, embedder)
    n = len(rows)
    counts = {lab: data.labels.count(lab) for lab in sorted(set(data.labels))}
    print(f"real-export labels: {n} notes {counts}; files: {[p.name for p in LABEL_FILES if p.exists()]}")
    verdict = np.where(data.rules, data.shipped, -np.inf)
    for name in sorted({str(r["_file"]) for r in rows}):
        idx = np.array([i for i, r in enumerate(rows) if r["_file"] == name])
        p, r = pr_at(verdict[idx], data.y[idx], GATE.threshold)
        print(f"  shipped gate as is, all of {name} ({len(idx)} notes): precision {p:.3f}, recall {r:.3f}")
    print(f"hard rules refuse {int((~data.rules).sum())} notes, {int((~data.rules & (data.y > 0)).sum())} of them good")

    results: dict[str, list[tuple[list[float], float | None]]] = {name: [] for name in GATES}
    for repeat in range(args.repeats):
        for k, test_idx in enumerate(stratified_folds(data.labels, FOLDS, seed=repeat)):
            train_idx = np.setdiff1d(np.arange(n), test_idx)
            for name, res in evaluate(data, train_idx, data, test_idx, seed=100 * repeat + k).items():
                results[name].append(res)

    folds = FOLDS * args.repeats
    print(f"\nheld-out, stratified {FOLDS}-fold CV x {args.repeats} seeded repeats ({folds} folds), mean ± sd:")
    header = f"{'gate':<52}" + "".join(f" {m:<19}" for m in METRICS)
    print(header)
    print("-" * len(header))
    for name, res in results.items():
        cols = [summary([r[0][i] for r in res]) for i in range(len(METRICS))]
        print(f"{name:<52}" + "".join(f" {c:<19}" for c in cols))
    for name, res in results.items():
        chosen = [r[1] for r in res if r[1] is not None]
        if chosen:
            print(
                f"  L2 chosen by inner CV for {name.split()[0]}: {dict(sorted({v: chosen.count(v) for v in chosen}.items()))}"
            )

    per_note = {
        "hard rules": data.seconds_rules,
        "15 boolean features": data.seconds_features,
        "MiniLM embedding": data.seconds_embed,
    }
    print(f"\ntime per 1,000 notes (measured on {n} notes; model/tagger load once: {load_seconds:.2f} s):")
    for part, seconds in per_note.items():
        print(f"  {part:<22} {per_thousand(seconds, n)}")
    rules_feats = data.seconds_rules + data.seconds_features
    print(f"  gates: (a)/(a') {per_thousand(rules_feats, n)}; (b) {per_thousand(data.seconds_features, n)}; ")
    print(
        f"         (c) {per_thousand(data.seconds_embed, n)}; (c+) {per_thousand(data.seconds_embed + data.seconds_rules, n)}; "
        f"(d) {per_thousand(rules_feats + data.seconds_embed, n)}  (logistic scoring itself: < 0.01 s)"
    )

    if args.no_locomo:
        return 0
    locomo = locomo_rows(args.locomo_vault, args.locomo)
    if not locomo:
        print("\nLoCoMo: skipped (labels or data absent)")
        return 0
    test = Prepared(locomo, embedder)
    counts = {lab: test.labels.count(lab) for lab in sorted(set(test.labels))}
    print(f"\nLoCoMo out-of-domain ({len(locomo)} of {len(load(LOCOMO_LABELS))} labels matched {counts}); ")
    print("models fitted on all real-export labels (L2 and threshold by CV on them):")
    res = evaluate(data, np.arange(n), test, np.arange(len(locomo)), seed=7)
    print(header)
    print("-" * len(header))
    for name, r in res.items():
        cols = ["—" if math.isnan(v) else f"{v:.3f}" for v in r[0]]
        print(f"{name:<52}" + "".join(f" {c:<19}" for c in cols))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
