"""LoCoMo retrieval benchmark: is the gold evidence turn in the context package?

Ingests ../shared/data/locomo/locomo-dev.json into a fresh vault (offline extraction), indexes
it with the configured embedder, answers every question of categories 1-4 through
`vault query --batch --json`, and prints:
  - evidence recall: share of questions with at least one gold evidence turn in the package
    (a block cites the turn as a source message, or a transcript block carries its ^m- id),
    and the share of all gold turns found;
  - package tokens (mean, p95);
  - the same for plain top-k vector retrieval filled to the same token budget;
  - funnel latency p50/p95 excluding model time (measured in-process, model calls timed apart).

Usage: python benchmarks/bench_locomo.py [--data PATH] [--out DIR] [--budget 2000] [--limit N]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from vault_pipeline import pipeline  # noqa: E402
from vault_pipeline.config import load_settings  # noqa: E402
from vault_pipeline.index.search import Index  # noqa: E402
from vault_pipeline.ingest.notes import block_id  # noqa: E402
from vault_pipeline.models.embed import build_embedder  # noqa: E402
from vault_pipeline.models.offline import OfflineBackend  # noqa: E402
from vault_pipeline.retrieve.funnel import run_query  # noqa: E402
from vault_pipeline.retrieve.types import FunnelConfig  # noqa: E402
from vault_pipeline.text import estimate_tokens  # noqa: E402
from vault_pipeline.vault.files import Vault  # noqa: E402


def questions(data: Path, limit: int | None) -> list[dict]:
    """Questions of categories 1-4 with their gold evidence ids (split on ';')."""
    out = []
    for sample in json.loads(data.read_text(encoding="utf-8")):
        for qa in sample["qa"]:
            if qa.get("category") not in (1, 2, 3, 4):
                continue
            gold = {e.strip() for ev in qa.get("evidence", []) for e in str(ev).split(";") if e.strip()}
            if gold:
                out.append(
                    {
                        "query": qa["question"],
                        "gold": sorted(gold),
                        "sample": sample["sample_id"],
                        "category": qa["category"],
                    }
                )
    return out[:limit] if limit else out


def hits(blocks: list[dict], gold: list[str]) -> set[str]:
    """Gold turns present in the blocks: cited as a source message, or their block id in the text."""
    found = set()
    for block in blocks:
        cited = set(block.get("source", {}).get("messages", []))
        for turn in gold:
            if (turn in cited and block.get("type", "atomic") != "session") or f"^{block_id(turn)}" in block["text"]:
                found.add(turn)
    return found


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))] if ordered else 0.0


def build(data: Path, out: Path, embed: str) -> tuple[Vault, float, float]:
    vault = Vault.init(out)
    started = time.perf_counter()
    report = pipeline.ingest(vault, [data], OfflineBackend())
    ingest_s = time.perf_counter() - started
    print(f"ingest: {report.conversations} sessions, {report.messages} turns, {report.notes} notes, {ingest_s:.1f}s")
    started = time.perf_counter()
    index_report = pipeline.index(vault, build_embedder(embed))
    index_s = time.perf_counter() - started
    print(f"index: {index_report.embedded_chunks} chunks from {index_report.embedded_notes} notes, {index_s:.1f}s")
    return vault, ingest_s, index_s


def run_cli_batch(vault: Vault, qs: list[dict], budget: int) -> list[dict]:
    """Every question through `vault query --batch --json` (one process, one package per line)."""
    batch = vault.root.parent / "locomo-queries.jsonl"
    batch.write_text("".join(json.dumps({"query": q["query"]}) + "\n" for q in qs), encoding="utf-8")
    command = [
        sys.executable,
        "-m",
        "vault_pipeline.cli",
        "query",
        "--batch",
        str(batch),
        "--json",
        "--budget",
        str(budget),
        "--vault",
        str(vault.root),
    ]
    result = subprocess.run(
        command, capture_output=True, text=True, check=True, env={**os.environ, "PYTHONPATH": str(REPO)}
    )
    return [json.loads(line) for line in result.stdout.splitlines() if line.strip()]


class TimedLLM:
    """Wraps a StructuredLLM and adds up the time spent inside model calls."""

    def __init__(self, inner):
        self.inner, self.model, self.remote, self.seconds = inner, inner.model, inner.remote, 0.0

    def call(self, *args, **kwargs):
        started = time.perf_counter()
        try:
            return self.inner.call(*args, **kwargs)
        finally:
            self.seconds += time.perf_counter() - started


def latency(vault: Vault, qs: list[dict], embed: str, budget: int) -> list[float]:
    """Per-query funnel time minus model time, in ms, in one process (index opened once)."""
    embedder = build_embedder(embed)
    retriever = Index.open(vault, embedder)
    config = FunnelConfig.from_settings(load_settings(vault.root), budget=budget)
    plan, gate = TimedLLM(OfflineBackend()), TimedLLM(OfflineBackend())
    run_query("warm up", retriever=retriever, embedder=embedder, llm_plan=plan, llm_gate=gate, config=config)
    times = []
    for q in qs:
        plan.seconds = gate.seconds = 0.0
        started = time.perf_counter()
        run_query(q["query"], retriever=retriever, embedder=embedder, llm_plan=plan, llm_gate=gate, config=config)
        times.append((time.perf_counter() - started - plan.seconds - gate.seconds) * 1000)
    return times


def topk_baseline(vault: Vault, qs: list[dict], embed: str, budget: int) -> list[tuple[set[str], int]]:
    """Plain top-k vector retrieval, filled in similarity order up to the same token budget."""
    embedder = build_embedder(embed)
    retriever = Index.open(vault, embedder)
    results = []
    for q in qs:
        rows = retriever.vector_search(embedder.embed([q["query"]])[0], 60)
        blocks, used = [], 0
        for row in rows:
            cost = estimate_tokens(row.text)
            if used + cost > budget:
                break
            used += cost
            blocks.append(
                {"text": row.text, "type": row.type, "source": {"messages": json.loads(row.source_messages or "[]")}}
            )
        results.append((hits(blocks, q["gold"]), used))
    return results


def summarise(name: str, found: list[set[str]], tokens: list[int], qs: list[dict]) -> None:
    any_hit = sum(1 for f in found if f) / len(qs)
    turns = sum(len(f) for f in found) / sum(len(q["gold"]) for q in qs)
    print(
        f"{name:<28} questions with evidence {any_hit:6.1%}   gold turns found {turns:6.1%}   "
        f"tokens mean {statistics.mean(tokens):7.1f}   p95 {percentile(tokens, 0.95):7.1f}"
    )
    by_cat = {}
    for f, q in zip(found, qs):
        by_cat.setdefault(q["category"], []).append(bool(f))
    print(" " * 28 + "   ".join(f"cat {c}: {sum(v) / len(v):.1%} (n={len(v)})" for c, v in sorted(by_cat.items())))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    default = Path(os.environ.get("VAULT_SHARED_DATA", REPO.parent / "shared" / "data")) / "locomo" / "locomo-dev.json"
    parser.add_argument("--data", type=Path, default=default)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--budget", type=int, default=2000)
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--embedder", default="minilm")
    args = parser.parse_args()
    if not args.data.exists():
        sys.exit(f"LoCoMo data not found at {args.data} (set VAULT_SHARED_DATA or pass --data)")
    out = args.out or Path(tempfile.mkdtemp(prefix="bench-locomo-")) / "vault"
    qs = questions(args.data, args.limit)
    print(f"LoCoMo: {len(qs)} questions (categories 1-4) from {args.data}; vault {out}")
    vault, _, _ = build(args.data, out, args.embedder)
    started = time.perf_counter()
    packages = run_cli_batch(vault, qs, args.budget)
    print(f"vault query --batch --json: {len(packages)} packages in {time.perf_counter() - started:.1f}s")
    funnel = [hits(p["blocks"], q["gold"]) for p, q in zip(packages, qs)]
    summarise("funnel (offline gate)", funnel, [p["tokens"] for p in packages], qs)
    base = topk_baseline(vault, qs, args.embedder, args.budget)
    summarise("plain top-k vector", [f for f, _ in base], [t for _, t in base], qs)
    times = latency(vault, qs, args.embedder, args.budget)
    print(
        f"funnel latency excluding model time: p50 {percentile(times, 0.5):.1f} ms, "
        f"p95 {percentile(times, 0.95):.1f} ms over {len(times)} queries"
    )
    degraded = sum(1 for p in packages if p["stats"].get("degraded"))
    print(f"packages degraded (gate fail-open): {degraded}")


if __name__ == "__main__":
    main()
