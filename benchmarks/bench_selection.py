"""The selector (which candidate statements become notes) against people's labels, and extraction
against the gold notes careful readers wrote.

    python benchmarks/bench_selection.py            # figures with the shipped selector
    python benchmarks/bench_selection.py --fit      # refit on the tuning part: cross-validated curve,
                                                    # thresholds, then the held-out part's figures
    python benchmarks/bench_selection.py --fit --write   # ... and write vault_pipeline/ingest/selector.json

Labels: tests/data/selection_labels.jsonl, candidate notes of the offline extractor drawn at random
from the real export and from LoCoMo, each read against its source message by a reader who did not
write the rules (`label` good / fragment / meaningless / mangled). The source messages are read
from ../shared/data (the labels hold their ids); without it the benchmark stops with a message.
A note counts as good only when labelled `good`. The split is by conversation (a hash of its id):
30 % of the conversations (a LoCoMo session counts as one) are held out, never seen by the fit or the threshold choice. The
thresholds: `write`, the lowest probability at which the cross-validated precision on the tuning
part reaches --write-precision; `keep`, the same for --keep-precision.

Gold: tests/data/extraction_gold.jsonl, messages of the export and LoCoMo turns with the notes a
careful reader wrote (a verbatim quote, its context, the note in the reader's words). On the test
half: precision = written notes that match a gold note of their message; recall = gold notes that
a written note holds (its sentence and context together hold at least 70 % of the quote's content
words). Beside it, the same figures for every candidate (no selection) and for the first N
sentences of each message (a simple baseline).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from vault_pipeline.ingest.extract import MAX_VERBATIM_CONTEXT_WORDS, MAX_VERBATIM_WORDS  # noqa: E402
from vault_pipeline.ingest.parse import Conversation, read_export  # noqa: E402
from vault_pipeline.ingest.quality import meaning_vectors  # noqa: E402
from vault_pipeline.ingest.select import (  # noqa: E402
    SELECTOR_FILE,
    Candidate,
    Selector,
    dump_selector,
    fit,
    shipped,
    signs,
)
from vault_pipeline.text import STOPWORDS  # noqa: E402

LABELS = REPO / "tests" / "data" / "selection_labels.jsonl"
GOLD = REPO / "tests" / "data" / "extraction_gold.jsonl"
DATA = REPO.parent / "shared" / "data"
EXPORT = DATA / "exports" / "chatgpt-pkuppens-2023.json"
LOCOMO = DATA / "locomo" / "locomo-dev.json"
HELD_OUT = 0.3
LIMITS = (MAX_VERBATIM_WORDS, MAX_VERBATIM_CONTEXT_WORDS)
FOLDS = 5


def held_out(conversation: str) -> bool:
    """30 % of the conversations, by a hash of the id (a LoCoMo session counts as its sample)."""
    return int(hashlib.sha1(conversation.encode()).hexdigest()[:8], 16) / 0xFFFFFFFF < HELD_OUT


TITLES: dict[str, str] = {}


def sources() -> dict[tuple[str, str], tuple[str, str]]:
    """(conversation, message) -> (role, text) of every message of the export and LoCoMo."""
    found: dict[tuple[str, str], tuple[str, str]] = {}
    for path in (EXPORT, LOCOMO):
        if not path.exists():
            sys.exit(f"{path}: not found; the selection benchmark reads the source messages from ../shared/data")
        for item in read_export(path):
            if isinstance(item, Conversation):
                TITLES[item.id] = item.title if item.titled else ""
                for m in item.messages:
                    found[(item.id, m.id)] = (m.role, m.text)
    return found


def load_rows(path: Path, texts: Mapping[tuple[str, str], tuple[str, str]]) -> tuple[list[dict[str, Any]], int]:
    """The labelled candidates the extractor still makes (same sentence, same context), and how many
    labels describe candidates it no longer makes (left out: their label was for another note)."""
    from vault_pipeline.models.offline.extraction import statement_units

    rows, stale = [], 0
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        row = json.loads(line)
        role, text = texts[(row["conversation"], row["message"])]
        made = {
            (u["text"], u["context"])
            for u in statement_units({"id": row["message"], "role": role, "text": text}, *LIMITS)[0]
        }
        if (row["note"], row.get("context")) not in made:
            stale += 1
            continue
        row["candidate"] = Candidate(
            row["note"],
            row.get("context"),
            row["category"],
            row["speaker"],
            text,
            TITLES.get(row["conversation"]),
            people=row["source"] == "locomo",
        )
        row["good"] = row["label"] == "good"
        rows.append(row)
    return rows, stale


def featurise(rows: Sequence[dict[str, Any]], meaning: bool = True) -> tuple[list[dict[str, float]], np.ndarray]:
    """Each row's signs, and (with ``meaning``) its sentence's MiniLM vector (else zeros, never read)."""
    on = [signs(r["candidate"]) for r in rows]
    if not meaning:
        return on, np.zeros((len(rows), 1))
    return on, np.asarray(meaning_vectors([r["candidate"].sentence for r in rows]), dtype=float)


def auc(scores: Sequence[float], labels: Sequence[bool]) -> float:
    pos = [s for s, y in zip(scores, labels) if y]
    neg = [s for s, y in zip(scores, labels) if not y]
    if not pos or not neg:
        return float("nan")
    wins = sum((p > n) + 0.5 * (p == n) for p in pos for n in neg)
    return wins / (len(pos) * len(neg))


def curve(scores: Sequence[float], labels: Sequence[bool]) -> list[tuple[float, float, float, int]]:
    """(threshold, precision, recall, kept) at every distinct score, highest threshold first."""
    order = sorted(zip(scores, labels), key=lambda p: -p[0])
    total = sum(labels)
    out, tp = [], 0
    for i, (s, y) in enumerate(order, 1):
        tp += y
        if i == len(order) or order[i][0] != s:
            out.append((s, tp / i, tp / total if total else 0.0, i))
    return out


def threshold_for(scores: Sequence[float], labels: Sequence[bool], precision: float, least: int = 20) -> float:
    """The lowest threshold at which the precision over everything at or above it reaches ``precision``
    (at least ``least`` notes there: the top few alone are no estimate)."""
    ok = [t for t, p, _, kept in curve(scores, labels) if p >= precision and kept >= least]
    return min(ok, default=1.0)


def cross_validated(
    rows: Sequence[dict[str, Any]], on: Sequence[dict[str, float]], vectors: np.ndarray, **kw: Any
) -> list[float]:
    """Out-of-fold probabilities, folds by conversation."""
    fold_of = [int(hashlib.sha1(r["conversation"].encode()).hexdigest()[:8], 16) % FOLDS for r in rows]
    out = [0.0] * len(rows)
    for k in range(FOLDS):
        train = [i for i, f in enumerate(fold_of) if f != k]
        test = [i for i, f in enumerate(fold_of) if f == k]
        model = fit([on[i] for i in train], [rows[i]["good"] for i in train], _vecs(vectors, train, kw), **_fit_kw(kw))
        for i in test:
            out[i] = model.probability(on[i], vectors[i] if kw.get("meaning", True) else None)
    return out


def _vecs(vectors: np.ndarray, idx: Sequence[int], kw: Mapping[str, Any]) -> Any:
    return vectors[idx].tolist() if kw.get("meaning", True) else None


def _fit_kw(kw: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in kw.items() if k in ("l2", "meaning_scale")}


def report(name: str, scores: Sequence[float], labels: Sequence[bool], write: float, keep: float) -> None:
    def at(t: float) -> str:
        kept = [y for s, y in zip(scores, labels) if s >= t]
        p = sum(kept) / len(kept) if kept else float("nan")
        r = sum(kept) / max(1, sum(labels))
        return f"precision {p:.3f} recall {r:.3f} ({len(kept)} of {len(labels)})"

    print(
        f"{name}: {len(labels)} notes, {sum(labels)} good ({sum(labels) / max(1, len(labels)):.1%}); AUC {auc(scores, labels):.3f}"
    )
    for t in (0.4, 0.5, 0.6, 0.7):
        print(f"  at {t:.2f}: {at(t)}")
    print(f"  at write {write:.3f}: {at(write)}")
    print(f"  at keep  {keep:.3f}: {at(keep)}")


# --------------------------------------------------------------------------- gold


_W = re.compile(r"\w+")


def content(text: str | None) -> set[str]:
    return {w for w in _W.findall((text or "").lower().replace("**", "").replace("`", "")) if w not in STOPWORDS}


def holds(note: Mapping[str, Any], quote: str) -> bool:
    want = content(quote)
    have = content(note["text"]) | content(note.get("context"))
    return bool(want) and len(want & have) / len(want) >= 0.7


def gold_figures(
    rows: Sequence[Mapping[str, Any]], written: Mapping[str, list[dict[str, Any]]]
) -> tuple[float, float, int, int]:
    """(precision, recall, notes written, gold notes) over the gold rows."""
    tp_written = n_written = tp_gold = n_gold = 0
    for row in rows:
        notes = written.get(row["key"], [])
        quotes = [g["quote"] for g in row["notes"]]
        n_written += len(notes)
        tp_written += sum(any(holds(n, q) for q in quotes) for n in notes)
        n_gold += len(quotes)
        tp_gold += sum(any(holds(n, q) for n in notes) for q in quotes)
    return tp_written / max(1, n_written), tp_gold / max(1, n_gold), n_written, n_gold


def extract_gold(rows: Sequence[Mapping[str, Any]], model: Selector | None, texts: Mapping) -> dict[str, list[dict]]:
    """The notes the offline extractor writes for each gold row (``model`` None: every candidate)."""
    from vault_pipeline.ingest.select import score
    from vault_pipeline.models.offline.extraction import statement_units

    out: dict[str, list[dict]] = defaultdict(list)
    for row in rows:
        role, text = texts[(row["conversation"], row["message"])]
        units, _ = statement_units({"id": row["message"], "role": role, "text": text}, *LIMITS)
        if model is None:
            out[row["key"]] = units
            continue
        title = TITLES.get(row["conversation"])
        scored = score(
            [Candidate(u["text"], u["context"], u["category"], u["speaker"], text, title) for u in units], model
        )
        out[row["key"]] = [u for u, s in zip(units, scored) if s.probability >= model.write]
    return out


def first_sentences(rows: Sequence[Mapping[str, Any]], texts: Mapping, n: int) -> dict[str, list[dict]]:
    """The baseline: each message's first ``n`` candidate statements."""
    from vault_pipeline.models.offline.extraction import statement_units

    out = {}
    for row in rows:
        role, text = texts[(row["conversation"], row["message"])]
        units, _ = statement_units({"id": row["message"], "role": role, "text": text}, *LIMITS)
        out[row["key"]] = units[:n]
    return out


def load_gold(path: Path) -> list[dict[str, Any]]:
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            row = json.loads(line)
            row["key"] = f"{row['conversation']}|{row['message']}"
            rows.append(row)
    return rows


# --------------------------------------------------------------------------- main


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--fit", action="store_true", help="refit on the tuning part")
    parser.add_argument("--write", action="store_true", help="with --fit: write the shipped selector")
    parser.add_argument("--write-precision", type=float, default=0.78)
    parser.add_argument("--keep-precision", type=float, default=0.83)
    parser.add_argument("--l2", type=float, default=10.0)
    parser.add_argument("--meaning-scale", type=float, default=1.0)
    parser.add_argument(
        "--meaning", action="store_true", help="read the sentence's MiniLM vector too (the shipped selector does not)"
    )
    args = parser.parse_args(argv)

    texts = sources()
    rows, stale = load_rows(LABELS, texts)
    on, vectors = featurise(rows, args.meaning)
    tune = [i for i, r in enumerate(rows) if not held_out(r["conversation"])]
    test = [i for i, r in enumerate(rows) if held_out(r["conversation"])]
    print(
        f"labels: {len(rows)} ({len(tune)} tuning, {len(test)} held out; {stale} for notes no longer made); readers: {dict(Counter(r.get('reader', '?') for r in rows))}"
    )
    labels = [r["good"] for r in rows]
    kw = {"l2": args.l2, "meaning_scale": args.meaning_scale, "meaning": args.meaning}
    if args.fit:
        sub = [rows[i] for i in tune]
        cv = cross_validated(sub, [on[i] for i in tune], vectors[tune], **kw)
        # Thresholds from the randomly drawn labels only: the second round also drew from the
        # candidates an earlier fit scored high, which would flatter precision.
        rand = [j for j, r in enumerate(sub) if r.get("sample", "random") == "random"]
        rand_scores, rand_labels = [cv[j] for j in rand], [sub[j]["good"] for j in rand]
        write = threshold_for(rand_scores, rand_labels, args.write_precision)
        keep = threshold_for(rand_scores, rand_labels, args.keep_precision)
        report("tuning part, cross-validated, every label", cv, [r["good"] for r in sub], write, keep)
        report("tuning part, cross-validated, drawn at random", rand_scores, rand_labels, write, keep)
        model = fit([on[i] for i in tune], [r["good"] for r in sub], _vecs(vectors, tune, kw), **_fit_kw(kw))
        model = replace(model, write=round(write, 4), keep=round(keep, 4), note=_note(args, len(tune)))
    else:
        model = shipped()
    scores = [model.probability(on[i], vectors[i] if model.meaning else None) for i in test]
    report("held out, every label", scores, [labels[i] for i in test], model.write, model.keep)
    for source in ("export", "locomo"):
        part = [j for j, i in enumerate(test) if rows[i]["source"] == source and rows[i].get("sample") == "random"]
        report(
            f"held out, {source}, drawn at random",
            [scores[j] for j in part],
            [labels[test[j]] for j in part],
            model.write,
            model.keep,
        )
    if GOLD.exists():
        gold = [g for g in load_gold(GOLD) if g["split"] == "test"]
        for name, written in (
            ("selected", extract_gold(gold, model, texts)),
            ("every candidate", extract_gold(gold, None, texts)),
            ("first 3 statements", first_sentences(gold, texts, 3)),
        ):
            p, r, n, g = gold_figures(gold, written)
            print(
                f"gold test half ({len(gold)} messages, {g} gold notes), {name}: precision {p:.3f} recall {r:.3f} ({n} notes)"
            )
    if args.fit and args.write:
        dump_selector(model, SELECTOR_FILE)
        print(f"wrote {SELECTOR_FILE.relative_to(REPO)}")
    return 0


def _note(args: argparse.Namespace, n: int) -> str:
    return (
        f"fitted by benchmarks/bench_selection.py --fit on {n} labelled candidates (the tuning part); "
        f"write at cross-validated precision {args.write_precision}, keep at {args.keep_precision}; l2 {args.l2}"
    )


if __name__ == "__main__":
    raise SystemExit(main())
