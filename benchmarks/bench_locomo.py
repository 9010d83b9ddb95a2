r"""LoCoMo retrieval benchmark: is the gold evidence turn in the context package?

Ingests each conversation of ../shared/data/locomo/locomo-dev.json into a fresh vault of its own
(offline extraction; one vault per conversation, so every method searches only the question's
own conversation), indexes it with the configured embedder, answers every question of
categories 1-4 (1 multi-hop,
2 temporal, 3 open-domain, 4 single-hop; 5 adversarial is left out) through
`vault query --batch --json`, and compares the packages with baselines measured in the same run,
all at the same token budget (`--budget`, default 1500, counted with `text.estimate_tokens`):
  - plain top-k vector: vector search over the conversation's vault, notes as stored, filled in
    similarity order until the next chunk does not fit;
  - raw turns, RRF: every LoCoMo turn is one chunk `[session date] Speaker: text`, read from the
    JSON directly; a question searches only its own conversation; turns are ranked by
    reciprocal-rank fusion (k=60) of MiniLM cosine (all turns embedded once per sample,
    L2-normalised) and BM25 Okapi (k1=1.2, b=0.75, tokens: lowercase `\w+` split, no stopwords),
    then filled greedily (a turn that does not fit is skipped, later ones may still fit);
  - raw turns, MiniLM only and BM25 only: the same with one ranking;
  - a bound beside them, not a method: each question's gold evidence turns alone, in the raw-turn
    form. Its answer words say how often the evidence itself holds half of the answer's words.

For every method and every part of the data it prints:
  - evidence hit: share of questions with at least one gold evidence turn in the package, and
    the share of all gold turns found. Counted strictly: a block must come from the question's
    own conversation (LoCoMo dia_ids repeat across samples), and it counts for a turn only if it
    carries that turn's words: an atomic note or a raw turn that cites the turn's message id,
    or any other block (session summary, transcript chunk, ...) whose text holds the turn's
    whole text (lowercase `\w+` token sequence); citing the session is not enough;
  - answer words: share of questions where at least half of the gold answer's content words
    (lowercase `\w+` tokens minus `text.STOPWORDS`) appear among the package's words;
  - package tokens (mean, p95), and evidence hit / answer words per category;
  - the funnel's atomic blocks: tokens of the block against tokens of the note's own sentence;
  - funnel latency p50/p95 excluding model time (measured in-process, model calls timed apart).

`--dev-split` fixes a split of the five samples: conv-26 and conv-30 are for tuning, conv-41,
conv-42 and conv-43 are reported; every row is then printed for the reported part and for all
samples (each row names the samples it covers). Every method searches only the question's own
conversation (its own vault; the raw turns of its own sample).

Usage: python benchmarks/bench_locomo.py [--data PATH] [--out DIR] [--budget 1500] [--limit N]
                                         [--dev-split]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from vault_pipeline import pipeline  # noqa: E402
from vault_pipeline.config import load_settings  # noqa: E402
from vault_pipeline.index.search import Index  # noqa: E402
from vault_pipeline.ingest.select import shipped  # noqa: E402
from vault_pipeline.models.embed import build_embedder  # noqa: E402
from vault_pipeline.models.offline import OfflineBackend  # noqa: E402
from vault_pipeline.models.threads import one_blas_thread  # noqa: E402
from vault_pipeline.retrieve.blocks import parse_atomic  # noqa: E402
from vault_pipeline.retrieve.funnel import run_query  # noqa: E402
from vault_pipeline.retrieve.types import QUERY_COLUMNS, FunnelConfig  # noqa: E402
from vault_pipeline.text import STOPWORDS, estimate_tokens  # noqa: E402
from vault_pipeline.vault.files import Vault  # noqa: E402

TUNE_SAMPLES = ("conv-26", "conv-30")
REPORTED_SAMPLES = ("conv-41", "conv-42", "conv-43")
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
RRF_K = 60
BM25_K1, BM25_B = 1.2, 0.75
_WORD = re.compile(r"\w+")
# Block types that stand for the turns they cite (their text is made from those turns' words).
CITING_TYPES = frozenset({"atomic", "turn"})


def words_of(text: str) -> list[str]:
    """Lowercase \\w+ tokens: the one word rule of this benchmark (BM25, evidence text, answers)."""
    return _WORD.findall(str(text).lower())


def questions(data: Path, limit: int | None, categories: tuple[int, ...] = (1, 2, 3, 4)) -> list[dict]:
    """Questions of ``categories`` (1-4 by default) with their gold evidence ids (split on ';') and gold answer."""
    out = []
    for sample in json.loads(data.read_text(encoding="utf-8")):
        for qa in sample["qa"]:
            if qa.get("category") not in categories:
                continue
            gold = {e.strip() for ev in qa.get("evidence", []) for e in str(ev).split(";") if e.strip()}
            if gold:
                out.append(
                    {
                        "query": qa["question"],
                        "gold": sorted(gold),
                        "answer": str(qa.get("answer", qa.get("adversarial_answer", ""))),
                        "sample": sample["sample_id"],
                        "category": qa["category"],
                    }
                )
    return out[:limit] if limit else out


def raw_turns(data: Path) -> dict[str, list[dict]]:
    """sample id -> its turns as chunks `[session date] Speaker: text`, citing their dia_id."""
    out: dict[str, list[dict]] = {}
    for sample in json.loads(data.read_text(encoding="utf-8")):
        conv = sample["conversation"]
        numbers = sorted(int(m.group(1)) for key in conv if (m := re.fullmatch(r"session_(\d+)", key)))
        turns = []
        for n in numbers:
            date = conv.get(f"session_{n}_date_time", "")
            for turn in conv[f"session_{n}"]:
                if not isinstance(turn, dict) or not turn.get("dia_id") or not isinstance(turn.get("text"), str):
                    continue
                turns.append(
                    {
                        "id": turn["dia_id"],
                        "text": f"[{date}] {turn.get('speaker', '')}: {turn['text']}",
                        "words": " ".join(words_of(turn["text"])),
                    }
                )
        out[sample["sample_id"]] = turns
    return out


def hits(blocks: list[dict], q: dict, turn_words: dict[tuple[str, str], str]) -> set[str]:
    """Gold turns whose words the package carries (strict; see the module docstring).

    A block from another conversation never counts. An atomic note or raw turn counts for the
    turns it cites; any other block only for the gold turns whose whole text appears in it.
    """
    found = set()
    for block in blocks:
        conversation = str(block.get("source", {}).get("conversation") or "")
        if conversation and conversation.split(":")[0] != q["sample"]:
            continue
        cited = set(block.get("source", {}).get("messages", []))
        text = None
        for turn in q["gold"]:
            if turn in found:
                continue
            if block.get("type", "atomic") in CITING_TYPES and conversation and turn in cited:
                found.add(turn)
                continue
            needle = turn_words.get((q["sample"], turn))
            if needle:
                text = f" {' '.join(words_of(block['text']))} " if text is None else text
                if f" {needle} " in text:
                    found.add(turn)
    return found


def answer_hit(text: str, answer: str) -> bool:
    """At least half of the gold answer's content words appear among the package's words."""
    wanted = {w for w in words_of(answer) if w not in STOPWORDS} or set(words_of(answer))
    if not wanted:
        return False
    have = set(words_of(text))
    return 2 * len(wanted & have) >= len(wanted)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))] if ordered else 0.0


def build(
    data: Path, out: Path, embed: str, reuse: bool = False, write_threshold: float | None = None
) -> dict[str, Vault]:
    """One vault per LoCoMo sample under ``out`` (each from a one-sample copy of the data file, kept
    beside the vaults, outside the repository), ingested offline and indexed; ``reuse``: the vaults
    an earlier run built there, as they are."""
    if reuse:
        names = [sample["sample_id"] for sample in json.loads(data.read_text(encoding="utf-8"))]
        print(f"reusing the vaults in {out}")
        return {name: Vault.open(out / name) for name in names}
    vaults = {}
    totals = Counter()
    for sample in json.loads(data.read_text(encoding="utf-8")):
        name = sample["sample_id"]
        part = out / f"{name}.json"
        part.parent.mkdir(parents=True, exist_ok=True)
        part.write_text(json.dumps([sample]), encoding="utf-8")
        vault = Vault.init(out / name)
        started = time.perf_counter()
        report = pipeline.ingest(vault, [part], OfflineBackend(), selector=shipped(write_threshold))
        totals["ingest_s"] += time.perf_counter() - started
        totals.update(sessions=report.conversations, turns=report.messages, notes=report.notes)
        started = time.perf_counter()
        index_report = pipeline.index(vault, build_embedder(embed))
        totals["index_s"] += time.perf_counter() - started
        totals.update(chunks=index_report.embedded_chunks)
        vaults[name] = vault
    print(
        f"ingest: {len(vaults)} vaults, {totals['sessions']} sessions, {totals['turns']} turns, "
        f"{totals['notes']} notes, {totals['ingest_s']:.1f}s; index: {totals['chunks']} chunks, {totals['index_s']:.1f}s"
    )
    return vaults


def run_cli_batch(vault: Vault, qs: list[dict], budget: int) -> list[dict]:
    """Every question through `vault query --batch --json` (one process, one package per line)."""
    batch = vault.root.parent / f"{vault.root.name}-queries.jsonl"
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


def latency(vaults: dict[str, Vault], qs: list[dict], embed: str, budget: int) -> list[float]:
    """Per-query funnel time minus model time, in ms, in one process (each index opened once)."""
    embedder = build_embedder(embed)
    times = []
    for sample, vault in vaults.items():
        times += _latency(vault, [q for q in qs if q["sample"] == sample], embedder, budget)
    return times


def _latency(vault: Vault, qs: list[dict], embedder, budget: int) -> list[float]:
    if not qs:
        return []
    retriever = Index.open(vault, embedder, columns=QUERY_COLUMNS)  # as ``pipeline.query`` opens it
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


def score(blocks: list[dict], tokens: int, q: dict, turn_words: dict[tuple[str, str], str]) -> dict:
    """One question's result: gold turns found, answer-words hit, package tokens."""
    text = "\n".join(block["text"] for block in blocks)
    return {"found": hits(blocks, q, turn_words), "answer": answer_hit(text, q["answer"]), "tokens": tokens}


def topk_baseline(vaults: dict[str, Vault], qs: list[dict], embed: str, budget: int, turn_words: dict) -> list[dict]:
    """Plain top-k vector retrieval over the question's own vault index (its notes' chunks, a transcript
    one chunk per message), filled in similarity order up to the budget."""
    embedder = build_embedder(embed)
    retrievers = {sample: Index.open(vault, embedder) for sample, vault in vaults.items()}
    results = []
    for q in qs:
        retriever = retrievers[q["sample"]]
        rows = retriever.vector_search(embedder.embed([q["query"]])[0], 60)
        blocks, used = [], 0
        for row in rows:
            cost = estimate_tokens(row.text)
            if used + cost > budget:
                break
            used += cost
            blocks.append(
                {
                    "text": row.text,
                    "type": row.type,
                    "source": {
                        "conversation": row.source_conversation,
                        "messages": json.loads(row.source_messages or "[]"),
                    },
                }
            )
        results.append(score(blocks, used, q, turn_words))
    return results


def adversarial(vaults: dict[str, Vault], data: Path, budget: int, limit: int | None, samples) -> None:
    """Category 5 (adversarial: the conversation never says it) asked of its own vault: how many
    packages say nothing was found, and what the rest cost."""
    qs = [q for q in questions(data, limit, (5,)) if samples is None or q["sample"] in samples]
    packages = [
        p
        for sample, vault in vaults.items()
        for p in run_cli_batch(vault, [q for q in qs if q["sample"] == sample], budget)
    ]
    if not packages:
        return
    empty = [p for p in packages if not p.get("found", True)]
    rest = [p["tokens"] for p in packages if p.get("found", True)]
    where = "reported part" if samples else "all samples"
    print(
        f"category 5 (adversarial), {where}: {len(packages)} questions; found: false {len(empty)} ({len(empty) / len(packages):.1%}); "
        f"blocks mean {statistics.mean(len(p['blocks']) for p in packages):.1f}; the found packages' tokens mean "
        f"{statistics.mean(rest) if rest else 0:.0f}"
    )


def block_overhead(vaults: dict[str, Vault], packages: list[dict], qs: list[dict]) -> None:
    """Tokens of the funnel's atomic blocks against the tokens of their notes' own sentences."""
    sentences: dict[tuple[str, str], int] = {}
    for sample, vault in vaults.items():
        rows = Index.open(vault).table.search().where("type = 'atomic'").select(["chunk_id", "text"]).limit(None)
        for row in rows.to_arrow().to_pylist():
            sentences[(sample, row["chunk_id"])] = estimate_tokens(parse_atomic(row["text"]).sentence)
    pairs = [
        (block["tokens"], sentences[(q["sample"], block["chunk_id"])])
        for p, q in zip(packages, qs)
        for block in p["blocks"]
        if block["type"] == "atomic" and sentences.get((q["sample"], block["chunk_id"]))
    ]
    if not pairs:
        return
    ratios = [b / s for b, s in pairs]
    print(
        f"atomic blocks: {len(pairs)}; block tokens / sentence tokens: {sum(b for b, _ in pairs) / sum(s for _, s in pairs):.2f} "
        f"over all blocks, per block median {statistics.median(ratios):.2f}, p95 {percentile(ratios, 0.95):.2f}"
    )


def bm25_scores(docs: list[list[str]], query: list[str]) -> np.ndarray:
    """BM25 Okapi (k1=1.2, b=0.75, idf = ln(1 + (N - df + 0.5) / (df + 0.5))) of every doc for a query."""
    n = len(docs)
    lengths = np.array([len(d) for d in docs], dtype=float)
    avg = lengths.mean() if n else 0.0
    df = Counter(w for d in docs for w in set(d))
    counts = [Counter(d) for d in docs]
    out = np.zeros(n)
    for term in set(query):
        if term not in df:
            continue
        idf = math.log(1 + (n - df[term] + 0.5) / (df[term] + 0.5))
        tf = np.array([c.get(term, 0) for c in counts], dtype=float)
        out += idf * tf * (BM25_K1 + 1) / (tf + BM25_K1 * (1 - BM25_B + BM25_B * lengths / max(avg, 1e-9)))
    return out


def bm25_ranking(scores: np.ndarray) -> np.ndarray:
    """The BM25 lane's list: only the documents sharing a term with the query, best first.

    A document with no query term is not a BM25 hit; ranking it (by position) would hand the first
    turns of a conversation a fused score as high as a real hit's.
    """
    order = np.argsort(-scores, kind="stable")
    return order[scores[order] > 0]


def rrf(*rankings: np.ndarray) -> np.ndarray:
    """Indices ordered by reciprocal-rank fusion (k=60) of several rankings (each a list of indices)."""
    fused: dict[int, float] = {}
    for ranking in rankings:
        for rank, i in enumerate(ranking, start=1):
            fused[int(i)] = fused.get(int(i), 0.0) + 1.0 / (RRF_K + rank)
    return np.array(sorted(fused, key=lambda i: (-fused[i], i)))


def fill(turns: list[dict], order: np.ndarray, budget: int) -> tuple[list[dict], int]:
    """Greedy fill in ranked order: a turn that does not fit is skipped, later ones may still fit."""
    blocks, used = [], 0
    for i in order:
        turn = turns[int(i)]
        cost = estimate_tokens(turn["text"])
        if used + cost > budget:
            continue
        used += cost
        blocks.append({"text": turn["text"], "type": "turn", "source": turn["source"]})
    return blocks, used


def raw_turn_baselines(
    turns_by_sample: dict[str, list[dict]], qs: list[dict], embed: str, budget: int, turn_words: dict
) -> dict[str, list[dict]]:
    """RRF, MiniLM-only and BM25-only retrieval over one sample's raw turns, per question."""
    embedder = build_embedder(embed)
    names = ("raw turns RRF(MiniLM+BM25)", "raw turns MiniLM only", "raw turns BM25 only")
    results: dict[str, list[dict | None]] = {name: [None] * len(qs) for name in names}
    for sample, turns in turns_by_sample.items():
        idx = [i for i, q in enumerate(qs) if q["sample"] == sample]
        if not idx or not turns:
            continue
        for turn in turns:
            turn["source"] = {"conversation": f"{sample}:raw", "messages": [turn["id"]]}
        vectors = np.asarray(embedder.embed([t["text"] for t in turns]), dtype=np.float32)
        vectors /= np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
        queries = np.asarray(embedder.embed([qs[i]["query"] for i in idx]), dtype=np.float32)
        queries /= np.maximum(np.linalg.norm(queries, axis=1, keepdims=True), 1e-12)
        docs = [words_of(t["text"]) for t in turns]
        for row, i in enumerate(idx):
            q = qs[i]
            cosine = vectors @ queries[row]
            by_vector = np.argsort(-cosine, kind="stable")
            by_bm25 = bm25_ranking(bm25_scores(docs, words_of(q["query"])))
            for name, order in zip(names, (rrf(by_vector, by_bm25), by_vector, by_bm25)):
                blocks, used = fill(turns, order, budget)
                results[name][i] = score(blocks, used, q, turn_words)
    missing = {"found": set(), "answer": False, "tokens": 0}
    return {name: [r if r is not None else missing for r in rows] for name, rows in results.items()}


def gold_turns_alone(turns_by_sample: dict[str, list[dict]], qs: list[dict], turn_words: dict) -> list[dict]:
    """Not a method: each question's gold evidence turns, `[session date] Speaker: text`, and nothing else.

    Its answer words are what the evidence itself carries in the answer's own words: a package
    can pass them only with text beyond the gold turns (a resolved date, a neighbouring turn)."""
    text = {(sample, t["id"]): t["text"] for sample, turns in turns_by_sample.items() for t in turns}
    results = []
    for q in qs:
        blocks = [
            {"text": text[(q["sample"], g)], "type": "turn", "source": {"conversation": q["sample"], "messages": [g]}}
            for g in q["gold"]
            if (q["sample"], g) in text
        ]
        results.append(score(blocks, sum(estimate_tokens(b["text"]) for b in blocks), q, turn_words))
    return results


def summarise(name: str, results: list[dict], qs: list[dict], samples: tuple[str, ...] | None) -> None:
    """One method's row over the questions of ``samples`` (all when None), with a per-category line."""
    pairs = [(r, q) for r, q in zip(results, qs) if samples is None or q["sample"] in samples]
    if not pairs:
        return
    covered = ",".join(sorted({q["sample"] for _, q in pairs}))
    label = "all samples" if samples is None else "reported"
    tokens = [r["tokens"] for r, _ in pairs]
    evidence = sum(1 for r, _ in pairs if r["found"]) / len(pairs)
    turns = sum(len(r["found"]) for r, _ in pairs) / sum(len(q["gold"]) for _, q in pairs)
    answers = sum(1 for r, _ in pairs if r["answer"]) / len(pairs)
    print(f"{name}  [{label}: {covered}; n={len(pairs)}]")
    print(
        f"    evidence hit {evidence:6.1%}   gold turns found {turns:6.1%}   answer words {answers:6.1%}   "
        f"tokens mean {statistics.mean(tokens):7.1f}   p95 {percentile(tokens, 0.95):7.1f}"
    )
    by_cat: dict[int, list[dict]] = {}
    for r, q in pairs:
        by_cat.setdefault(q["category"], []).append(r)
    print(
        "    "
        + "   ".join(
            f"{c} {CATEGORIES[c]} (n={len(v)}): ev {sum(1 for r in v if r['found']) / len(v):.1%}"
            f" ans {sum(1 for r in v if r['answer']) / len(v):.1%}"
            for c, v in sorted(by_cat.items())
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    default = Path(os.environ.get("VAULT_SHARED_DATA", REPO.parent / "shared" / "data")) / "locomo" / "locomo-dev.json"
    parser.add_argument("--data", type=Path, default=default)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--budget", type=int, default=1500)
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--embedder", default="minilm")
    parser.add_argument("--reuse", action="store_true", help="reuse the vaults an earlier run built in --out")
    parser.add_argument(
        "--write-threshold", type=float, default=None, help="the selector's write bar (default: the shipped one)"
    )
    parser.add_argument(
        "--dev-split",
        action="store_true",
        help=f"also report on {', '.join(REPORTED_SAMPLES)} only ({', '.join(TUNE_SAMPLES)} are for tuning)",
    )
    args = parser.parse_args()
    if not args.data.exists():
        sys.exit(f"LoCoMo data not found at {args.data} (set VAULT_SHARED_DATA or pass --data)")
    one_blas_thread()  # as ``vault`` does at start: the funnel's latency is timed in this process
    out = args.out or Path(tempfile.mkdtemp(prefix="bench-locomo-"))
    qs = questions(args.data, args.limit)
    turns_by_sample = raw_turns(args.data)
    turn_words = {(sample, t["id"]): t["words"] for sample, turns in turns_by_sample.items() for t in turns}
    print(f"LoCoMo: {len(qs)} questions (categories 1-4) from {args.data}; vaults in {out}; budget {args.budget}")
    vaults = build(args.data, out, args.embedder, args.reuse and args.out is not None, args.write_threshold)
    started = time.perf_counter()
    by_sample = {
        sample: iter(run_cli_batch(vault, [q for q in qs if q["sample"] == sample], args.budget))
        for sample, vault in vaults.items()
        if any(q["sample"] == sample for q in qs)
    }
    packages = [next(by_sample[q["sample"]]) for q in qs]
    print(f"vault query --batch --json: {len(packages)} packages in {time.perf_counter() - started:.1f}s")
    methods = {
        "funnel (offline gate)": [score(p["blocks"], p["tokens"], q, turn_words) for p, q in zip(packages, qs)],
        "plain top-k vector (index rows: notes, message chunks)": topk_baseline(
            vaults, qs, args.embedder, args.budget, turn_words
        ),
    }
    started = time.perf_counter()
    methods.update(raw_turn_baselines(turns_by_sample, qs, args.embedder, args.budget, turn_words))
    print(f"raw-turn baselines: {time.perf_counter() - started:.1f}s")
    methods["gold evidence turns alone (a bound, not a method)"] = gold_turns_alone(turns_by_sample, qs, turn_words)
    parts = [REPORTED_SAMPLES, None] if args.dev_split else [None]
    if args.dev_split:
        print(f"dev split: tuning {', '.join(TUNE_SAMPLES)}; reported {', '.join(REPORTED_SAMPLES)}")
    for samples in parts:
        print()
        for name, results in methods.items():
            summarise(name, results, qs, samples)
    print()
    adversarial(vaults, args.data, args.budget, args.limit, REPORTED_SAMPLES if args.dev_split else None)
    block_overhead(vaults, packages, qs)
    times = latency(vaults, qs, args.embedder, args.budget)
    print(
        f"funnel latency excluding model time: p50 {percentile(times, 0.5):.1f} ms, "
        f"p95 {percentile(times, 0.95):.1f} ms over {len(times)} queries"
    )
    degraded = sum(1 for p in packages if p["stats"].get("degraded"))
    print(f"packages degraded (gate fail-open): {degraded}")


if __name__ == "__main__":
    main()
