"""Contaminants in the package, not only at the gate: the labelled calibration sets run through the whole funnel.

`vault gate-calibrate` judges each labelled candidate in isolation, a third of them contaminants.
The contamination target counts the share of *package blocks* that are labelled contaminants. This
benchmark measures that with the real funnel:

1. One vault (under ``--out``, outside the repository) holds every candidate of the labelled sets
   (``vault_example/calibration/labels.jsonl`` and ``traps.jsonl``) as an engram, indexed with MiniLM.
   For each query, the candidates labelled for the other queries are the rest of the vault.
2. Each query is asked once, with its ``intent_domain`` as the user's intent, at a 1,500-token budget.
   The offline gate that judges it is fitted **without that query** (leave one query out, the same
   fit as ``vault gate-calibrate --fit``): no figure comes from weights that saw the query.
3. Per package: blocks labelled relevant for the query, labelled contaminant, labelled off-topic
   (not a contaminant), and blocks labelled only for another query. The last are not judged for this
   query: most are off-topic, some are not (the RAM notes of "indexer memory" sit near the RAM
   query's). Recall is the share of the query's relevant candidates in its package.

Beside the funnel, in the same run: reciprocal-rank fusion of MiniLM cosine and BM25 over the same
notes, filled to the same budget; the same fusion, and MiniLM cosine alone, cut to the funnel's own
block count for each query (equal size). Also the funnel with the floor alone (``--no-gate``), to show what the gate adds.

    python benchmarks/bench_contamination.py [--out DIR] [--budget 1500]
    python benchmarks/bench_contamination.py --model openai/gpt-4o-mini [--api-base URL]

``--model`` adds a row: the same packages judged by that model as the gate (instructor + LiteLLM,
any provider by model string, judging the candidates' text, as ``vault query`` with
``[models] gate`` does). No model API is reachable from the machine these
figures were measured on, so docs/benchmarks.md has no such row yet.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections import Counter
from dataclasses import replace
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from bench_locomo import bm25_ranking, bm25_scores, rrf, words_of  # noqa: E402

from vault_pipeline import pipeline  # noqa: E402
from vault_pipeline.config import load_settings  # noqa: E402
from vault_pipeline.index.search import Index  # noqa: E402
from vault_pipeline.models.build import build_llm  # noqa: E402
from vault_pipeline.models.embed import Embedder, build_embedder  # noqa: E402
from vault_pipeline.models.offline import OfflineBackend  # noqa: E402
from vault_pipeline.models.offline.relevance import RelevanceModel  # noqa: E402
from vault_pipeline.models.protocol import StructuredLLM  # noqa: E402
from vault_pipeline.retrieve.calibrate import LabelledCandidate, load_label_files  # noqa: E402
from vault_pipeline.retrieve.funnel import run_query  # noqa: E402
from vault_pipeline.retrieve.gatefit import cross_validate, fit_model, label_signals  # noqa: E402
from vault_pipeline.retrieve.package import ContextPackage  # noqa: E402
from vault_pipeline.retrieve.types import QUERY_COLUMNS, FunnelConfig  # noqa: E402
from vault_pipeline.text import estimate_tokens  # noqa: E402
from vault_pipeline.vault.files import Vault  # noqa: E402

LABELS = [REPO / "vault_example" / "calibration" / name for name in ("labels.jsonl", "traps.jsonl")]
NOTE = """---
id: {id}
type: atomic
category: fact
status: kept
tier: engram
speaker: user
created: 2024-03-01T00:00:00+00:00
---

{text}
"""


def build(labels: list[LabelledCandidate], out: Path, embedder: Embedder) -> Vault:
    """A vault holding every labelled candidate as an engram (file stem = candidate id), indexed."""
    vault = Vault.init(out / "vault")
    for item in labels:
        path = vault.root / "engrams" / f"{item.candidate_id}.md"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(NOTE.format(id=f"e-{item.candidate_id}", text=item.candidate), encoding="utf-8")
    pipeline.index(vault, embedder)
    return vault


def verdicts(stems: list[str], query: str, labels: list[LabelledCandidate]) -> Counter:
    """How many of ``stems`` are relevant, labelled contaminants, or otherwise off-topic for ``query``."""
    mine = {item.candidate_id: item for item in labels if item.query == query}
    counts: Counter = Counter(blocks=len(stems))
    for stem in stems:
        item = mine.get(stem)
        if item is not None and item.relevant:
            counts["relevant"] += 1
        elif item is not None and item.contaminant:
            counts["contaminant"] += 1
        elif item is not None:
            counts["off_topic"] += 1
        else:
            counts["other_query"] += 1
    counts["wanted"] = sum(item.relevant for item in mine.values())
    return counts


def held_out_gates(labels: list[LabelledCandidate], embedder: Embedder) -> dict[str, RelevanceModel]:
    """Per query, the offline gate fitted on the other queries' labels (their signals read once),
    with the evidence threshold (``stop``) fitted on the other queries' held-out probabilities too."""
    from fit_evidence import f1_threshold

    rows = label_signals(labels, embedder)
    held = [(h.query, h.probability, h.relevant) for h in cross_validate(rows)]
    return {
        query: replace(
            fit_model([r for r in rows if r.item.query != query]),
            stop=f1_threshold([h for h in held if h[0] != query]),
        )
        for query in {r.item.query for r in rows}
    }


def held_out_packages(
    vault: Vault,
    asked: list[tuple[str, str | None]],
    embedder: Embedder,
    gates: dict[str, RelevanceModel],
    budget: int,
    gate: bool = True,
    llm_gate: StructuredLLM | None = None,
) -> list[ContextPackage]:
    """The package of each (query, intent), judged by that query's gate (fitted without its labels;
    ``llm_gate``: a model judging by itself), through the index as ``vault query`` opens it."""
    retriever = Index.open(vault, embedder, columns=QUERY_COLUMNS)
    settings = load_settings(vault.root)
    return [
        run_query(
            query,
            retriever=retriever,
            embedder=embedder,
            llm_plan=OfflineBackend(),
            llm_gate=llm_gate or OfflineBackend(relevance=gates[query]),
            config=FunnelConfig.from_settings(settings, embedder, budget=budget, gate_enabled=gate),
            intent=intent,
        )
        for query, intent in asked
    ]


def funnel_packages(
    vault: Vault,
    labels: list[LabelledCandidate],
    embedder: Embedder,
    gates: dict[str, RelevanceModel],
    budget: int,
    gate: bool,
    llm_gate: StructuredLLM | None = None,
) -> dict[str, list[str]]:
    """Each query's package stems, judged by the gate fitted without that query (or by ``llm_gate``)."""
    asked = sorted({(item.query, item.intent_domain) for item in labels})
    packages = held_out_packages(vault, asked, embedder, gates, budget, gate, llm_gate)
    return {
        query: [Path(block.item.path).stem for block in package.blocks] for (query, _), package in zip(asked, packages)
    }


class Fused:
    """Reciprocal-rank fusion of MiniLM cosine and BM25 over the labelled notes (embedded once)."""

    def __init__(self, labels: list[LabelledCandidate], embedder: Embedder):
        self.notes = sorted({item.candidate_id: item.candidate for item in labels}.items())
        self.queries = sorted({item.query for item in labels})
        self.vectors = np.asarray(embedder.embed([text for _, text in self.notes]))
        self.qvecs = dict(zip(self.queries, np.asarray(embedder.embed(self.queries))))
        self.docs = [words_of(text) for _, text in self.notes]

    def packages(self, budget: int, sizes: dict[str, int] | None, *, bm25: bool = True) -> dict[str, list[str]]:
        """Each query's notes in fused (or cosine) order, filled to ``budget`` (or cut to ``sizes``)."""
        out: dict[str, list[str]] = {}
        for query in self.queries:
            order = by_vector = np.argsort(-(self.vectors @ self.qvecs[query]), kind="stable")
            if bm25:
                order = rrf(by_vector, bm25_ranking(bm25_scores(self.docs, words_of(query))))
            stems, used = [], 0
            for i in order:
                cost = estimate_tokens(self.notes[int(i)][1])
                if used + cost > budget or (sizes is not None and len(stems) >= sizes[query]):
                    continue
                used += cost
                stems.append(self.notes[int(i)][0])
            out[query] = stems
        return out


def report(name: str, packages: dict[str, list[str]], labels: list[LabelledCandidate]) -> dict[str, float]:
    total: Counter = Counter()
    for query, stems in packages.items():
        total.update(verdicts(stems, query, labels))
    blocks = max(total["blocks"], 1)
    figures = {
        "blocks": total["blocks"],
        "contaminants": total["contaminant"] / blocks,
        "labelled_off_topic": (total["contaminant"] + total["off_topic"]) / blocks,
        "other_query": total["other_query"] / blocks,
        "recall": total["relevant"] / max(total["wanted"], 1),
    }
    print(
        f"{name:<52} blocks {total['blocks']:>4} ({total['blocks'] / len(packages):.1f}/query)  "
        f"contaminants {figures['contaminants']:6.1%} ({total['contaminant']})  "
        f"labelled off-topic {figures['labelled_off_topic']:6.1%} ({total['contaminant'] + total['off_topic']})  "
        f"another query's {figures['other_query']:6.1%} ({total['other_query']})  "
        f"relevant recall {figures['recall']:6.1%} ({total['relevant']}/{total['wanted']})"
    )
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="where the vault is built (default: a temporary folder)")
    parser.add_argument("--budget", type=int, default=1500)
    parser.add_argument("--labels", type=Path, nargs="+", default=LABELS)
    parser.add_argument("--model", help="also judge the packages with this gate model (a LiteLLM model string)")
    parser.add_argument("--api-base", help="the model's server, as [models] api_base")
    args = parser.parse_args(argv)
    llm = build_llm(args.model, api_base=args.api_base) if args.model else None
    labels = load_label_files(args.labels)
    embedder = build_embedder("minilm")
    with tempfile.TemporaryDirectory(prefix="vault-contamination-") as tmp:
        vault = build(labels, args.out or Path(tmp), embedder)
        queries = len({item.query for item in labels})
        print(
            f"{len(labels)} labelled candidates, {queries} queries; budget {args.budget} tokens; gate fitted leave-one-query-out"
        )
        gates = held_out_gates(labels, embedder)
        funnel = funnel_packages(vault, labels, embedder, gates, args.budget, gate=True)
        report("funnel (floor + fitted gate, held out)", funnel, labels)
        if llm is not None:
            judged = funnel_packages(vault, labels, embedder, gates, args.budget, gate=True, llm_gate=llm)
            report(f"funnel, gate model {args.model}", judged, labels)
        floor_only = funnel_packages(vault, labels, embedder, gates, args.budget, gate=False)
        report("funnel, floor only (--no-gate)", floor_only, labels)
        fused = Fused(labels, embedder)
        report("RRF (MiniLM + BM25), filled to the budget", fused.packages(args.budget, None), labels)
        sizes = {query: len(stems) for query, stems in funnel.items()}
        report("RRF, cut to the funnel's block count per query", fused.packages(args.budget, sizes), labels)
        report("MiniLM top-k, cut to the funnel's block count", fused.packages(args.budget, sizes, bm25=False), labels)
        vault.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
