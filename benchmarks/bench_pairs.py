"""The pair test: does a scorer tell, pair by pair, whether a passage is about a question?

Prints, in one run, for BM25, MiniLM cosine, their reciprocal rank fusion, the previous offline
gate (the shipped logistic model over retrieval signals, ``relevance.DEFAULT``) and the trained
relevance model (``models/offline/crossencoder.py``):

* ROC-AUC over all pairs, recall@5 (per question), precision and recall at the scorer's one
  threshold (the two gates: their shipped thresholds; BM25, cosine and RRF have none, so theirs
  is the best-F1 threshold on the same pairs: an upper bound), precision at recall 0.7;
* the wrong-conversation test: each question against the 10 turns BM25 ranks highest in
  *another* conversation (all irrelevant): the share accepted at that threshold;
* ms per pair, and the cost of gating 50 candidates in one call.

Pair sets:

* LoCoMo dev (validation only, CC BY-NC: never trained on): ``--questions`` questions of
  categories 1-4 drawn with a fixed seed from all five conversations; each question's gold
  evidence turns (positives), its 30 best non-gold turns by BM25 and 10 random others
  (negatives), as "Speaker: text". Also reported for the three conversations ``bench_locomo.py
  --dev-split`` holds out (conv-41, conv-42, conv-43).
* The export's held-out conversations: ``vault_example/calibration/export.jsonl`` (labelled
  pools) and the held-out pairs ``train_relevance.py data`` writes (``--held``).

    python benchmarks/bench_pairs.py [--questions 400] [--held .train-relevance/held.jsonl] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from pairs import BM25, at_threshold, auc, best_f1_threshold, precision_at_recall, recall_at  # noqa: E402

from vault_pipeline.models.embed import build_embedder, l2_normalise  # noqa: E402
from vault_pipeline.models.offline.crossencoder import ENCODER, shipped  # noqa: E402
from vault_pipeline.models.offline.relevance import DEFAULT  # noqa: E402
from vault_pipeline.retrieve.signals import gate_signals  # noqa: E402

LOCOMO = Path("/work/shared/data/locomo/locomo-dev.json")
HELD_SAMPLES = ("conv-41", "conv-42", "conv-43")
SEED = 46
HARD, RANDOM, WRONG = 30, 10, 10
RECALL = 0.7
SCORERS = ("bm25", "cosine", "rrf", "old gate", "relevance model")


@dataclass
class Pool:
    """One question and its passages, with labels; ``wrong``: passages of another conversation."""

    query: str
    passages: list[str]
    labels: list[bool]
    group: str  # the conversation the question belongs to
    wrong: list[str] = field(default_factory=list)


def locomo_pools(path: Path, n: int, seed: int) -> list[Pool]:
    data = json.loads(path.read_text(encoding="utf-8"))
    convs = {}
    for sample in data:
        conv = sample["conversation"]
        turns = {}
        for key in sorted(k for k in conv if k.startswith("session_") and not k.endswith("date_time")):
            for t in conv[key] if isinstance(conv[key], list) else []:
                turns[t["dia_id"]] = f"{t['speaker']}: {t['text']}"
        ids = list(turns)
        convs[sample["sample_id"]] = (ids, [turns[i] for i in ids], BM25([turns[i] for i in ids]))
    asked = [
        (sample["sample_id"], qa)
        for sample in data
        for qa in sample["qa"]
        if qa.get("category") in (1, 2, 3, 4)
        and qa.get("evidence")
        and all(e in convs[sample["sample_id"]][0] for e in qa["evidence"])
    ]
    rng = random.Random(seed)
    asked = rng.sample(asked, min(n, len(asked)))
    names = sorted(convs)
    pools = []
    for sample, qa in asked:
        ids, texts, bm25 = convs[sample]
        gold = set(qa["evidence"])
        scores = bm25.scores(qa["question"])
        order = [i for i in np.argsort(-scores, kind="mergesort") if ids[i] not in gold]
        hard = order[:HARD]
        rest = order[HARD:]
        easy = rng.sample(rest, min(RANDOM, len(rest)))
        chosen = [ids.index(g) for g in sorted(gold)] + hard + easy
        other = names[(names.index(sample) + 1 + rng.randrange(len(names) - 1)) % len(names)]
        _, otexts, obm25 = convs[other]
        wrong = [otexts[i] for i in np.argsort(-obm25.scores(qa["question"]), kind="mergesort")[:WRONG]]
        pools.append(Pool(qa["question"], [texts[i] for i in chosen], [ids[i] in gold for i in chosen], sample, wrong))
    return pools


def labelled_pools(path: Path) -> list[Pool]:
    by_query: dict[str, Pool] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        row = json.loads(line)
        text = row["candidate"].split("\n\nSource:")[0].strip()
        pool = by_query.setdefault(row["query"], Pool(row["query"], [], [], str(row.get("conversation") or "")))
        pool.passages.append(text)
        pool.labels.append(row["label"] == "relevant")
    return list(by_query.values())


def held_pools(path: Path, seed: int) -> list[Pool]:
    """The held-out export pairs of ``train_relevance.py`` (not the labelled sets), one pool per
    question; the wrong-conversation passages: the positives of another held-out question."""
    by_query: dict[tuple[str, str], Pool] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        if row["kind"].endswith(".jsonl"):
            continue
        key = (row["conversation"], row["query"])
        pool = by_query.setdefault(key, Pool(row["query"], [], [], row["conversation"]))
        pool.passages.append(row["passage"])
        pool.labels.append(bool(row["label"]))
    pools = list(by_query.values())
    rng = random.Random(seed)
    for pool in pools:
        others = [p for p in pools if p.group != pool.group]
        texts = [t for p in rng.sample(others, min(5, len(others))) for t, y in zip(p.passages, p.labels) if y]
        bm25 = BM25(texts)
        pool.wrong = [texts[i] for i in np.argsort(-bm25.scores(pool.query), kind="mergesort")[:WRONG]]
    return pools


# --------------------------------------------------------------------------- scorers


Scorer = Callable[[Pool, list[str]], np.ndarray]


def scorers(embedder) -> dict[str, Scorer]:
    model = shipped()

    def bm25(pool: Pool, texts: list[str]) -> np.ndarray:
        return BM25(texts).scores(pool.query)

    def cosine(pool: Pool, texts: list[str]) -> np.ndarray:
        vecs = l2_normalise(embedder.embed([pool.query, *texts]))
        return vecs[1:] @ vecs[0]

    def rrf(pool: Pool, texts: list[str]) -> np.ndarray:
        out = np.zeros(len(texts))
        for s in (bm25(pool, texts), cosine(pool, texts)):
            ranks = np.empty(len(texts))
            ranks[np.argsort(-s, kind="mergesort")] = np.arange(1, len(texts) + 1)
            out += 1 / (60 + ranks)
        return out

    def old_gate(pool: Pool, texts: list[str]) -> np.ndarray:
        rows = [(f"p{i}", f"p{i}.md", "", t) for i, t in enumerate(texts)]
        signals = gate_signals(rows, query=pool.query, intent=pool.query, embedder=embedder)
        return np.array([DEFAULT.probability(signals[f"p{i}"]) for i in range(len(texts))])

    def relevance(pool: Pool, texts: list[str]) -> np.ndarray:
        return model.probabilities([pool.query] * len(texts), texts)

    return {"bm25": bm25, "cosine": cosine, "rrf": rrf, "old gate": old_gate, "relevance model": relevance}


def shipped_threshold(name: str) -> float | None:
    return {"old gate": DEFAULT.threshold, "relevance model": ENCODER.threshold}.get(name)


def evaluate(name: str, scorer: Scorer, pools: Sequence[Pool]) -> dict:
    scores, labels, groups, wrong = [], [], defaultdict(list), []
    started = time.perf_counter()
    pairs = 0
    for i, pool in enumerate(pools):
        s = scorer(pool, pool.passages)
        pairs += len(pool.passages)
        scores.extend(s.tolist())
        labels.extend(pool.labels)
        groups[str(i)] = list(zip(s.tolist(), pool.labels))
    ms = (time.perf_counter() - started) * 1000 / max(1, pairs)
    wrong_scores = [float(x) for pool in pools if pool.wrong for x in scorer(pool, pool.wrong)]
    threshold = shipped_threshold(name)
    fitted = threshold is None
    if threshold is None:
        threshold = best_f1_threshold(scores, labels)
    precision, recall = at_threshold(scores, labels, threshold)
    p70, _ = precision_at_recall(scores, labels, RECALL)
    wrong = float(np.mean([x >= threshold for x in wrong_scores])) if wrong_scores else float("nan")
    return {
        "scorer": name,
        "pairs": len(scores),
        "positives": int(sum(labels)),
        "auc": auc(scores, labels),
        "recall@5": recall_at(groups, 5),
        "threshold": threshold,
        "threshold_fitted_here": fitted,
        "precision": precision,
        "recall": recall,
        "precision@recall0.7": p70,
        "wrong_conversation_accepted": wrong,
        "wrong_pairs": len(wrong_scores),
        "ms_per_pair": ms,
        "_scores": scores,
        "_labels": labels,
    }


def print_table(title: str, rows: list[dict]) -> None:
    print(
        f"\n{title} ({rows[0]['pairs']} pairs, {rows[0]['positives']} relevant; wrong-conversation pairs {rows[0]['wrong_pairs']})"
    )
    print(
        f"  {'scorer':<16} {'AUC':>6} {'R@5':>6} {'thresh':>8} {'P':>6} {'R':>6} {'P@R.7':>6} {'wrong':>6} {'ms/pair':>8}"
    )
    for r in rows:
        mark = "*" if r["threshold_fitted_here"] else " "
        print(
            f"  {r['scorer']:<16} {r['auc']:6.3f} {r['recall@5']:6.3f} {r['threshold']:7.3f}{mark} {r['precision']:6.3f} "
            f"{r['recall']:6.3f} {r['precision@recall0.7']:6.3f} {r['wrong_conversation_accepted']:6.3f} {r['ms_per_pair']:8.2f}"
        )


def batch_cost(pools: Sequence[Pool], repeats: int = 5) -> float:
    """Median ms to gate 50 candidates of one question in one batched call of the relevance model."""
    model = shipped()
    pool = next(p for p in pools if len(p.passages) >= 40)
    texts = (pool.passages + pool.wrong)[:50]
    model.probabilities([pool.query], texts[:1])  # load once
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        model.probabilities([pool.query] * len(texts), texts)
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--locomo", type=Path, default=LOCOMO)
    ap.add_argument("--questions", type=int, default=400)
    ap.add_argument("--held", type=Path, default=REPO / ".train-relevance" / "held.jsonl")
    ap.add_argument("--seed", type=int, default=SEED)
    ap.add_argument("--json", type=Path, default=None, help="write the figures (and every pair's scores) here")
    ap.add_argument("--only", nargs="*", default=list(SCORERS), choices=SCORERS)
    args = ap.parse_args(argv)
    embedder = build_embedder()
    fns = {k: v for k, v in scorers(embedder).items() if k in args.only}
    sets: dict[str, list[Pool]] = {}
    if args.locomo.is_file():
        pools = locomo_pools(args.locomo, args.questions, args.seed)
        sets["LoCoMo dev, all five conversations"] = pools
        sets["LoCoMo dev, held-out conversations (41, 42, 43)"] = [p for p in pools if p.group in HELD_SAMPLES]
    export = REPO / "vault_example" / "calibration" / "export.jsonl"
    sets["export held out: calibration/export.jsonl"] = labelled_pools(export)
    if args.held.is_file():
        sets["export held out: train_relevance.py held-out pairs"] = held_pools(args.held, args.seed)
    else:
        print(f"{args.held}: missing (python benchmarks/train_relevance.py data writes it); skipped", file=sys.stderr)
    out = {}
    for title, pools in sets.items():
        rows = [evaluate(name, fn, pools) for name, fn in fns.items()]
        print_table(title, rows)
        out[title] = rows
    if "relevance model" in fns:
        print(
            f"\ncost: gating 50 candidates in one call of the relevance model: {batch_cost(next(iter(sets.values()))):.0f} ms (median of 5)"
        )
    print("* best-F1 threshold fitted on these very pairs (no shipped threshold): an upper bound")
    if args.json:
        args.json.write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
