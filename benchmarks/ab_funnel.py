"""Two builds' funnels on one vault, query by query in turn: paired figures on a loaded machine.

    python benchmarks/ab_funnel.py --vault /tmp/scale --a /work/main --b . --rounds 3
    python benchmarks/ab_funnel.py --vault /tmp/scale --a /work/main --b . --questions benchmarks/data/export_questions.jsonl
    python benchmarks/ab_funnel.py --vault /tmp/scale-old --vault-b /tmp/scale --a /tmp/base --b .

Each tree runs in a process of its own (``PYTHONPATH`` set to it, checked), index and embedder
opened once, the way ``bench_scale.py``'s funnel latency runs; every question goes to one build and
then the other (the order swapped each question and each round), so both meet the same load. A
query's time is its wall time minus the planner's and the gate's model time, as in
``bench_scale.py``; the query embedding is shown apart; CPU is the process's, all threads. Printed:
each build's p50/p95, the medians of the per-question differences (B - A), and how many
questions gave both builds the same blocks (a digest of each package's blocks and trace, timings
left out). Where the two builds embed differently (another embedder, or MiniLM reading another
number of tokens), neither reads the other's index: ``--vault-b`` gives B a copy of the same notes
indexed by B's build, and the digests then compare packages made from two indexes.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

WORKER = r"""
import hashlib, json, sys, time
from pathlib import Path
tree, root = Path(sys.argv[1]).resolve(), Path(sys.argv[2])
sys.path.insert(0, str(tree / "benchmarks"))
from bench_locomo import TimedLLM
from bench_scale import TimedEmbedder
import vault_pipeline
if Path(vault_pipeline.__file__).resolve().parent.parent != tree:
    sys.exit(f"vault_pipeline imported from {vault_pipeline.__file__}, not {tree}")
from vault_pipeline.models.threads import one_blas_thread
one_blas_thread()
from vault_pipeline.config import load_settings
from vault_pipeline.index.search import Index
from vault_pipeline.models.embed import MiniLMEmbedder
from vault_pipeline.models.offline import OfflineBackend
from vault_pipeline.retrieve.funnel import run_query
from vault_pipeline.retrieve.types import QUERY_COLUMNS, FunnelConfig
TIMED = {"ms", "seconds", "latency_ms", "elapsed_ms", "timings", "stage_ms"}
def untimed(v):
    if isinstance(v, dict):
        return {k: (None if k in TIMED else untimed(x)) for k, x in v.items()}
    return [untimed(x) for x in v] if isinstance(v, list) else v
embedder = TimedEmbedder(MiniLMEmbedder())
index = Index.open(str(root), embedder, columns=QUERY_COLUMNS)
config = FunnelConfig.from_settings(load_settings(root))
plan, gate = TimedLLM(OfflineBackend()), TimedLLM(OfflineBackend())
print(json.dumps({"ready": vault_pipeline.__file__}), flush=True)
for line in sys.stdin:
    plan.seconds = gate.seconds = embedder.seconds = 0.0
    cpu, started = time.process_time(), time.perf_counter()
    package = run_query(line.rstrip("\n"), retriever=index, embedder=embedder, llm_plan=plan, llm_gate=gate, config=config)
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu
    d = package.to_dict()
    digest = hashlib.sha1(json.dumps(untimed([d.get("blocks"), d.get("trace")]), sort_keys=True).encode()).hexdigest()
    print(json.dumps({"ms": (wall - plan.seconds - gate.seconds) * 1000, "embed_ms": embedder.seconds * 1000,
                      "cpu_ms": cpu * 1000, "digest": digest}), flush=True)
"""


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


class Build:
    """One tree's funnel in a process of its own, asked one question at a time."""

    def __init__(self, tree: Path, vault: Path):
        env = {**os.environ, "PYTHONPATH": str(tree)}
        self.proc = subprocess.Popen(
            [sys.executable, "-c", WORKER, str(tree), str(vault)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
            cwd=tree,
        )
        ready = self.ask_line()
        if "ready" not in ready:
            raise SystemExit(f"{tree}: the worker did not start")

    def ask_line(self) -> dict:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise SystemExit("a worker ended early (its error is above)")
        return json.loads(line)

    def ask(self, question: str) -> dict:
        assert self.proc.stdin is not None
        self.proc.stdin.write(question + "\n")
        self.proc.stdin.flush()
        return self.ask_line()

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait()


def summary(name: str, runs: list[dict]) -> str:
    wall = [r["ms"] for r in runs]
    bare = [r["ms"] - r["embed_ms"] for r in runs]
    return (
        f"{name}: p50 {percentile(wall, 0.5):.1f} ms, p95 {percentile(wall, 0.95):.1f} ms (query embedding p50 "
        f"{percentile([r['embed_ms'] for r in runs], 0.5):.1f} ms; without it p50 {percentile(bare, 0.5):.1f}, "
        f"p95 {percentile(bare, 0.95):.1f}); CPU {statistics.fmean(r['cpu_ms'] for r in runs):.1f} ms a query"
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--vault", type=Path, required=True, help="a built vault (bench_scale.py --out)")
    p.add_argument("--a", type=Path, required=True, help="the first tree (e.g. the previous build)")
    p.add_argument("--b", type=Path, required=True, help="the second tree")
    p.add_argument("--vault-b", type=Path, help="B's copy of the vault, indexed by B's build (default: --vault)")
    p.add_argument("--questions", type=Path, help="a JSONL of {'query': ...} (default: bench_scale's synthetic)")
    p.add_argument("--queries", type=int, default=60, help="synthetic questions (without --questions)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--warm", type=int, default=5, help="questions asked first and not counted")
    args = p.parse_args(argv)
    if args.questions:
        with args.questions.open(encoding="utf-8") as handle:
            qs = [str(json.loads(line)["query"]) for line in handle if line.strip()]
    else:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from bench_scale import queries

        qs = queries(args.queries, 0)
    vault_b = args.vault_b or args.vault
    builds = {"A": Build(args.a.resolve(), args.vault), "B": Build(args.b.resolve(), vault_b)}
    for q in qs[: args.warm]:
        for build in builds.values():
            build.ask(q)
    runs: dict[str, list[dict]] = {"A": [], "B": []}
    loads = []
    for round_ in range(args.rounds):
        for i, q in enumerate(qs):
            for name in ("A", "B") if (i + round_) % 2 == 0 else ("B", "A"):
                runs[name].append(builds[name].ask(q))
        loads.append(os.getloadavg()[0])
    for build in builds.values():
        build.close()
    vaults = f"vault {args.vault}" + (f" (B: {vault_b})" if vault_b != args.vault else "")
    print(f"A = {args.a}, B = {args.b}, {vaults}, {len(qs)} questions x {args.rounds} rounds")
    print(summary("A", runs["A"]))
    print(summary("B", runs["B"]))
    pairs = list(zip(runs["A"], runs["B"]))
    wall = statistics.median(b["ms"] - a["ms"] for a, b in pairs)
    bare = statistics.median((b["ms"] - b["embed_ms"]) - (a["ms"] - a["embed_ms"]) for a, b in pairs)
    cpu = statistics.median(b["cpu_ms"] - a["cpu_ms"] for a, b in pairs)
    same = sum(a["digest"] == b["digest"] for a, b in pairs)
    print(
        f"B - A, median of {len(pairs)} pairs: wall {wall:+.1f} ms, without the embedding {bare:+.1f} ms, "
        f"CPU {cpu:+.1f} ms; same blocks and trace {same}/{len(pairs)}; load after each round "
        + " ".join(f"{load:.1f}" for load in loads)
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
